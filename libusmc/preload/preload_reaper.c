// SPDX-License-Identifier: MIT
/*
 * Background closes of SMC-R connections (docs/preload.md): close()
 * returns at once, as the kernel's does, while a thread of the preload
 * gives the connection its linger time.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "preload.h"

struct reap {
	struct usmc_conn *c;
	bool abort_it;
	struct reap *next;
};

#define REAPER_EXIT_WAIT_S 10 /* at exit, the most the closes queued are waited for */

static pthread_mutex_t reap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reap_cond = PTHREAD_COND_INITIALIZER; /* a change below */
static struct reap *reap_head, *reap_tail;		    /* reap_lock */
static int reap_busy;	      /* reap_lock: items taken and not yet closed */
static pid_t reap_thread_pid; /* reap_lock: the process whose reaper thread runs */

static int reap_one(struct usmc_conn *c, bool abort_it)
{
	return abort_it ? usmc_abort(c) : usmc_close(c);
}

static void *reaper_main(void *arg)
{
	(void)arg;
	in_lib_thread();
	pthread_mutex_lock(&reap_lock);
	for (;;) {
		struct reap *r;

		while (!reap_head)
			pthread_cond_wait(&reap_cond, &reap_lock);
		r = reap_head;
		reap_head = r->next;
		if (!reap_head)
			reap_tail = NULL;
		reap_busy++;
		pthread_mutex_unlock(&reap_lock);
		reap_one(r->c, r->abort_it);
		free(r);
		pthread_mutex_lock(&reap_lock);
		reap_busy--;
		pthread_cond_broadcast(&reap_cond);
	}
	return NULL;
}

void reaper_close(struct usmc_conn *c, bool abort_it)
{
	struct reap *r = malloc(sizeof(*r));
	bool inline_close = !r;

	pthread_mutex_lock(&reap_lock);
	if (r && reap_thread_pid != my_pid) {
		if (preload_thread_start(reaper_main, NULL, "usmc-preload", 0) == 0)
			reap_thread_pid = my_pid;
		else
			inline_close = true;
	}
	if (!inline_close) {
		r->c = c;
		r->abort_it = abort_it;
		r->next = NULL;
		if (reap_tail)
			reap_tail->next = r;
		else
			reap_head = r;
		reap_tail = r;
		pthread_cond_signal(&reap_cond);
	}
	pthread_mutex_unlock(&reap_lock);
	if (inline_close) {
		free(r);
		IN_LIB(reap_one(c, abort_it));
	}
}

/* At exit: the closes queued get their linger time, as the kernel would
 * send a closed socket's data after the process ended (bounded). */
void reaper_flush(void)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += REAPER_EXIT_WAIT_S;
	pthread_mutex_lock(&reap_lock);
	while (reap_thread_pid == my_pid && (reap_head || reap_busy))
		if (pthread_cond_timedwait(&reap_cond, &reap_lock, &dl) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&reap_lock);
}

/* A child of fork(): the closes queued are the parent's to do. */
void reaper_fork_child(void)
{
	pthread_mutex_init(&reap_lock, NULL);
	pthread_cond_init(&reap_cond, NULL);
	reap_head = reap_tail = NULL;
	reap_busy = 0;
}
