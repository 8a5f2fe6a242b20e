#include "core/common.h"
#include "core/signals.h"
#include "core/util.h"

#include <signal.h>
#include <time.h>

static volatile sig_atomic_t stop_signal;
static volatile sig_atomic_t reload_pending;

static void on_stop(int signo)
{
	stop_signal = signo;
}

static void on_hup(int signo)
{
	(void)signo;
	reload_pending = 1;
}

void kb_signals_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	/* no SA_RESTART: a blocking poll/read returns EINTR so loops see the flag */
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = on_hup;
	sigaction(SIGHUP, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

bool kb_stop_requested(void)
{
	return stop_signal != 0;
}

int kb_stop_signal(void)
{
	return stop_signal;
}

bool kb_reload_requested(void)
{
	if (!reload_pending)
		return false;
	reload_pending = 0;
	return true;
}

void kb_request_stop(int signo)
{
	stop_signal = signo ? signo : SIGTERM;
}

void kb_reset_stop(void)
{
	stop_signal = 0;
}

int kb_sleep_ms(int64_t ms)
{
	while (ms > 0) {
		int64_t slice = ms < 50 ? ms : 50;
		struct timespec ts = { (time_t)(slice / 1000), (long)(slice % 1000) * 1000000L };

		if (kb_stop_requested())
			return KB_ECANCELLED;
		nanosleep(&ts, NULL);
		ms -= slice;
	}
	return kb_stop_requested() ? KB_ECANCELLED : 0;
}
