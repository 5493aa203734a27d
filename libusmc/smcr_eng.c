// SPDX-License-Identifier: MIT
/*
 * Run to completion (smcr_eng.h): the thread that would block polls the
 * link's completion queues itself. Modelled on what rsockets does
 * for one socket (rdma-core librdmacm/rsocket.c: poll under a lock, spin
 * polling_time, arm only right before sleeping on the channel), extended
 * to a link shared by many connections: one token holder polls and
 * sleeps on the channel, the other waiters sleep on their connection's
 * condition and are handed the token in turn.
 *
 * No lost wake-up: (1) completions: the holder arms the CQ, polls it once
 * more, and only then sleeps on the channel, so a completion that came
 * before the arm is polled and one after it raises an event; (2) state
 * changed by another thread (an error, a shutdown): the holder announces
 * owner_sleeping under smcr_eng.lock before its last look at its
 * predicate, and the changer, after its change under the connection's
 * lock, kicks the eventfd if it sees owner_sleeping; (3) the token: a
 * waiter registers under its connection's lock and smcr_eng.lock and
 * sleeps releasing that lock atomically; whoever hands it the token sets
 * handed under smcr_eng.lock and then broadcasts under the connection's
 * lock, so the waiter sees one or the other.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "eng_stats.h"
#include "smcr_eng.h"
#include "smcr_link.h"
#include "smcr_spin.h"
#include "smcr_wr.h"

#define ENG_SPIN_START_NS 10000	 /* rsockets' polling_time default: 10 us */
#define ENG_SPIN_YIELD_NS 250000 /* a spinner offers its CPU this often */
#define ENG_BUSY_YIELD_NS 50000	 /* a busy-poller, once its reply is late */
#define ENG_SLEEP_MAX_MS  1000	 /* re-check the predicate at least this often */

/* The owning link group's data-path counters, which the link carries. */
static void eng_stat(struct smcr_eng *e, enum eng_stat i, uint64_t n)
{
	eng_count(e->set.lnk->up.st, i, n);
}

/* Run an event loop's pass (smcr_eng_loop_run()): write its eventfd @fd. */
static void kick_loop(struct smcr_eng *e, int fd)
{
	uint64_t one = 1;

	if (fd >= 0 && write(fd, &one, sizeof(one)) == sizeof(one))
		eng_stat(e, ENG_SYSCALLS, 1);
}

int smcr_eng_init(struct smcr_eng *e, const struct smcr_eng_setup *set)
{
	e->set = *set;
	pthread_mutex_init(&e->lock, NULL);
	e->owner = ENG_FREE;
	e->waiters = NULL;
	e->waiters_tail = &e->waiters;
	e->avg_wait_ns = ENG_SPIN_START_NS;
	e->spin_cap_ns = smcr_spin_cap_ns(); /* the first engine times the machine */
	e->loop_epfd = e->loop_kick_fd = -1;
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		e->loop_reg[i] = -1;
	e->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return e->kick_fd < 0 ? -errno : 0;
}

void smcr_eng_fini(struct smcr_eng *e)
{
	if (e->kick_fd >= 0)
		close(e->kick_fd);
	e->kick_fd = -1;
	pthread_mutex_destroy(&e->lock);
}

/* ---- the token holder's verbs --------------------------------------- */

int smcr_eng_poll(struct smcr_eng *e)
{
	int n = smcr_wr_poll(e->set.lnk);

	for (int i = 1; i < SMCR_LINKS_MAX; i++) {
		struct smcr_link *lnk = smcr_eng_link(e, i);

		if (lnk)
			n += smcr_wr_poll(lnk);
	}
	return n;
}

int smcr_eng_drain(struct smcr_eng *e)
{
	int n, total = 0;

	while ((n = smcr_eng_poll(e)) > 0)
		total += n;
	return total;
}

/* Arm @cq unless *@armed. */
static void eng_arm_cq(struct smcr_eng *e, struct ibv_cq *cq, bool *armed)
{
	if (*armed)
		return;
	ibv_req_notify_cq(cq, 0);
	*armed = true;
	eng_stat(e, ENG_CQ_ARMS, 1);
	eng_stat(e, ENG_SYSCALLS, 1);
}

void smcr_eng_arm(struct smcr_eng *e, bool scq)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		struct smcr_link *lnk = smcr_eng_link(e, i);

		if (!lnk)
			continue;
		eng_arm_cq(e, lnk->rcq, &e->rcq_armed[i]);
		if (scq)
			eng_arm_cq(e, lnk->scq, &e->scq_armed[i]);
	}
}

/* Read and acknowledge one event of @lnk's (in @slot) channel: its CQ is
 * no longer armed. False if none was pending. */
static bool eng_take_event(struct smcr_eng *e, int slot, struct smcr_link *lnk)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	if (ibv_get_cq_event(lnk->ch, &cq, &cq_ctx))
		return false;
	ibv_ack_cq_events(cq, 1);
	if (cq == lnk->rcq)
		e->rcq_armed[slot] = false;
	else
		e->scq_armed[slot] = false;
	return true;
}

bool smcr_eng_get_event(struct smcr_eng *e, int slot)
{
	struct smcr_link *lnk = smcr_eng_link(e, slot);

	if (!lnk)
		return false;
	eng_stat(e, ENG_SYSCALLS, 1); /* the read() */
	return eng_take_event(e, slot, lnk);
}

void smcr_eng_link_add(struct smcr_eng *e, int slot, struct smcr_link *lnk)
{
	int loop_fd;

	atomic_store_explicit(&e->lnk[slot], lnk, memory_order_release);
	/* an owner asleep on the other channels arms this one and sleeps on it too */
	smcr_eng_kick(e);
	/* an event loop registers its channel at its next pass */
	pthread_mutex_lock(&e->lock);
	loop_fd = e->loop_users ? e->loop_kick_fd : -1;
	pthread_mutex_unlock(&e->lock);
	kick_loop(e, loop_fd);
}

/* Take the channel of @slot out of the loop's epoll set; requires e->lock. */
static void loop_unregister_locked(struct smcr_eng *e, int slot)
{
	if (e->loop_reg[slot] < 0)
		return;
	epoll_ctl(e->loop_epfd, EPOLL_CTL_DEL, e->loop_reg[slot], NULL);
	e->loop_reg[slot] = -1;
}

void smcr_eng_link_del(struct smcr_eng *e, int slot)
{
	struct smcr_link *lnk = smcr_eng_link(e, slot);

	if (!lnk || slot == 0)
		return;
	atomic_store_explicit(&e->lnk[slot], NULL, memory_order_release);
	pthread_mutex_lock(&e->lock);
	loop_unregister_locked(e, slot); /* before its channel is destroyed */
	pthread_mutex_unlock(&e->lock);
	/* an event it raised and nobody read would hold up destroying its CQ
	 * (ibv_destroy_cq() waits for every event to be acknowledged) */
	while (e->rcq_armed[slot] || e->scq_armed[slot]) {
		struct pollfd p = {.fd = lnk->ch->fd, .events = POLLIN};

		if (poll(&p, 1, 0) <= 0 || !eng_take_event(e, slot, lnk))
			break;
	}
	e->rcq_armed[slot] = e->scq_armed[slot] = false;
}

/* ---- hand-off ------------------------------------------------------- */

/* A link of the engine is being set up, or has sends waiting for room. */
static bool links_need_progress(struct smcr_eng *e)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		struct smcr_link *lnk = smcr_eng_link(e, i);

		if (lnk && (atomic_load(&lnk->any_pending) ||
			    atomic_load(&lnk->state) == SMCR_LNK_ACTIVATING))
			return true;
	}
	return false;
}

/* Sends wait for room in some link's send queue. */
static bool links_pending(struct smcr_eng *e)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		struct smcr_link *lnk = smcr_eng_link(e, i);

		if (lnk && atomic_load(&lnk->any_pending))
			return true;
	}
	return false;
}

static bool progress_needed(struct smcr_eng *e)
{
	return atomic_load(&e->fd_users) > 0 || atomic_load(&e->holds) > 0 ||
	       links_need_progress(e) || smcr_eng_churning(e, clock_now_ms());
}

bool smcr_eng_progress_needed(struct smcr_eng *e)
{
	return progress_needed(e);
}

static void kick_progress(struct smcr_eng *e)
{
	uint64_t one = 1;

	if (write(e->set.progress_fd, &one, sizeof(one)) == sizeof(one))
		eng_stat(e, ENG_SYSCALLS, 1);
}

/* Wake the application owner out of its sleep on the channel. */
static void kick_app_owner(struct smcr_eng *e)
{
	uint64_t one = 1;

	if (write(e->kick_fd, &one, sizeof(one)) == sizeof(one))
		eng_stat(e, ENG_SYSCALLS, 1);
}

/* ---- send completions as they come --------------------------------- */

bool smcr_eng_scq_demand_locked(struct smcr_eng *e)
{
	return e->scq_wanted > 0 || links_pending(e) || atomic_load(&e->room_waiters) > 0;
}

/* Every link's send CQ is armed (the token holder's view). */
static bool scqs_armed(struct smcr_eng *e)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		if (smcr_eng_link(e, i) && !e->scq_armed[i])
			return false;
	return true;
}

void smcr_eng_progress_arm(struct smcr_eng *e)
{
	bool scq;

	/* decided under the lock a demand is raised under: a raiser after it
	 * sees prog_scq_off and kicks us */
	pthread_mutex_lock(&e->lock);
	scq = smcr_eng_scq_demand_locked(e);
	e->prog_scq_off = !scq && !scqs_armed(e);
	pthread_mutex_unlock(&e->lock);
	smcr_eng_arm(e, scq);
}

/* Wake the owner if it sleeps with the send CQ unarmed (or, the token
 * free, an event loop, whose next pass arms it); requires e->lock. */
static void scq_demand_kick_locked(struct smcr_eng *e)
{
	if (e->owner == ENG_APP && e->owner_sleeping) {
		kick_app_owner(e);
	} else if (e->owner == ENG_PROG && e->prog_scq_off) {
		e->prog_scq_off = false; /* one kick is enough */
		kick_progress(e);
	} else if (e->owner == ENG_FREE && e->loop_users) {
		kick_loop(e, e->loop_kick_fd);
	}
}

void smcr_eng_scq_demand_raised(struct smcr_eng *e)
{
	pthread_mutex_lock(&e->lock);
	scq_demand_kick_locked(e);
	pthread_mutex_unlock(&e->lock);
}

/* Two or more threads wait: the progress thread serves them better (its
 * dispatch wakes exactly the ones whose connection changed, where handing
 * the token down the queue would wake each in turn). Requires e->lock. */
static bool crowd_locked(const struct smcr_eng *e)
{
	return e->waiters && e->waiters->next;
}

/* Whom a pass gave the token to, decided under smcr_eng.lock and told
 * after it: a waiter to wake on its condition, or the progress thread. */
struct eng_handoff {
	struct smcr_eng_waiter *w;
	pthread_mutex_t *mu;
	pthread_cond_t *cond;
	bool kick;
	int loop_kick; /* the event loop's eventfd to write, or -1 */
};

/* Pass the token on: a lone waiter gets it; a crowd of waiters, or a need
 * for it, gets the progress thread; else it is free. Requires e->lock. */
static void eng_pass_locked(struct smcr_eng *e, bool from_progress, struct eng_handoff *h)
{
	struct smcr_eng_waiter *w = NULL;

	*h = (struct eng_handoff){.loop_kick = -1};
	if (!crowd_locked(e) || from_progress)
		w = e->waiters;
	if (w) {
		e->waiters = w->next;
		if (!e->waiters)
			e->waiters_tail = &e->waiters;
		w->next = NULL;
		w->handed = true;
		w->passing = true; /* @w stays until we are done with its mu and cond */
		h->w = w;
		h->mu = w->mu;
		h->cond = w->cond;
		e->owner = ENG_APP;
	} else if (!from_progress && (crowd_locked(e) || progress_needed(e))) {
		e->owner = ENG_PROG;
		h->kick = true;
	} else {
		e->owner = ENG_FREE;
		if (e->loop_poke && e->loop_users) /* it found the token taken: run now */
			h->loop_kick = e->loop_kick_fd;
		e->loop_poke = false;
	}
}

/* Tell whom eng_pass_locked() chose, no lock held. */
static void eng_handoff_tell(struct smcr_eng *e, const struct eng_handoff *h)
{
	if (h->w) {
		/* @w registered under its lock and sleeps releasing it */
		pthread_mutex_lock(h->mu);
		pthread_cond_broadcast(h->cond);
		pthread_mutex_unlock(h->mu);
		eng_stat(e, ENG_SYSCALLS, 1);
		pthread_mutex_lock(&e->lock);
		h->w->passing = false;
		pthread_mutex_unlock(&e->lock);
	}
	if (h->kick)
		kick_progress(e);
	kick_loop(e, h->loop_kick);
}

/* ---- the event loop's side ------------------------------------------ */

static void eng_pass(struct smcr_eng *e);

/* Read every pending event of every channel (token holder; the channels
 * are non-blocking: the last read of each finds none). */
static void loop_take_events(struct smcr_eng *e)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		struct smcr_link *lnk = smcr_eng_link(e, i);
		bool more = lnk != NULL;

		while (more) {
			more = eng_take_event(e, i, lnk);
			eng_stat(e, ENG_SYSCALLS, 1);
		}
	}
}

/*
 * The token may go free with a loop attached (token holder): arm what the
 * demand asks for and poll once more, so a completion either was run or,
 * coming after the arm, raises a channel event in the loop's epoll set.
 * Any holder does it, not only the loop: one that read a channel's event
 * and then ran completions that came while the CQ was disarmed would
 * leave it so, and the loop, whose epoll_wait() drops an edge whose byte
 * is gone by then, would not know (test_smcr_eng_loop HELD). A poll that
 * found some may have come before their event: read it, and arm again (a
 * few rounds; a stream that outruns them leaves an event pending, which
 * the loop sees). A completion between the last poll and the token's
 * release raises an event the loop sees while the token is still taken:
 * it is kicked when it goes free (loop_poke).
 */
static void loop_leave_armed(struct smcr_eng *e)
{
	for (int round = 0; round < 4; round++) {
		bool scq;

		pthread_mutex_lock(&e->lock);
		scq = smcr_eng_scq_demand_locked(e);
		pthread_mutex_unlock(&e->lock);
		smcr_eng_arm(e, scq);
		if (!smcr_eng_poll(e))
			return;
		loop_take_events(e);
		smcr_eng_drain(e);
	}
}

/* Each link's channel in the loop's epoll set, edge-triggered (token
 * holder: the links cannot go meanwhile). Requires e->lock. */
static void loop_register_locked(struct smcr_eng *e)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		struct smcr_link *lnk = smcr_eng_link(e, i);
		int fd = lnk ? lnk->ch->fd : -1;
		struct epoll_event ee = {.events = EPOLLIN | EPOLLET, .data.ptr = e->loop_tag};

		if (e->loop_reg[i] == fd)
			continue;
		loop_unregister_locked(e, i);
		if (fd >= 0 && !epoll_ctl(e->loop_epfd, EPOLL_CTL_ADD, fd, &ee))
			e->loop_reg[i] = fd;
		eng_stat(e, ENG_SYSCALLS, 1);
	}
}

void smcr_eng_loop_attach(struct smcr_eng *e, int epfd, int kick_fd, void *tag)
{
	pthread_mutex_lock(&e->lock);
	if (e->loop_users++ == 0) {
		e->loop_epfd = epfd;
		e->loop_kick_fd = kick_fd;
		e->loop_tag = tag;
		atomic_store(&e->looped, true);
	}
	pthread_mutex_unlock(&e->lock);
	/* its first pass registers the channels and arms the CQs: nobody may
	 * have armed them since the token went free */
	kick_loop(e, kick_fd);
}

void smcr_eng_loop_detach(struct smcr_eng *e)
{
	pthread_mutex_lock(&e->lock);
	if (--e->loop_users == 0) {
		for (int i = 0; i < SMCR_LINKS_MAX; i++)
			loop_unregister_locked(e, i);
		e->loop_epfd = e->loop_kick_fd = -1;
		e->loop_tag = NULL;
		e->loop_poke = false;
		atomic_store(&e->looped, false);
	}
	pthread_mutex_unlock(&e->lock);
}

bool smcr_eng_loop_run(struct smcr_eng *e)
{
	bool mine;

	pthread_mutex_lock(&e->lock);
	mine = e->owner == ENG_FREE && e->loop_users;
	if (mine) {
		e->owner = ENG_APP;
		loop_register_locked(e);
	} else if (e->loop_users) {
		e->loop_poke = true; /* its holder runs them; we are kicked at the end */
	}
	pthread_mutex_unlock(&e->lock);
	if (!mine)
		return false;
	loop_take_events(e);
	smcr_eng_drain(e);
	eng_pass(e); /* armed first */
	return true;
}

/* The token's holder (an application thread) is done with it. */
static void eng_pass(struct smcr_eng *e)
{
	struct eng_handoff h;

	if (atomic_load(&e->looped))
		loop_leave_armed(e); /* it may go free: the loop needs it armed */
	pthread_mutex_lock(&e->lock);
	eng_pass_locked(e, false, &h);
	pthread_mutex_unlock(&e->lock);
	eng_handoff_tell(e, &h);
}

bool smcr_eng_progress_take(struct smcr_eng *e, bool force)
{
	bool mine;

	pthread_mutex_lock(&e->lock);
	if (e->owner == ENG_FREE && (force || progress_needed(e)))
		e->owner = ENG_PROG;
	mine = e->owner == ENG_PROG;
	e->prog_scq_off = false; /* awake: it decides again before it sleeps */
	pthread_mutex_unlock(&e->lock);
	return mine;
}

/*
 * Decided and passed in one hold of e->lock: a need that comes after the
 * decision (a hold, a readiness descriptor, a full send queue) then finds
 * the token free and takes it for the progress thread with a kick
 * (smcr_eng_want_progress()), where between the two it found the progress
 * thread owning it, kicked nobody, and waited for the next tick.
 */
bool smcr_eng_progress_release(struct smcr_eng *e, bool force)
{
	struct eng_handoff h;
	bool keep;

	if (atomic_load(&e->looped)) {
		/* it may go free: the loop needs the CQs armed */
		pthread_mutex_lock(&e->lock);
		keep = e->owner != ENG_PROG;
		pthread_mutex_unlock(&e->lock);
		if (!keep)
			loop_leave_armed(e);
	}
	pthread_mutex_lock(&e->lock);
	keep = e->owner != ENG_PROG ||
	       (!force && (crowd_locked(e) || (progress_needed(e) && !e->waiters)));
	if (!keep)
		eng_pass_locked(e, true, &h);
	pthread_mutex_unlock(&e->lock);
	if (keep)
		return false;
	eng_handoff_tell(e, &h);
	return true;
}

void smcr_eng_kick(struct smcr_eng *e)
{
	bool kick;

	pthread_mutex_lock(&e->lock);
	kick = e->owner == ENG_APP && e->owner_sleeping;
	pthread_mutex_unlock(&e->lock);
	if (kick)
		kick_app_owner(e);
}

void smcr_eng_want_progress(struct smcr_eng *e)
{
	bool kick;

	pthread_mutex_lock(&e->lock);
	kick = e->owner == ENG_FREE;
	if (kick)
		e->owner = ENG_PROG;
	else if (smcr_eng_scq_demand_locked(e))
		scq_demand_kick_locked(e); /* an owner asleep on the receive CQ only */
	/* else the owner runs the completions already, and woken it would
	 * arm what it armed before: a hold, a readiness descriptor or a
	 * close's churn need no wake-up */
	pthread_mutex_unlock(&e->lock);
	if (kick)
		kick_progress(e);
}

void smcr_eng_churn(struct smcr_eng *e)
{
	atomic_store_explicit(&e->churn_until_ms, clock_now_ms() + SMCR_ENG_CHURN_MS,
			      memory_order_relaxed);
	smcr_eng_want_progress(e); /* nobody may be running the completions */
}

bool smcr_eng_churning(struct smcr_eng *e, long now_ms)
{
	return now_ms < atomic_load_explicit(&e->churn_until_ms, memory_order_relaxed);
}

void smcr_eng_hold(struct smcr_eng *e)
{
	atomic_fetch_add(&e->holds, 1);
	smcr_eng_want_progress(e);
}

void smcr_eng_unhold(struct smcr_eng *e)
{
	atomic_fetch_sub(&e->holds, 1);
}

/* ---- the application's wait ------------------------------------------ */

static bool ready_locked_check(pthread_mutex_t *mu, smcr_eng_ready_fn ready, void *arg)
{
	bool r;

	pthread_mutex_lock(mu);
	r = ready(arg);
	pthread_mutex_unlock(mu);
	return r;
}

/* The spin budget: twice the waits seen lately when they are short (a
 * spin that gives up just before the reply pays both), none when they are
 * long (spinning then only takes the peer's CPU). */
static int64_t spin_budget(const struct smcr_eng *e)
{
	int64_t b = 2 * e->avg_wait_ns;

	if (e->avg_wait_ns > e->spin_cap_ns)
		return 0;
	return b > e->spin_cap_ns ? e->spin_cap_ns : b;
}

/* A spinner offers its CPU every @every_ns: the peer, or rxe's workers that
 * carry the reply, may be waiting for it. */
static void spin_yield(struct smcr_eng *e, int64_t *last_ns, int64_t every_ns)
{
	int64_t now = (int64_t)clock_now_ns();

	if (now - *last_ns < every_ns)
		return;
	sched_yield();
	eng_stat(e, ENG_SYSCALLS, 1);
	*last_ns = now;
}

void smcr_eng_progress_busy_idle(struct smcr_eng *e, int64_t *last_ns)
{
	/* it waits for no reply of its own, so it cannot tell a late one:
	 * rxe's workers get the CPU every ENG_BUSY_YIELD_NS */
	spin_yield(e, last_ns, ENG_BUSY_YIELD_NS);
}

/* Sleep on the links' channels (and the kick eventfd) until @deadline_ms at most. */
static void owner_sleep(struct smcr_eng *e, long deadline_ms)
{
	struct pollfd p[SMCR_LINKS_MAX + 1] = {{.fd = e->kick_fd, .events = POLLIN}};
	int slot[SMCR_LINKS_MAX + 1], n = 1;
	long ms = deadline_ms - clock_now_ms();
	uint64_t v;

	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		struct smcr_link *lnk = smcr_eng_link(e, i);

		if (lnk) {
			p[n] = (struct pollfd){.fd = lnk->ch->fd, .events = POLLIN};
			slot[n++] = i;
		}
	}
	if (ms > ENG_SLEEP_MAX_MS)
		ms = ENG_SLEEP_MAX_MS;
	if (ms < 0)
		ms = 0;
	poll(p, (nfds_t)n, (int)ms);
	eng_stat(e, ENG_WAKEUPS, 1);
	eng_stat(e, ENG_CH_SLEEPS, 1);
	eng_stat(e, ENG_SYSCALLS, 1);
	/* one event per channel (the usual case); another one makes the next
	 * poll() return */
	for (int i = 1; i < n; i++)
		if (p[i].revents & POLLIN)
			smcr_eng_get_event(e, slot[i]);
	if ((p[0].revents & POLLIN) && read(e->kick_fd, &v, sizeof(v)) > 0)
		eng_stat(e, ENG_SYSCALLS, 1);
}

/* The token holder's loop, no lock held; returns when ready or at the deadline. */
static void owner_run(struct smcr_eng *e, pthread_mutex_t *mu, smcr_eng_ready_fn ready, void *arg,
		      unsigned how, long deadline_ms)
{
	bool scq = how & SMCR_WAIT_SCQ;
	int64_t t0 = (int64_t)clock_now_ns(), t_yield = t0;
	int64_t budget = (how & SMCR_WAIT_REPLY) && e->set.spin ? spin_budget(e) : 0;
	bool busy = e->set.busy_poll, ok = false, slept = false;
	int passes = 0;
	bool can_spin = !busy && budget > 0 && smcr_spin_get(clock_now_ms());

	for (;;) {
		bool sleep_ok, want_scq;

		smcr_eng_poll(e);
		if ((ok = ready_locked_check(mu, ready, arg))) {
			if (passes && !slept)
				eng_stat(e, ENG_SPINS_OK, 1);
			break;
		}
		if (clock_now_ms() >= deadline_ms)
			break;
		passes++;
		if (busy) {
			/* A reply later than twice the usual one most likely waits
			 * for this CPU (rxe's workers carry it): offer it now and
			 * then. Earlier, a yield would only delay the usual reply
			 * (docs/smcr.md "Busy-polling on shared CPUs"). */
			if ((int64_t)clock_now_ns() - t0 > 2 * e->avg_wait_ns)
				spin_yield(e, &t_yield, ENG_BUSY_YIELD_NS);
			continue;
		}
		if (can_spin && !slept && (int64_t)clock_now_ns() - t0 < budget) {
			spin_yield(e, &t_yield, ENG_SPIN_YIELD_NS);
			continue;
		}
		pthread_mutex_lock(&e->lock);
		want_scq = scq || smcr_eng_scq_demand_locked(e);
		e->owner_sleeping = true;
		pthread_mutex_unlock(&e->lock);
		/* arm, poll once more, look at the predicate, and only then sleep */
		smcr_eng_arm(e, want_scq);
		sleep_ok = !smcr_eng_poll(e) && !ready_locked_check(mu, ready, arg);
		if (sleep_ok) {
			owner_sleep(e, deadline_ms);
			slept = true;
		}
		pthread_mutex_lock(&e->lock);
		e->owner_sleeping = false;
		pthread_mutex_unlock(&e->lock);
	}
	if (can_spin)
		smcr_spin_put();
	if (ok && (how & SMCR_WAIT_REPLY)) {
		/* the reply time this link group sees, for the next spin */
		e->avg_wait_ns += ((int64_t)clock_now_ns() - t0 - e->avg_wait_ns) / 8;
	}
}

bool smcr_eng_try_poll(struct smcr_eng *e, pthread_mutex_t *mu)
{
	bool mine;

	pthread_mutex_lock(&e->lock);
	mine = e->owner == ENG_FREE;
	if (mine)
		e->owner = ENG_APP;
	pthread_mutex_unlock(&e->lock);
	if (!mine)
		return false;
	pthread_mutex_unlock(mu);
	smcr_eng_poll(e);
	eng_pass(e);
	pthread_mutex_lock(mu);
	return true;
}

void smcr_eng_wait(struct smcr_eng *e, pthread_mutex_t *mu, pthread_cond_t *cond,
		   smcr_eng_ready_fn ready, void *arg, unsigned how, long deadline_ms)
{
	struct smcr_eng_waiter w = {.mu = mu, .cond = cond};
	bool scq = how & SMCR_WAIT_SCQ;
	bool owner;

	pthread_mutex_lock(&e->lock);
	owner = e->owner == ENG_FREE;
	if (owner) {
		e->owner = ENG_APP;
	} else {
		*e->waiters_tail = &w;
		e->waiters_tail = &w.next;
		/* the owner may sleep on the receive CQ only: let it arm the send CQ */
		if (scq && e->scq_wanted++ == 0)
			scq_demand_kick_locked(e);
	}
	pthread_mutex_unlock(&e->lock);
	if (!owner) {
		struct timespec ts;
		long until = deadline_ms;

		if (until > clock_now_ms() + ENG_SLEEP_MAX_MS)
			until = clock_now_ms() + ENG_SLEEP_MAX_MS;
		clock_deadline_ts(until, &ts);
		pthread_cond_timedwait(cond, mu, &ts);
		eng_stat(e, ENG_WAKEUPS, 1);
		eng_stat(e, ENG_SYSCALLS, 1);
		pthread_mutex_lock(&e->lock);
		if (scq)
			e->scq_wanted--;
		if (!w.handed) {
			/* still queued (woken by its connection, or timed out): leave */
			for (struct smcr_eng_waiter **pp = &e->waiters; *pp; pp = &(*pp)->next)
				if (*pp == &w) {
					*pp = w.next;
					if (!*pp)
						e->waiters_tail = pp;
					break;
				}
		}
		owner = w.handed;
		pthread_mutex_unlock(&e->lock);
		if (!owner)
			return;
		/* the hander may still be broadcasting on our condition: let it finish */
		pthread_mutex_unlock(mu);
		for (;;) {
			bool passing;

			pthread_mutex_lock(&e->lock);
			passing = w.passing;
			pthread_mutex_unlock(&e->lock);
			if (!passing)
				break;
			sched_yield();
		}
		pthread_mutex_lock(mu);
		if (ready(arg)) {
			/* handed the token but done already: pass it on */
			pthread_mutex_unlock(mu);
			eng_pass(e);
			pthread_mutex_lock(mu);
			return;
		}
	}
	pthread_mutex_unlock(mu);
	owner_run(e, mu, ready, arg, how, deadline_ms);
	eng_pass(e);
	pthread_mutex_lock(mu);
}
