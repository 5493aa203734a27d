// SPDX-License-Identifier: MIT
/*
 * The engine's wake-ups (libusmc/smcr_eng.c), each made the only thing that
 * can end a wait, against the simulated link of eng_sim.c:
 *
 *   - one delivery per waiting thread and round: a later completion never
 *     wakes a thread that slept through an earlier one;
 *   - every delivery must be seen within SEEN_MAX_MS, below each healer:
 *     the engine's own re-check (a second), the per-call deadlines
 *     (CALL_DEADLINE_MS, far off) and this test's progress thread, whose
 *     tick (TICK_MS) is the only time it drains without being woken;
 *   - a state change behind the token holder's back kicks only when it is
 *     the holder's own connection's (smcr_eng_kick(), as the library's
 *     callers do), and nothing else broadcasts on a waiter's condition;
 *   - the worst moments are made, not hoped for: a completion arrives just
 *     before the holder's arm takes effect (the sim's arming hook), a state
 *     change lands just after the holder's look found nothing, or while the
 *     holder is held up right after its last look before it sleeps (the
 *     test is linked with --wrap=pthread_mutex_unlock for that).
 *
 * Phase 1, application threads: rounds of one to four of READERS readers
 * (the receive CQ, half of them waiting for a reply and spinning) and
 * WRITERS writers (the send CQ: SMCR_WAIT_SCQ) waiting at once, so that the
 * token is held by one of them, handed between them, or taken by the
 * progress thread for a crowd. Then a writer behind a holder asleep on its
 * receive CQ alone: its send completion must wake the holder without any
 * help of the holder's own delivery. Phase 2, a hold (an LLC flow's): no thread
 * waits in the engine and the progress thread must run the completions at
 * once. Phase 3, a readiness descriptor (fd_users), then one that shows a
 * full send buffer (room_waiters): send completions as they come.
 *
 * docs/bench/2026-12-05-engine-wakeups.md lists the wake-ups that, removed
 * from smcr_eng.c one at a time, make this test fail. Run under
 * ThreadSanitizer too (label tsan).
 */
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "common/check.h"
#include "eng_sim.h"
#include "smcr_eng.h"
#include "smcr_wr.h"

#define READERS		 6
#define WRITERS		 3
#define NWORKERS	 (READERS + WRITERS)
#define HOLDER		 NWORKERS	/* the hold's messages (phase 2) */
#define WATCHER		 (NWORKERS + 1) /* the readiness descriptor's (phase 3) */
#define NCONN		 (NWORKERS + 2)
#define ROUNDS		 3000
#define QUIET_ROUNDS	 100	 /* per phase 2 and 3 */
#define BEHIND_ROUNDS	 50	 /* a writer behind a sleeping holder */
#define SEEN_MAX_MS	 500	 /* half the engine's 1 s re-check */
#define TICK_MS		 30000	 /* the progress thread's drain: well above it */
#define CALL_DEADLINE_MS 20000	 /* each smcr_eng_wait(): never what ends it */
#define HOOK_WAIT_MS	 5	 /* a delivery planned for a moment that does not come */
#define FLAG_DELAY_NS	 2000	 /* a state change lands up to this long after the look */
#define FLAG_HOLD_UP_NS	 2000000 /* a holder held up after its look, at most */

/* How a round's first delivery comes: a completion now, a completion just
 * before the holder's arm takes effect, a state change soon after a look
 * of the holder's that found nothing, or one right after the look that
 * follows its arm (its last before it sleeps), while it is held up there. */
enum how { NOW, AT_ARM, FLAG, FLAG_LAST, NHOW };

struct sconn {
	pthread_mutex_t mu;
	pthread_cond_t cond;	  /* the engine's waiters' (smcr_eng_wait()) */
	pthread_cond_t idle_cond; /* a worker between rounds, outside the engine */
	uint64_t got, want;	  /* completions dispatched, the one awaited */
	bool flagged;		  /* state changed behind the holder's back */
	bool active;		  /* in this round */
	bool in_wait;		  /* between its first and last smcr_eng_wait() */
	bool is_owner;		  /* its thread holds the token (the engine looked) */
	int64_t due_ns;		  /* when what ends its wait happened (0: not yet) */
	bool writer;
};

static struct sconn conns[NCONN];
static struct smcr_eng eng;
static int progress_fd;
static atomic_bool stop_workers, stop_progress, progress_asleep;
static atomic_int arm_pending = -1; /* a worker whose completion comes at the next arm */
/* A state change planned for the next look that finds nothing: FLAG_IDLE,
 * FLAG_ARMED (planned; FLAG_ARMED_LAST: for a look after an arm), FLAG_OFF
 * (called off: no look came), or FLAG_LOOKED + the connection whose look
 * found nothing (the flagger changes it now). */
enum { FLAG_IDLE, FLAG_ARMED, FLAG_ARMED_LAST, FLAG_OFF, FLAG_LOOKED };
static atomic_int flag_state;
static atomic_int flag_conn; /* the connection flagged last */
static sem_t flag_go;	     /* a state change is planned: the flagger watches for the look */
static atomic_bool flag_watching;
static atomic_int finished;	/* workers done in this round */
static atomic_llong max_lat_ns; /* the slowest delivery */
static atomic_int hits[NHOW];	/* deliveries made the way planned */
static atomic_int app_arm_hits; /* of the arms, an application holder's */
static _Thread_local bool in_progress_thread;
static _Thread_local bool armed_since_look; /* this thread armed a CQ since its last look */
static _Thread_local pthread_mutex_t *held_up_after; /* unlocking it, wait for the flag */
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t seen_cond;

static int64_t now_ns(void)
{
	return (int64_t)clock_now_ns();
}

static void note_lat(int64_t due)
{
	int64_t lat = now_ns() - due;

	if (due && lat > atomic_load(&max_lat_ns))
		atomic_store(&max_lat_ns, lat);
}

/* ---- the simulated link's hooks ---- */

/* A completion for @who, which the engine's dispatch hands over. */
static void dispatch(enum sim_cq cq, int who)
{
	struct sconn *c = &conns[who];

	(void)cq;
	pthread_mutex_lock(&c->mu);
	c->got++;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

static enum sim_cq cq_of(int who)
{
	return conns[who].writer || who == WATCHER ? SIM_SCQ : SIM_RCQ;
}

static void push(int who)
{
	struct sconn *c = &conns[who];

	pthread_mutex_lock(&c->mu);
	if (!c->due_ns)
		c->due_ns = now_ns();
	pthread_mutex_unlock(&c->mu);
	sim_push(cq_of(who), who);
}

/* A CQ is about to be armed: the planned completion comes first, so only
 * a poll after the arm finds it. */
static void arming(enum sim_cq cq)
{
	int who = atomic_load(&arm_pending);

	armed_since_look = true;
	if (who >= 0 && cq_of(who) == cq &&
	    atomic_compare_exchange_strong(&arm_pending, &who, -1)) {
		push(who);
		atomic_fetch_add(&hits[AT_ARM], 1);
		if (!in_progress_thread)
			atomic_fetch_add(&app_arm_hits, 1);
	}
}

/* ---- the workers ---- */

static bool conn_ready(const struct sconn *c)
{
	return c->got >= c->want || c->flagged;
}

/* The engine's look at a waiter's state: the looker holds the token. */
static bool eng_ready(void *arg)
{
	struct sconn *c = arg;
	bool r = conn_ready(c);

	bool last = armed_since_look;
	int armed = last ? FLAG_ARMED_LAST : FLAG_ARMED;

	c->is_owner = true;
	armed_since_look = false;
	if (r)
		return r;
	if (atomic_load(&flag_state) == armed &&
	    atomic_compare_exchange_strong(&flag_state, &armed, FLAG_LOOKED + (int)(c - conns)) &&
	    last)
		held_up_after = &c->mu; /* the flag lands while we stop after this look */
	return r;
}

int __real_pthread_mutex_unlock(pthread_mutex_t *m);
int __wrap_pthread_mutex_unlock(pthread_mutex_t *m);

/* The holder, done with its look (its connection's lock given back), is
 * held up until the flag planned for that moment has landed: as if it were
 * preempted between its last look and its sleep. */
int __wrap_pthread_mutex_unlock(pthread_mutex_t *m)
{
	int rc = __real_pthread_mutex_unlock(m);

	if (m == held_up_after) {
		int64_t until = now_ns() + FLAG_HOLD_UP_NS;

		held_up_after = NULL;
		while (atomic_load(&flag_state) >= FLAG_LOOKED && now_ns() < until)
			;
	}
	return rc;
}

/* One round's wait, in the engine until its delivery is seen. */
static void worker_wait(struct sconn *c, unsigned how)
{
	c->in_wait = true;
	while (!conn_ready(c) && !atomic_load(&stop_workers))
		smcr_eng_wait(&eng, &c->mu, &c->cond, eng_ready, c, how,
			      clock_now_ms() + CALL_DEADLINE_MS);
	c->in_wait = false;
	c->is_owner = false;
	note_lat(c->due_ns);
}

static void *worker(void *arg)
{
	struct sconn *c = arg;
	int i = (int)(c - conns);
	unsigned how = c->writer ? SMCR_WAIT_SCQ : i % 2 ? SMCR_WAIT_REPLY : 0;

	pthread_mutex_lock(&c->mu);
	while (!atomic_load(&stop_workers)) {
		if (!c->active) {
			pthread_cond_wait(&c->idle_cond, &c->mu);
			continue;
		}
		worker_wait(c, how);
		c->active = false;
		atomic_fetch_add(&finished, 1);
		pthread_mutex_lock(&seen_mu);
		pthread_cond_broadcast(&seen_cond);
		pthread_mutex_unlock(&seen_mu);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* The state change behind the holder's back, on the connection whose look
 * found nothing: changed under its lock, its waiters woken, and the
 * holder kicked if it is that connection's (as sc_fail_locked()). The
 * flagger watches for the look without sleeping, so that the change lands
 * within FLAG_DELAY_NS of it: before the holder's last look, or between
 * that look and its sleep, or in its sleep. */
static void flag_now(struct sconn *c, bool last)
{
	pthread_mutex_lock(&c->mu);
	c->flagged = true;
	if (!c->due_ns)
		c->due_ns = now_ns();
	pthread_cond_broadcast(&c->cond);
	if (c->is_owner)
		smcr_eng_kick(&eng);
	pthread_mutex_unlock(&c->mu);
	atomic_fetch_add(&hits[last ? FLAG_LAST : FLAG], 1);
}

static void *flagger(void *arg)
{
	unsigned int r = 11;

	(void)arg;
	for (;;) {
		bool last = false;
		int64_t t0;
		int st;

		while (sem_wait(&flag_go))
			;
		if (atomic_load(&stop_progress))
			return NULL;
		atomic_store(&flag_watching, true);
		while ((st = atomic_load(&flag_state)) == FLAG_ARMED || st == FLAG_ARMED_LAST)
			last = st == FLAG_ARMED_LAST;
		atomic_store(&flag_watching, false);
		if (st < FLAG_LOOKED)
			continue;
		for (t0 = now_ns(); !last && now_ns() - t0 < (int64_t)(rand_r(&r) % FLAG_DELAY_NS);)
			;
		atomic_store(&flag_conn, st - FLAG_LOOKED);
		flag_now(&conns[st - FLAG_LOOKED], last);
		atomic_store(&flag_state, FLAG_IDLE);
	}
}

/* ---- the progress thread: lgr.c's loop, with a slow tick ---- */

static void progress_sleep(bool owner, int64_t next_tick)
{
	struct pollfd p[2] = {{.fd = owner ? sim_channel_fd() : -1, .events = POLLIN},
			      {.fd = progress_fd, .events = POLLIN}};
	int64_t left = (next_tick - now_ns()) / 1000000;
	uint64_t v;

	atomic_store(&progress_asleep, true);
	poll(p, 2, left < 0 ? 0 : (int)left);
	atomic_store(&progress_asleep, false);
	if (p[0].revents & POLLIN)
		smcr_eng_get_event(&eng, 0);
	if ((p[1].revents & POLLIN) && read(progress_fd, &v, sizeof(v)) < 0)
		die("eventfd");
}

static void *progress(void *arg)
{
	int64_t next_tick = 0;

	(void)arg;
	in_progress_thread = true;
	while (!atomic_load(&stop_progress)) {
		bool tick = now_ns() >= next_tick;
		bool owner = smcr_eng_progress_take(&eng, tick);
		int n = owner ? smcr_wr_poll(&sim_lnk) : 0;

		if (tick)
			next_tick = now_ns() + (int64_t)TICK_MS * 1000000;
		if (owner && smcr_eng_progress_release(&eng, false))
			owner = false;
		if (owner) {
			if (n)
				continue;
			smcr_eng_progress_arm(&eng);
			if (smcr_wr_poll(&sim_lnk))
				continue;
		}
		progress_sleep(owner, next_tick);
	}
	return NULL;
}

/* ---- phase 1: the rounds ---- */

static void fail_round(int round, const char *what)
{
	fprintf(stderr, "round %d:", round);
	for (int i = 0; i < NWORKERS; i++) {
		struct sconn *c = &conns[i];

		pthread_mutex_lock(&c->mu);
		if (c->active)
			fprintf(stderr, " %s %d waits (%s, %.1f ms since its delivery)",
				c->writer ? "writer" : "reader", i,
				c->in_wait ? "in the engine" : "idle",
				c->due_ns ? (double)(now_ns() - c->due_ns) / 1e6 : -1.0);
		pthread_mutex_unlock(&c->mu);
	}
	fprintf(stderr, "\n");
	die("%s: a wake-up was lost", what);
}

/* Wait until @n workers finished their round, SEEN_MAX_MS at most after
 * the last delivery. */
static bool await_finished(int n)
{
	struct timespec ts;
	bool ok;

	clock_deadline_ts(clock_now_ms() + SEEN_MAX_MS, &ts);
	pthread_mutex_lock(&seen_mu);
	while (atomic_load(&finished) < n && pthread_cond_timedwait(&seen_cond, &seen_mu, &ts) == 0)
		;
	ok = atomic_load(&finished) >= n;
	pthread_mutex_unlock(&seen_mu);
	return ok;
}

static bool is_active(int who)
{
	bool a;

	pthread_mutex_lock(&conns[who].mu);
	a = conns[who].active && !conn_ready(&conns[who]);
	pthread_mutex_unlock(&conns[who].mu);
	return a;
}

/* Wait up to HOOK_WAIT_MS for a planned delivery to happen on its own;
 * true if it did (else it is called off). */
static bool await_planned(enum how how)
{
	int64_t until = now_ns() + (int64_t)HOOK_WAIT_MS * 1000000;

	int armed = how == FLAG_LAST ? FLAG_ARMED_LAST : FLAG_ARMED;

	while (now_ns() < until) {
		if (how == AT_ARM ? atomic_load(&arm_pending) < 0
				  : atomic_load(&flag_state) != armed)
			return true;
		usleep(20); /* leave the CPUs to the engine's threads */
	}
	if (how == AT_ARM)
		return atomic_exchange(&arm_pending, -1) < 0;
	return !atomic_compare_exchange_strong(&flag_state, &armed, FLAG_OFF);
}

/* Plan @who's delivery the way @how says, before its wait starts. */
static void plan(int who, enum how how)
{
	if (how == AT_ARM) {
		atomic_store(&arm_pending, who);
	} else if (how == FLAG || how == FLAG_LAST) {
		atomic_store(&flag_state, how == FLAG ? FLAG_ARMED : FLAG_ARMED_LAST);
		sem_post(&flag_go);
		while (!atomic_load(&flag_watching)) /* it watches before anybody looks */
			sched_yield();
	}
}

/* Deliver to @who now, or see the plan through (pushing now if its
 * moment did not come). */
static void deliver(int who, enum how how, unsigned int *r)
{
	if (how != NOW && await_planned(how))
		return;
	for (int64_t t0 = now_ns(); now_ns() - t0 < (int64_t)(rand_r(r) % 100000);)
		; /* up to 100 us: the holder is polling, arming or asleep */
	push(who);
	if (how == NOW)
		atomic_fetch_add(&hits[NOW], 1);
}

static void activate(const int *set, int k)
{
	for (int j = 0; j < k; j++) {
		struct sconn *c = &conns[set[j]];

		pthread_mutex_lock(&c->mu);
		c->want = c->got + 1;
		c->flagged = false;
		c->due_ns = 0;
		c->active = true;
		pthread_cond_broadcast(&c->idle_cond);
		pthread_mutex_unlock(&c->mu);
	}
}

/* @k distinct workers into @set. */
static void pick(int *set, int k, unsigned int *r)
{
	for (int j = 0; j < k; j++) {
		bool dup;

		do {
			set[j] = (int)(rand_r(r) % NWORKERS);
			dup = false;
			for (int i = 0; i < j; i++)
				dup |= set[i] == set[j];
		} while (dup);
	}
}

/* The flagger is done with the round's state change: the connection it
 * flagged, or -1 if it was called off. */
static int await_flag_landed(void)
{
	int st;

	while ((st = atomic_load(&flag_state)) >= FLAG_LOOKED)
		usleep(20);
	atomic_store(&flag_state, FLAG_IDLE);
	return st == FLAG_OFF ? -1 : atomic_load(&flag_conn);
}

/* One to four workers wait at once; the first delivery is made the way
 * @first says, the others come now, one by one. */
static void run_round(int round, unsigned int *r)
{
	static const int ks[10] = {1, 1, 1, 1, 2, 2, 2, 3, 3, 4}; /* mostly alone: healed by none */
	int set[4], k = ks[rand_r(r) % 10];
	enum how first = (enum how)(rand_r(r) % NHOW);

	int flagged = -1;

	pick(set, k, r);
	atomic_store(&finished, 0);
	plan(set[0], first);
	activate(set, k);
	deliver(set[0], first, r);
	if (first == FLAG || first == FLAG_LAST) {
		flagged = await_flag_landed(); /* the holder's connection, maybe not set[0] */
		if (flagged >= 0 && flagged != set[0] && is_active(set[0]))
			deliver(set[0], NOW, r);
	}
	/* one delivery each: a second one would heal a lost first */
	for (int j = 1; j < k; j++)
		if (set[j] != flagged)
			deliver(set[j], NOW, r);
	if (!await_finished(k))
		fail_round(round, "a delivery not seen within SEEN_MAX_MS");
}

/* ---- phases 2 and 3: nobody waits in the engine ---- */

/* @who's completions come one at a time; each must be dispatched by the
 * progress thread within SEEN_MAX_MS. */
static void quiet_rounds(int who, const char *what, unsigned int *r)
{
	struct sconn *c = &conns[who];

	for (int i = 0; i < QUIET_ROUNDS; i++) {
		int64_t due;
		uint64_t want;
		bool seen;

		pthread_mutex_lock(&c->mu);
		want = c->got + 1;
		c->due_ns = 0;
		pthread_mutex_unlock(&c->mu);
		deliver(who, NOW, r);
		pthread_mutex_lock(&c->mu);
		due = c->due_ns;
		while (c->got < want && now_ns() - due < (int64_t)SEEN_MAX_MS * 1000000) {
			struct timespec ts;

			clock_deadline_ts(clock_now_ms() + 10, &ts);
			pthread_cond_timedwait(&c->cond, &c->mu, &ts);
		}
		seen = c->got >= want;
		pthread_mutex_unlock(&c->mu);
		CHECK(seen, "%s, delivery %d: not dispatched within %d ms (a lost wake-up)", what,
		      i, SEEN_MAX_MS);
		note_lat(due);
	}
}

static int owner_now(void)
{
	int o;

	pthread_mutex_lock(&eng.lock);
	o = eng.owner;
	pthread_mutex_unlock(&eng.lock);
	return o;
}

/* Nothing needs the progress thread: it lets the token go at its next
 * wake-up, which one completion gives it. */
static void settle_free(void)
{
	for (int i = 0; i < 100 && owner_now() != ENG_FREE; i++) {
		push(HOLDER); /* the receive CQ: armed whenever the progress thread sleeps */
		usleep(10000);
	}
	CHECK(owner_now() == ENG_FREE, "the token is not free between phases (owner %d)",
	      owner_now());
}

static void wait_progress_asleep(void)
{
	for (int i = 0; i < 1000 && !atomic_load(&progress_asleep); i++)
		usleep(1000);
	usleep(1000); /* and in poll(), past its last look */
}

/* A writer behind a holder asleep on its receive CQ (phase 1's end). */

/* The engine, looked at under its lock: an application thread holds the
 * token and sleeps on the channel, and @waiting threads are queued. */
static bool holder_asleep_with(bool waiting)
{
	bool s;

	pthread_mutex_lock(&eng.lock);
	s = eng.owner == ENG_APP && eng.owner_sleeping && (eng.waiters != NULL) == waiting;
	pthread_mutex_unlock(&eng.lock);
	return s;
}

static void await_holder_asleep_with(bool waiting, int round)
{
	for (int i = 0; i < 1000 && !holder_asleep_with(waiting); i++)
		usleep(1000);
	if (!holder_asleep_with(waiting))
		fail_round(round, waiting ? "the writer never queued behind the sleeping holder"
					  : "the reader never slept holding the token");
}

/* A reader that neither spins nor waits for a reply holds the token and
 * sleeps with its receive CQ alone armed (nobody wanted send completions);
 * then a writer queues behind it and its send completion comes. The
 * holder must be told to arm the send CQ too; the reader's own delivery
 * comes only once the writer's is seen, or SEEN_MAX_MS later. */
static void run_behind_sleeper(unsigned int *r)
{
	const int reader = 0, writer = READERS;

	for (int i = 0; i < BEHIND_ROUNDS; i++) {
		settle_free();
		atomic_store(&finished, 0);
		activate(&reader, 1);
		await_holder_asleep_with(false, i);
		activate(&writer, 1);
		await_holder_asleep_with(true, i);
		deliver(writer, NOW, r);
		if (!await_finished(1))
			fail_round(i, "a writer behind a holder asleep on its receive CQ");
		deliver(reader, NOW, r);
		if (!await_finished(2))
			fail_round(i, "a reader whose delivery came last");
	}
}

static void phase_hold(unsigned int *r)
{
	settle_free();
	smcr_eng_hold(&eng); /* the token was free: the progress thread is kicked */
	quiet_rounds(HOLDER, "a hold", r);
	smcr_eng_unhold(&eng);
}

/* A send completion, and a receive one behind it to wake the progress
 * thread: an arm of the send CQ left from phase 1 is used up, and the
 * progress thread arms only what it is asked for from then on. */
static void use_up_scq_arm(void)
{
	struct sconn *c = &conns[WATCHER];
	uint64_t want;
	bool seen;

	pthread_mutex_lock(&c->mu);
	want = c->got + 1;
	pthread_mutex_unlock(&c->mu);
	push(WATCHER);
	push(HOLDER);
	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < 100 && c->got < want; i++) {
		struct timespec ts;

		clock_deadline_ts(clock_now_ms() + 10, &ts);
		pthread_cond_timedwait(&c->cond, &c->mu, &ts);
	}
	seen = c->got >= want;
	c->due_ns = 0;
	pthread_mutex_unlock(&c->mu);
	CHECK(seen, "the progress thread did not run the completions of a readiness descriptor");
}

static void phase_readiness(unsigned int *r)
{
	settle_free();
	atomic_fetch_add(&eng.fd_users, 1); /* as smcr_conn_fd() */
	smcr_eng_want_progress(&eng);
	use_up_scq_arm();
	wait_progress_asleep(); /* with the send CQ unarmed: nobody wants it */
	if (atomic_fetch_add(&eng.room_waiters, 1) == 0) /* as a full send buffer shown */
		smcr_eng_scq_demand_raised(&eng);
	quiet_rounds(WATCHER, "a readiness descriptor showing a full send buffer", r);
	atomic_fetch_sub(&eng.room_waiters, 1);
	atomic_fetch_sub(&eng.fd_users, 1);
}

/* ---- set-up ---- */

static void conns_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* as the library's */
	pthread_cond_init(&seen_cond, &ca);
	for (int i = 0; i < NCONN; i++) {
		pthread_mutex_init(&conns[i].mu, NULL);
		pthread_cond_init(&conns[i].cond, &ca);
		pthread_cond_init(&conns[i].idle_cond, &ca);
		conns[i].writer = i >= READERS && i < NWORKERS;
	}
	pthread_condattr_destroy(&ca);
}

static void stop_all_workers(pthread_t *th)
{
	atomic_store(&stop_workers, true);
	for (int i = 0; i < NWORKERS; i++) {
		pthread_mutex_lock(&conns[i].mu);
		pthread_cond_broadcast(&conns[i].idle_cond);
		pthread_mutex_unlock(&conns[i].mu);
		pthread_join(th[i], NULL);
	}
}

int main(void)
{
	pthread_t th[NWORKERS], pg, fl;
	unsigned int r = 1;
	int64_t t0 = now_ns();

	sim_init(&(struct sim_hooks){.dispatch = dispatch, .arming = arming});
	progress_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	CHECK(!smcr_eng_init(&eng, &(struct smcr_eng_setup){.lnk = &sim_lnk,
							    .progress_fd = progress_fd,
							    .spin = true}),
	      "engine init");
	conns_init();
	sem_init(&flag_go, 0, 0);
	for (int i = 0; i < NWORKERS; i++)
		pthread_create(&th[i], NULL, worker, &conns[i]);
	pthread_create(&pg, NULL, progress, NULL);
	pthread_create(&fl, NULL, flagger, NULL);
	for (int i = 0; i < ROUNDS; i++)
		run_round(i, &r);
	run_behind_sleeper(&r);
	stop_all_workers(th);
	phase_hold(&r);
	phase_readiness(&r);
	atomic_store(&stop_progress, true);
	sem_post(&flag_go);
	pthread_join(fl, NULL);
	CHECK(write(progress_fd, &(uint64_t){1}, sizeof(uint64_t)) == sizeof(uint64_t), "kick");
	pthread_join(pg, NULL);
	printf("test_smcr_eng: %d rounds of 1-4 waiters, then %d deliveries each to a hold and "
	       "a readiness descriptor, in %.2f s: delivered now %d, just before an arm %d, "
	       "(%d of them an application holder's), as a state change after a look %d, "
	       "after a holder's last look %d; slowest %.1f ms; wakeups %llu, channel sleeps "
	       "%llu\n",
	       ROUNDS, QUIET_ROUNDS, (double)(now_ns() - t0) / 1e9, atomic_load(&hits[NOW]),
	       atomic_load(&hits[AT_ARM]), atomic_load(&app_arm_hits), atomic_load(&hits[FLAG]),
	       atomic_load(&hits[FLAG_LAST]), (double)atomic_load(&max_lat_ns) / 1e6,
	       (unsigned long long)atomic_load(&sim_stats.v[ENG_WAKEUPS]),
	       (unsigned long long)atomic_load(&sim_stats.v[ENG_CH_SLEEPS]));
	CHECK(atomic_load(&hits[AT_ARM]) >= ROUNDS / 20 &&
		      atomic_load(&hits[FLAG]) >= ROUNDS / 20 &&
		      atomic_load(&hits[FLAG_LAST]) >= ROUNDS / 40,
	      "too few deliveries at the moments that matter: the test did not test");
	smcr_eng_fini(&eng);
	close(progress_fd);
	return 0;
}
