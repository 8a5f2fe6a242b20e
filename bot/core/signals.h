#ifndef KB_SIGNALS_H
#define KB_SIGNALS_H
/*
 * SIGTERM and SIGINT ask the program to stop: handlers only set a flag;
 * long loops (the job loop, the subprocess runner) poll kb_stop_requested()
 * at safe points, finish the transaction in hand, kill their children and
 * return KB_ECANCELLED. SIGHUP asks for a config reload, taken by the daemon
 * loop with kb_reload_requested(). SIGPIPE is ignored (writes return EPIPE).
 */
#include "core/common.h"

void kb_signals_install(void);
bool kb_stop_requested(void);
/* The signal that asked for the stop (0: none). */
int kb_stop_signal(void);
/* True once per SIGHUP received since the last call. */
bool kb_reload_requested(void);
/* For tests and for in-process stops (e.g. a cancel from the forge). */
void kb_request_stop(int signo);
void kb_reset_stop(void);

/*
 * Sleep ms milliseconds in slices of at most 50 ms, so that a stop is seen
 * within a slice: KB_ECANCELLED as soon as one is requested (before the
 * first slice too), 0 when the whole time passed. ms <= 0 only checks.
 */
int kb_sleep_ms(int64_t ms);

#endif
