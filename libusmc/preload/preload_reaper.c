// SPDX-License-Identifier: MIT
/*
 * Background closes of SMC-R connections (docs/preload.md): close()
 * returns at once, as the kernel's does, while threads of the preload
 * give the connections their linger time. The closes linger side by side
 * on a small pool of threads, each until its own deadline counted from
 * its close(): a peer that never reads costs one linger time, not one
 * per connection closed before it. Beyond REAPER_MAX_PENDING closes in
 * progress a close is abortive, as Linux resets orphans beyond
 * tcp_max_orphans.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "../clock.h"
#include "preload.h"

struct reap {
	struct usmc_conn *c;
	bool abort_it;
	long deadline_ms; /* CLOCK_MONOTONIC: its close() plus its linger */
	struct reap *next;
};

#define REAPER_EXIT_WAIT_S 10	/* at exit, the most the closes queued are waited for */
#define REAPER_IDLE_MS	   2000 /* a thread with nothing to close for so long ends */

static pthread_mutex_t reap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reap_cond = PTHREAD_COND_INITIALIZER; /* work queued */
static pthread_cond_t reap_done = PTHREAD_COND_INITIALIZER; /* a close or a thread ended */
static struct reap *reap_head, *reap_tail;		    /* reap_lock */
static int reap_queued;					    /* reap_lock: items not yet taken */
static int reap_busy;		   /* reap_lock: items taken and not yet closed */
static int reap_threads;	   /* reap_lock: threads of this process that run reaper_main */
static int reap_idle;		   /* reap_lock: those of them waiting for work */
static pid_t reap_pid;		   /* reap_lock: the process the counts above are of */
static atomic_ulong reap_overflow; /* closes made abortive by the cap */

/* @ms from now on the wall clock, which the reaper's conditions (made
 * with PTHREAD_COND_INITIALIZER) wait by. */
static void realtime_in(long ms, struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* The linger left is what remains of the deadline set at close(): the
 * time spent in the queue is part of the connection's linger. */
static int reap_one(struct reap *r)
{
	long left = r->deadline_ms - clock_now_ms();

	if (r->abort_it)
		return usmc_abort(r->c);
	usmc_conn_setopt(r->c, USMC_OPT_LINGER_MS, left > 0 ? left : 0);
	return usmc_close(r->c);
}

/* Waits for an item; NULL after REAPER_IDLE_MS without one, the thread
 * no longer counted. Requires reap_lock. */
static struct reap *reap_take_locked(void)
{
	struct timespec dl;
	struct reap *r;

	realtime_in(REAPER_IDLE_MS, &dl);
	while (!reap_head) {
		int rc;

		reap_idle++;
		rc = pthread_cond_timedwait(&reap_cond, &reap_lock, &dl);
		reap_idle--;
		if (rc == ETIMEDOUT && !reap_head) {
			reap_threads--;
			pthread_cond_broadcast(&reap_done);
			return NULL;
		}
	}
	r = reap_head;
	reap_head = r->next;
	if (!reap_head)
		reap_tail = NULL;
	reap_queued--;
	reap_busy++;
	return r;
}

static void *reaper_main(void *arg)
{
	struct reap *r;

	(void)arg;
	in_lib_thread();
	pthread_mutex_lock(&reap_lock);
	while ((r = reap_take_locked())) {
		pthread_mutex_unlock(&reap_lock);
		reap_one(r);
		free(r);
		pthread_mutex_lock(&reap_lock);
		reap_busy--;
		pthread_cond_broadcast(&reap_done);
	}
	pthread_mutex_unlock(&reap_lock);
	return NULL;
}

/* One more thread when the queue holds more than the idle threads take,
 * up to REAPER_MAX_THREADS; false when none runs and none starts.
 * Requires reap_lock. */
static bool reap_staff_locked(void)
{
	if (reap_pid != my_pid) { /* a child of fork() has none of the threads */
		reap_pid = my_pid;
		reap_threads = reap_idle = 0;
	}
	if (reap_queued >= reap_idle && reap_threads < REAPER_MAX_THREADS &&
	    preload_thread_start(reaper_main, NULL, "usmc-preload", 0) == 0)
		reap_threads++;
	return reap_threads > 0;
}

static void reap_overflowed(void)
{
	unsigned long n = atomic_fetch_add(&reap_overflow, 1) + 1;

	/* the first and then one line in 1024: a flood is seen, not logged */
	if (n % 1024 == 1)
		preload_log(0,
			    "%d closes in progress: close of an SMC-R connection "
			    "made abortive (%lu so far)",
			    REAPER_MAX_PENDING, n);
}

void reaper_close(struct usmc_conn *c, bool abort_it)
{
	struct reap *r = malloc(sizeof(*r));
	bool inline_close = !r, full = false;
	long linger = 0;

	if (r && !abort_it)
		usmc_conn_getopt(c, USMC_OPT_LINGER_MS, &linger);
	pthread_mutex_lock(&reap_lock);
	if (r && reap_queued + reap_busy >= REAPER_MAX_PENDING)
		inline_close = full = true;
	else if (r && !reap_staff_locked())
		inline_close = true;
	if (!inline_close) {
		*r = (struct reap){
			.c = c, .abort_it = abort_it, .deadline_ms = clock_now_ms() + linger};
		if (reap_tail)
			reap_tail->next = r;
		else
			reap_head = r;
		reap_tail = r;
		reap_queued++;
		pthread_cond_signal(&reap_cond);
	}
	pthread_mutex_unlock(&reap_lock);
	if (!inline_close)
		return;
	free(r);
	if (full)
		reap_overflowed();
	IN_LIB(full || abort_it ? usmc_abort(c) : usmc_close(c));
}

unsigned long reaper_overflows(void)
{
	return atomic_load(&reap_overflow);
}

/* At exit: the closes queued get their linger time, as the kernel would
 * send a closed socket's data after the process ended (bounded). */
void reaper_flush(void)
{
	struct timespec dl;

	realtime_in(REAPER_EXIT_WAIT_S * 1000L, &dl);
	pthread_mutex_lock(&reap_lock);
	while (reap_pid == my_pid && (reap_queued || reap_busy))
		if (pthread_cond_timedwait(&reap_done, &reap_lock, &dl) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&reap_lock);
}

/* A child of fork(): the closes queued are the parent's to do. */
void reaper_fork_child(void)
{
	pthread_mutex_init(&reap_lock, NULL);
	pthread_cond_init(&reap_cond, NULL);
	pthread_cond_init(&reap_done, NULL);
	reap_head = reap_tail = NULL;
	reap_queued = reap_busy = reap_threads = reap_idle = 0;
	reap_pid = 0;
	atomic_store(&reap_overflow, 0); /* the child counts its own */
}
