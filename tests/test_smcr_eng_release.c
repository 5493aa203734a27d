// SPDX-License-Identifier: MIT
/*
 * The progress thread gives the token up (smcr_eng_progress_release())
 * while a need for it arrives: completions must then still run at once.
 * Each need the library raises from an application thread is tried: a
 * hold (an LLC flow, smcr_eng_hold()), a new readiness descriptor
 * (smcr_conn_fd(): fd_users, then smcr_eng_want_progress()) and a post
 * that found the send queue full (any_pending, then the same call).
 *
 * The interleaving is forced, not hoped for: the test is linked with
 * --wrap=pthread_mutex_unlock, and when the releasing thread has just
 * unlocked smcr_eng.lock, it waits there while another thread raises the
 * need. A release that decided under one hold of the lock and passed the
 * token under another left it free behind the need, with nobody kicked:
 * the need then waited for the progress thread's next tick. Afterwards the
 * test requires the progress thread to own the token with a kick pending.
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/check.h"
#include "eng_sim.h"
#include "smcr_eng.h"

enum need { NEED_HOLD, NEED_READINESS, NEED_SEND_QUEUE, NEED_KINDS };

static const char *const need_name[NEED_KINDS] = {"a hold", "a readiness descriptor",
						  "a full send queue"};

static struct smcr_eng eng;
static int progress_fd;
static pthread_t releaser;
static atomic_bool pause_armed;
static sem_t raise_go, raise_done;
static enum need raising;

int __real_pthread_mutex_unlock(pthread_mutex_t *m);
int __wrap_pthread_mutex_unlock(pthread_mutex_t *m);

/* The releaser stops right after it unlocked the engine, once, and lets
 * the raiser run. */
int __wrap_pthread_mutex_unlock(pthread_mutex_t *m)
{
	int rc = __real_pthread_mutex_unlock(m);

	if (m == &eng.lock && pthread_equal(pthread_self(), releaser) &&
	    atomic_exchange(&pause_armed, false)) {
		sem_post(&raise_go);
		while (sem_wait(&raise_done))
			;
	}
	return rc;
}

static void no_dispatch(enum sim_cq cq, int who)
{
	(void)cq;
	(void)who;
}

/* As the library raises each need from an application thread. */
static void raise_need(enum need n)
{
	switch (n) {
	case NEED_HOLD:
		smcr_eng_hold(&eng);
		break;
	case NEED_READINESS:
		atomic_fetch_add(&eng.fd_users, 1);
		smcr_eng_want_progress(&eng);
		break;
	default:
		atomic_store(&sim_lnk.any_pending, true);
		smcr_eng_want_progress(&eng);
		break;
	}
}

static void drop_need(enum need n)
{
	switch (n) {
	case NEED_HOLD:
		smcr_eng_unhold(&eng);
		break;
	case NEED_READINESS:
		atomic_fetch_sub(&eng.fd_users, 1);
		break;
	default:
		atomic_store(&sim_lnk.any_pending, false);
		break;
	}
}

static void *raiser(void *arg)
{
	(void)arg;
	for (;;) {
		while (sem_wait(&raise_go))
			;
		if (raising == NEED_KINDS)
			return NULL;
		raise_need(raising);
		sem_post(&raise_done);
	}
}

static bool kick_pending(void)
{
	uint64_t v;

	return read(progress_fd, &v, sizeof(v)) == sizeof(v) && v > 0;
}

static int owner(void)
{
	int o;

	pthread_mutex_lock(&eng.lock);
	o = eng.owner;
	pthread_mutex_unlock(&eng.lock);
	return o;
}

/* The progress thread owns the token, nothing needs it, and it lets go
 * while @n arrives: it must end up taking the token back, kicked. False
 * (said why) if it did not. */
static bool release_against(enum need n)
{
	bool released, kicked, ok;

	CHECK(smcr_eng_progress_take(&eng, true),
	      "the progress thread could not take a free token");
	raising = n;
	atomic_store(&pause_armed, true);
	released = smcr_eng_progress_release(&eng, false);
	CHECK(!atomic_load(&pause_armed), "the release never unlocked the engine");
	kicked = kick_pending();
	printf("release against %s: %s, then owner %s, %s\n", need_name[n],
	       released ? "released" : "kept", owner() == ENG_PROG ? "progress" : "not progress",
	       kicked ? "kicked" : "not kicked");
	CHECK(smcr_eng_progress_needed(&eng), "%s does not need the progress thread", need_name[n]);
	ok = owner() == ENG_PROG && (kicked || !released);
	if (!ok)
		fprintf(stderr,
			"%s came while the progress thread let the token go: nobody runs the "
			"completions until the next tick\n",
			need_name[n]);
	drop_need(n);
	if (owner() == ENG_FREE) /* as the next tick would */
		smcr_eng_progress_take(&eng, true);
	CHECK(smcr_eng_progress_release(&eng, false), "nothing needs the token, yet it is kept");
	CHECK(owner() == ENG_FREE, "the token is not free after the test");
	return ok;
}

int main(void)
{
	pthread_t th;
	int lost = 0;

	sim_init(&(struct sim_hooks){.dispatch = no_dispatch});
	progress_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	CHECK(progress_fd >= 0, "eventfd");
	CHECK(!smcr_eng_init(&eng,
			     &(struct smcr_eng_setup){.lnk = &sim_lnk, .progress_fd = progress_fd}),
	      "engine init");
	sem_init(&raise_go, 0, 0);
	sem_init(&raise_done, 0, 0);
	releaser = pthread_self();
	pthread_create(&th, NULL, raiser, NULL);
	for (int n = 0; n < NEED_KINDS; n++)
		lost += !release_against((enum need)n);
	raising = NEED_KINDS;
	sem_post(&raise_go);
	pthread_join(th, NULL);
	smcr_eng_fini(&eng);
	close(progress_fd);
	CHECK(!lost, "%d of %d needs found nobody running the completions", lost, NEED_KINDS);
	printf("PASS: every need that came during a release found the progress thread running\n");
	return 0;
}
