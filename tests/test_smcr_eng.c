// SPDX-License-Identifier: MIT
/*
 * The engine's hand-off logic without a device (libusmc/smcr_eng.c, issue
 * 14): smcr_eng.c is linked alone against a simulated link whose
 * "CQ" is a queue filled by a producer thread, whose "completion channel"
 * is a pipe that gets one byte when a completion arrives while the CQ is
 * armed (the verbs semantics), and whose dispatch hands each completion to
 * its connection (a counter under the connection's lock, its condition
 * broadcast). Reader threads, one per connection, block in smcr_eng_wait()
 * for each message; the token moves among them (one polls and sleeps on
 * the channel, the others wait on their conditions and are handed it) and
 * to and from a progress thread (lgr.c's loop in small), which takes it
 * while two or more wait.
 * Another thread changes connections' state behind the holder's back and
 * kicks it (smcr_eng_kick). Every message must be seen within 500 ms of
 * its arrival: a lost wake-up is only ended by the engine's 1 s safety
 * re-check, so it fails the test. Run under ThreadSanitizer too (label tsan).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "common/check.h"
#include "eng_stats.h"
#include "smcr_eng.h"
#include "smcr_link.h"
#include "smcr_wr.h"

#define NCONN	   12
#define NMSG	   20000
#define MAX_LAT_NS 500000000LL /* a lost wake-up takes the 1 s re-check */

struct sconn {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	uint64_t got;	    /* messages dispatched to it */
	uint64_t want;	    /* the message its reader waits for (counts from 1) */
	uint64_t total;	    /* messages it gets in all */
	bool flagged;	    /* state changed behind the holder's back */
	int64_t sent[NMSG]; /* arrival time of its n-th message */
	int nsent;
};

static struct {
	pthread_mutex_t mu; /* the "CQ" */
	int q[NMSG * 2];
	int head, tail;
	bool armed;
	int pipe[2]; /* the "channel" */
} sim = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct sconn conns[NCONN];
static struct smcr_link lnk;	/* the simulated link */
static struct eng_stats lgr_st; /* its link group's counters */
static struct smcr_eng eng;	/* the engine under test */
static int progress_fd;		/* the progress thread's eventfd */
static struct ibv_cq rcq, scq;
static struct ibv_context ibctx;
static struct ibv_comp_channel chan;
static atomic_llong max_lat;
static atomic_int flagged_seen, readers_left;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the simulated verbs ---- */

static int sim_req_notify(struct ibv_cq *cq, int solicited)
{
	(void)solicited;
	if (cq == &rcq) {
		pthread_mutex_lock(&sim.mu);
		sim.armed = true;
		pthread_mutex_unlock(&sim.mu);
	}
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	char b;

	(void)ch;
	if (read(sim.pipe[0], &b, 1) != 1)
		return -1;
	*cq = &rcq;
	*ctx = NULL;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	(void)cq;
	(void)n;
}

/* A completion for connection @i arrives. */
static void sim_push(int i)
{
	bool ev;

	pthread_mutex_lock(&conns[i].mu);
	conns[i].sent[conns[i].nsent++] = now_ns();
	pthread_mutex_unlock(&conns[i].mu);
	pthread_mutex_lock(&sim.mu);
	sim.q[sim.tail++] = i;
	ev = sim.armed;
	sim.armed = false;
	pthread_mutex_unlock(&sim.mu);
	if (ev)
		CHECK(write(sim.pipe[1], "e", 1) == 1, "pipe");
}

/* The dispatch: only the token holder calls it (smcr_eng.h). */
int smcr_wr_poll(struct smcr_link *l)
{
	int n = 0;

	(void)l;
	for (;;) {
		int i;

		pthread_mutex_lock(&sim.mu);
		if (sim.head == sim.tail || n == 16) {
			pthread_mutex_unlock(&sim.mu);
			return n;
		}
		i = sim.q[sim.head++];
		pthread_mutex_unlock(&sim.mu);
		pthread_mutex_lock(&conns[i].mu);
		conns[i].got++;
		pthread_cond_broadcast(&conns[i].cond);
		pthread_mutex_unlock(&conns[i].mu);
		n++;
	}
}

/* ---- the threads ---- */

static bool ready(void *arg)
{
	struct sconn *c = arg;

	return c->got >= c->want || c->flagged;
}

static void *reader(void *arg)
{
	struct sconn *c = arg;

	pthread_mutex_lock(&c->mu);
	while (c->want <= c->total) {
		int64_t lat;

		while (!ready(c))
			smcr_eng_wait(&eng, &c->mu, &c->cond, ready, c, SMCR_WAIT_REPLY,
				      clock_now_ms() + 5000);
		if (c->flagged) {
			c->flagged = false;
			atomic_fetch_add(&flagged_seen, 1);
			continue;
		}
		lat = now_ns() - c->sent[c->want - 1];
		if (lat > atomic_load(&max_lat))
			atomic_store(&max_lat, lat);
		c->want++;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void *watchdog(void *arg)
{
	int64_t t0 = now_ns();

	(void)arg;
	while (atomic_load(&readers_left) > 0) {
		CHECK(now_ns() - t0 < 60 * 1000000000LL, "%d readers stuck after 60 s",
		      atomic_load(&readers_left));
		usleep(10000);
	}
	return NULL;
}

static atomic_bool stop_flagger, stop_progress;

/* The progress thread's part of lgr.c's loop: it holds the token when a
 * crowd of waiters is better served by it, drains at its tick when the
 * token is free, and hands the token to a lone waiter. */
static void *progress(void *arg)
{
	int64_t next_tick = 0;

	(void)arg;
	while (!atomic_load(&stop_progress)) {
		bool tick = now_ns() >= next_tick;
		bool owner = smcr_eng_progress_take(&eng, tick);
		int n = owner ? smcr_wr_poll(&lnk) : 0;
		struct pollfd p[2] = {{.fd = -1, .events = POLLIN},
				      {.fd = progress_fd, .events = POLLIN}};
		uint64_t v;

		if (tick)
			next_tick = now_ns() + 50000000; /* 50 ms */
		if (owner && smcr_eng_progress_release(&eng, false))
			owner = false;
		if (owner) {
			if (n)
				continue;
			smcr_eng_arm(&eng, true);
			if (smcr_wr_poll(&lnk))
				continue;
			p[0].fd = sim.pipe[0];
		}
		poll(p, 2, 50);
		if (p[0].revents & POLLIN)
			smcr_eng_get_event(&eng);
		if ((p[1].revents & POLLIN) && read(progress_fd, &v, sizeof(v)) < 0)
			die("eventfd");
	}
	return NULL;
}

static void *flagger(void *arg)
{
	unsigned int r = 7;

	(void)arg;
	while (!atomic_load(&stop_flagger)) {
		struct sconn *c = &conns[rand_r(&r) % NCONN];

		pthread_mutex_lock(&c->mu);
		c->flagged = true;
		pthread_cond_broadcast(&c->cond);
		/* as sc_fail_locked(): under the connection's lock, then the kick */
		smcr_eng_kick(&eng);
		pthread_mutex_unlock(&c->mu);
		usleep(3000 + rand_r(&r) % 3000);
	}
	return NULL;
}

int main(void)
{
	pthread_t rd[NCONN], fl, wd, pg;
	pthread_condattr_t ca;
	unsigned int r = 1;
	int64_t t0 = now_ns();

	CHECK(!pipe2(sim.pipe, O_NONBLOCK | O_CLOEXEC), "pipe");
	ibctx.ops.req_notify_cq = sim_req_notify;
	rcq.context = scq.context = &ibctx;
	chan.fd = sim.pipe[0];
	lnk.rcq = &rcq;
	lnk.scq = &scq;
	lnk.ch = &chan;
	lnk.up.st = &lgr_st;
	atomic_store(&lnk.state, SMCR_LNK_ACTIVE);
	progress_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	/* spin: the default (USMC_OPT_SPIN), a wait for a reply spins first */
	CHECK(!smcr_eng_init(&eng, &(struct smcr_eng_setup){.lnk = &lnk,
							    .progress_fd = progress_fd,
							    .spin = true}),
	      "eng init");
	/* NMSG messages spread over the connections; each reader waits for its own */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* as the library's */
	for (int i = 0; i < NCONN; i++) {
		pthread_mutex_init(&conns[i].mu, NULL);
		pthread_cond_init(&conns[i].cond, &ca);
		conns[i].want = 1;
	}
	for (int i = 0; i < NMSG; i++)
		conns[rand_r(&r) % NCONN].total++;
	atomic_store(&readers_left, NCONN);
	for (int i = 0; i < NCONN; i++)
		pthread_create(&rd[i], NULL, reader, &conns[i]);
	pthread_create(&fl, NULL, flagger, NULL);
	pthread_create(&pg, NULL, progress, NULL);
	pthread_create(&wd, NULL, watchdog, NULL);
	/* the producer: total messages for each connection, in random order */
	for (int left = NMSG; left > 0;) {
		int i = rand_r(&r) % NCONN;

		if (conns[i].nsent >= (int)conns[i].total)
			continue;
		sim_push(i);
		left--;
		if (rand_r(&r) % 4 == 0)
			usleep(rand_r(&r) % 300);
	}
	for (int i = 0; i < NCONN; i++) {
		pthread_join(rd[i], NULL);
		atomic_fetch_sub(&readers_left, 1);
	}
	pthread_join(wd, NULL);
	atomic_store(&stop_flagger, true);
	pthread_join(fl, NULL);
	atomic_store(&stop_progress, true);
	pthread_join(pg, NULL);
	printf("test_smcr_eng: %d messages to %d readers in %.2f s, slowest delivery %.1f ms, "
	       "%d state changes seen; wakeups %llu, channel sleeps %llu\n",
	       NMSG, NCONN, (double)(now_ns() - t0) / 1e9, (double)atomic_load(&max_lat) / 1e6,
	       atomic_load(&flagged_seen), (unsigned long long)atomic_load(&lgr_st.v[ENG_WAKEUPS]),
	       (unsigned long long)atomic_load(&lgr_st.v[ENG_CH_SLEEPS]));
	CHECK(atomic_load(&max_lat) < MAX_LAT_NS,
	      "a message waited %.1f ms to be seen (a lost wake-up?)",
	      (double)atomic_load(&max_lat) / 1e6);
	CHECK(atomic_load(&flagged_seen) > 0, "no state change was seen");
	smcr_eng_fini(&eng);
	close(progress_fd);
	return 0;
}
