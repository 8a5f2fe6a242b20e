#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/state.h"
#include "core/util.h"
#include "llm/pool.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

/*
 * One mutex guards the queues; a call's own copies (messages, info) are
 * touched by one thread at a time: the submitter until it is queued, its
 * thread while it runs, the taker after it is done.
 */

struct call {
	int64_t ticket;
	void *payload;
	size_t model;
	struct kb_llm_estimate est;
	/* owned copies of the request and the record's fields */
	struct kb_llm_message *messages;
	size_t nr_messages;
	struct kb_llm_request req;
	struct kb_llm_call_info info;
	char *purpose, *info_purpose, *call_key, *request_hash;
	/* the outcome */
	int rc;
	struct kb_llm_reply reply;
	struct call *next;
};

struct worker {
	struct kb_llm_pool *pool;
	pthread_t thread;
	struct kb_llm_client *client;
	struct kb_state *st;
};

struct kb_llm_pool {
	const struct kb_config *cfg;
	char *state_dir;
	size_t max;
	int64_t backoff_base_ms, backoff_max_ms;
	pthread_mutex_t lock;
	pthread_cond_t work, done_cv;
	struct call *queue, **queue_tail;     /* submitted, not started */
	struct call *done, **done_tail;       /* completed, not taken */
	size_t running, peak;
	size_t *running_per_model;
	int64_t *hold_until;                  /* per model, kb_now_ms()'s clock */
	int64_t next_ticket;
	int abort;                            /* read by transfers (http.h) */
	bool stopping;
	struct worker *workers;
	size_t nr_workers;
	int64_t reserved_tokens;
	double reserved_usd;
};

static void call_free(struct call *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nr_messages; i++) {
		free((char *)c->messages[i].role);
		free((char *)c->messages[i].content);
	}
	free(c->messages);
	free(c->purpose);
	free(c->info_purpose);
	free(c->call_key);
	free(c->request_hash);
	kb_llm_reply_release(&c->reply);
	free(c);
}

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

/* The first queued call whose model may take one more now; NULL: none (*wake: when one may). */
static struct call **dispatchable(struct kb_llm_pool *p, int64_t now, int64_t *wake)
{
	const struct kb_config *cfg = p->cfg;

	*wake = 0;
	for (struct call **pc = &p->queue; *pc; pc = &(*pc)->next) {
		size_t m = (*pc)->model;
		int64_t cap = m < cfg->nr_llm_models && cfg->llm_models[m].max_in_flight > 0
			? cfg->llm_models[m].max_in_flight : 1;

		if (m < cfg->nr_llm_models && (int64_t)p->running_per_model[m] >= cap)
			continue;
		if (m < cfg->nr_llm_models && p->hold_until[m] > now) {
			if (!*wake || p->hold_until[m] < *wake)
				*wake = p->hold_until[m];
			continue;
		}
		return pc;
	}
	return NULL;
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *lock, int64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(cv, lock, &ts);
}

/* Under the lock: the next call this thread runs, NULL when the pool stops. */
static struct call *take_work(struct kb_llm_pool *p)
{
	for (;;) {
		int64_t wake;
		struct call **pc, *c;

		if (p->stopping)
			return NULL;
		pc = dispatchable(p, kb_now_ms(), &wake);
		if (pc) {
			c = *pc;
			*pc = c->next;
			if (!*pc)
				p->queue_tail = pc;
			c->next = NULL;
			if (c->model < p->cfg->nr_llm_models)
				p->running_per_model[c->model]++;
			p->running++;
			if (p->running > p->peak)
				p->peak = p->running;
			return c;
		}
		if (wake)
			timed_wait(&p->work, &p->lock, wake - kb_now_ms() > 0 ? wake - kb_now_ms() : 1);
		else
			pthread_cond_wait(&p->work, &p->lock);
	}
}

static void run_call(struct worker *w, struct call *c)
{
	struct kb_llm_pool *p = w->pool;

	if (!w->client && kb_llm_client_new(&w->client, p->cfg)) {
		c->rc = -1;
		c->reply.status = KB_LLM_TRANSPORT;
		strbuf_addstr(&c->reply.error, "llm: no client for a model call");
		return;
	}
	kb_llm_client_set_backoff(w->client, p->backoff_base_ms, p->backoff_max_ms);
	if (!w->st && kb_state_open(&w->st, p->state_dir)) {
		c->rc = -1;
		c->reply.status = KB_LLM_TRANSPORT;
		strbuf_addstr(&c->reply.error, "llm: the state store could not be opened for a model call");
		return;
	}
	c->rc = kb_llm_call_unchecked(w->client, w->st, c->model, &c->req, &c->info, &c->reply);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct kb_llm_pool *p = w->pool;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct call *c = take_work(p);

		if (!c)
			break;
		pthread_mutex_unlock(&p->lock);
		run_call(w, c);
		pthread_mutex_lock(&p->lock);
		p->running--;
		if (c->model < p->cfg->nr_llm_models) {
			p->running_per_model[c->model]--;
			if (c->reply.hold_until_ms > p->hold_until[c->model])
				p->hold_until[c->model] = c->reply.hold_until_ms;
		}
		p->reserved_tokens -= c->est.prompt_tokens + c->est.completion_tokens;
		p->reserved_usd -= c->est.cost_usd;
		*p->done_tail = c;
		p->done_tail = &c->next;
		pthread_cond_broadcast(&p->done_cv);
		/* a model's slot is free again */
		pthread_cond_broadcast(&p->work);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int kb_llm_pool_new(struct kb_llm_pool **out, const struct kb_config *cfg, const char *state_dir,
		    size_t max_in_flight)
{
	struct kb_llm_pool *p = xcalloc(1, sizeof(*p));
	size_t n = cfg->nr_llm_models ? cfg->nr_llm_models : 1;

	p->cfg = cfg;
	p->state_dir = xstrdup(state_dir);
	p->max = max_in_flight ? max_in_flight : 1;
	p->backoff_base_ms = 1000;
	p->backoff_max_ms = 60000;
	p->queue_tail = &p->queue;
	p->done_tail = &p->done;
	p->running_per_model = xcalloc(n, sizeof(*p->running_per_model));
	p->hold_until = xcalloc(n, sizeof(*p->hold_until));
	p->workers = xcalloc(p->max, sizeof(*p->workers));
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	*out = p;
	return 0;
}

void kb_llm_pool_set_backoff(struct kb_llm_pool *p, int64_t base_ms, int64_t max_wait_ms)
{
	pthread_mutex_lock(&p->lock);
	p->backoff_base_ms = base_ms;
	p->backoff_max_ms = max_wait_ms;
	pthread_mutex_unlock(&p->lock);
}

/* Under the lock: one more thread when every thread is busy and the pool may grow. */
static void grow(struct kb_llm_pool *p)
{
	struct worker *w;
	size_t queued = 0;

	for (struct call *c = p->queue; c; c = c->next)
		queued++;
	/* a thread for every call queued or running, up to the limit */
	if (p->nr_workers >= p->max || p->nr_workers >= p->running + queued)
		return;
	w = &p->workers[p->nr_workers];
	w->pool = p;
	if (pthread_create(&w->thread, NULL, worker_main, w)) {
		log_warn("llm: could not start a thread for model calls: %s", strerror(errno));
		return;
	}
	p->nr_workers++;
}

int64_t kb_llm_pool_submit(struct kb_llm_pool *p, size_t model, const struct kb_llm_request *req,
			   const struct kb_llm_call_info *info, const struct kb_llm_estimate *est,
			   void *payload)
{
	struct call *c = xcalloc(1, sizeof(*c));
	int64_t ticket;

	c->payload = payload;
	c->model = model;
	if (est)
		c->est = *est;
	c->nr_messages = req->nr_messages;
	c->messages = xcalloc(req->nr_messages ? req->nr_messages : 1, sizeof(*c->messages));
	for (size_t i = 0; i < req->nr_messages; i++) {
		c->messages[i].role = dup_or_null(req->messages[i].role);
		c->messages[i].content = dup_or_null(req->messages[i].content);
	}
	c->req = *req;
	c->req.messages = c->messages;
	c->purpose = dup_or_null(req->purpose);
	c->req.purpose = c->purpose;
	c->req.abort = &p->abort;
	c->info = *info;
	c->info_purpose = dup_or_null(info->purpose);
	c->call_key = dup_or_null(info->call_key);
	c->request_hash = dup_or_null(info->request_hash);
	c->info.purpose = c->info_purpose;
	c->info.call_key = c->call_key;
	c->info.request_hash = c->request_hash;
	kb_llm_reply_init(&c->reply);

	pthread_mutex_lock(&p->lock);
	ticket = c->ticket = ++p->next_ticket;
	*p->queue_tail = c;
	p->queue_tail = &c->next;
	p->reserved_tokens += c->est.prompt_tokens + c->est.completion_tokens;
	p->reserved_usd += c->est.cost_usd;
	grow(p);
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
	return ticket;
}

int kb_llm_pool_next(struct kb_llm_pool *p, int64_t timeout_ms, struct kb_llm_pool_done *done)
{
	int64_t end = timeout_ms >= 0 ? kb_now_ms() + timeout_ms : 0;
	struct call *c;
	int rc;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		if (p->done) {
			c = p->done;
			p->done = c->next;
			if (!p->done)
				p->done_tail = &p->done;
			break;
		}
		if (!p->queue && !p->running) {
			rc = KB_ENOTFOUND;
			goto unlock;
		}
		if (timeout_ms >= 0 && kb_now_ms() >= end) {
			rc = KB_ETIMEOUT;
			goto unlock;
		}
		/* in slices: a stop request is the caller's to see */
		timed_wait(&p->done_cv, &p->lock, timeout_ms >= 0 && end - kb_now_ms() < 200
			   ? (end - kb_now_ms() > 0 ? end - kb_now_ms() : 1) : 200);
		if (!p->done && kb_stop_requested() && !__atomic_load_n(&p->abort, __ATOMIC_RELAXED)) {
			rc = KB_ECANCELLED;
			goto unlock;
		}
	}
	pthread_mutex_unlock(&p->lock);
	done->ticket = c->ticket;
	done->payload = c->payload;
	done->model = c->model;
	done->rc = c->rc;
	done->reply = c->reply;
	kb_llm_reply_init(&c->reply);
	call_free(c);
	return 0;
unlock:
	pthread_mutex_unlock(&p->lock);
	return rc;
}

void kb_llm_pool_abort(struct kb_llm_pool *p)
{
	pthread_mutex_lock(&p->lock);
	__atomic_store_n(&p->abort, 1, __ATOMIC_RELAXED);
	/* calls not started complete at once, as stopped */
	while (p->queue) {
		struct call *c = p->queue;

		p->queue = c->next;
		c->next = NULL;
		c->rc = KB_ECANCELLED;
		c->reply.status = KB_LLM_TRANSPORT;
		strbuf_addstr(&c->reply.error, "aborted before it started");
		p->reserved_tokens -= c->est.prompt_tokens + c->est.completion_tokens;
		p->reserved_usd -= c->est.cost_usd;
		*p->done_tail = c;
		p->done_tail = &c->next;
	}
	p->queue_tail = &p->queue;
	pthread_cond_broadcast(&p->done_cv);
	pthread_mutex_unlock(&p->lock);
}

size_t kb_llm_pool_in_flight(struct kb_llm_pool *p)
{
	size_t n = 0;

	pthread_mutex_lock(&p->lock);
	n = p->running;
	for (struct call *c = p->queue; c; c = c->next)
		n++;
	pthread_mutex_unlock(&p->lock);
	return n;
}

void kb_llm_pool_reserved(struct kb_llm_pool *p, int64_t *tokens, double *usd)
{
	pthread_mutex_lock(&p->lock);
	*tokens = p->reserved_tokens;
	*usd = p->reserved_usd;
	pthread_mutex_unlock(&p->lock);
}

size_t kb_llm_pool_peak(struct kb_llm_pool *p)
{
	size_t n;

	pthread_mutex_lock(&p->lock);
	n = p->peak;
	pthread_mutex_unlock(&p->lock);
	return n;
}

void kb_llm_pool_free(struct kb_llm_pool *p)
{
	struct call *c, *next;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	__atomic_store_n(&p->abort, 1, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	for (size_t i = 0; i < p->nr_workers; i++) {
		pthread_join(p->workers[i].thread, NULL);
		kb_llm_client_free(p->workers[i].client);
		kb_state_close(p->workers[i].st);
	}
	for (c = p->queue; c; c = next) {
		next = c->next;
		call_free(c);
	}
	for (c = p->done; c; c = next) {
		next = c->next;
		call_free(c);
	}
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done_cv);
	free(p->workers);
	free(p->running_per_model);
	free(p->hold_until);
	free(p->state_dir);
	free(p);
}
