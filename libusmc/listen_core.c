// SPDX-License-Identifier: MIT
/*
 * The listener's shared state as its threads use it (listen_core.h): the
 * accept queue usmc_accept() takes from, the handshake counts and the
 * histogram, admission by cost and the SYN-time congestion flag, the
 * handshakes parked for the accept thread, and a handshake worker's step.
 * The accept thread (accept_thread.c), the probe (probe.c) and the workers
 * call down into it; the API (listen.c) creates and closes the listener.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"
#include "conn.h"
#include "ctx.h"
#include "listen_core.h"
#include "listen_handshake.h"

void listener_record_hs_time(struct usmc_listener *l, const struct usmc_conn *c)
{
	uint64_t us = (clock_now_ns() - c->t_accept_ns) / CLOCK_NSEC_PER_USEC;

	atomic_fetch_add_explicit(&l->hs_hist[listen_hist_bucket(us)], 1, memory_order_relaxed);
}

/*
 * The accept queue's fd (usmc_listener_fd()) is an eventfd that is
 * readable exactly while the queue holds a connection. It is written when
 * the queue becomes non-empty and drained when it becomes empty, both
 * under qlock, so it never disagrees with the queue once the lock is
 * released: two system calls per batch the application takes, not one
 * per connection. (The write under the lock is on the empty-queue edge,
 * when the application has nothing to pop, so it rarely holds anyone up.)
 */
/* Requires @l->qlock. */
static void queue_signal_locked(struct usmc_listener *l, bool ready)
{
	uint64_t v = 1;

	if (l->qready == ready)
		return;
	l->qready = ready;
	if (ready ? write(l->qfd, &v, sizeof(v)) < 0 : read(l->qfd, &v, sizeof(v)) < 0) {
		/* cannot fail: the count is 0 or 1, and 1 before a read */
	}
}

bool listener_src_enter(struct usmc_listener *l, struct usmc_conn *c)
{
	if (c->src_counted)
		return true;
	conn_keep_peer(c); /* the handshake keeps it anyway */
	switch (listen_sources_enter(&l->srcs, &c->peer, c->peer_len, (unsigned int)l->backlog)) {
	case LISTEN_SRC_COUNTED:
		c->src_counted = true;
		return true;
	case LISTEN_SRC_UNCOUNTED:
		return true;
	case LISTEN_SRC_REFUSED:
		break;
	}
	atomic_fetch_add(&l->source_refused, 1);
	return false;
}

/* @c leaves the handshake: no longer counted for its source. Before it is
 * handed on (the application may close it at once). */
static void src_leave(struct usmc_listener *l, struct usmc_conn *c)
{
	if (!c->src_counted)
		return;
	c->src_counted = false;
	listen_sources_leave(&l->srcs, &c->peer, c->peer_len);
}

void listener_enqueue(struct usmc_listener *l, struct usmc_conn *c)
{
	src_leave(l, c);
	mode_counts_add(&l->modes, c->mode, c->reason);
	pthread_mutex_lock(&l->qlock);
	conn_fifo_push(&l->q, c);
	/* counted before the handshake count drops, so the sum never dips
	 * below the truth and the cap is never overshot */
	atomic_fetch_add(&l->queued, 1);
	queue_signal_locked(l, true);
	pthread_mutex_unlock(&l->qlock);
}

/*
 * In this order, so that every count a caller can read agrees: the context
 * stops counting @c open before the listener stops counting it in
 * handshake (whoever reads in_handshake 0 may destroy the context), and
 * the peer sees EOF only after both.
 */
void listener_drop(struct usmc_listener *l, struct usmc_conn *c, int err)
{
	int fd;

	usmc_log(&l->ctx->log, USMC_LOG_INFO, "listener %s: handshake with %s failed: %s: closed",
		 log_local(c->fd).s, conn_log_peer(c).s, usmc_strerror(err));
	atomic_fetch_add(&l->hs_failed, 1);
	atomic_fetch_add(&l->ctx->hs_errors, 1);
	src_leave(l, c);
	fd = conn_dismantle(c);
	atomic_fetch_sub(&l->in_handshake, 1);
	if (atomic_load(&l->paused))
		listener_wake(l);
	if (fd >= 0)
		close(fd);
}

struct usmc_conn *listener_queue_pop(struct usmc_listener *l)
{
	struct usmc_conn *c;

	pthread_mutex_lock(&l->qlock);
	c = conn_fifo_pop(&l->q);
	if (c)
		atomic_fetch_sub(&l->queued, 1);
	queue_signal_locked(l, l->q.head != NULL);
	pthread_mutex_unlock(&l->qlock);
	return c;
}

void listener_finish_tcp(struct usmc_listener *l, struct usmc_conn *c, uint32_t reason)
{
	conn_set_mode(c, USMC_MODE_TCP, reason, false);
	listener_enqueue(l, c);
}

static struct listen_admit_state storm_load(struct usmc_listener *l)
{
	return (struct listen_admit_state){.storm_until_ns = atomic_load(&l->storm_until_ns),
					   .storm_hold_ns = atomic_load(&l->storm_hold_ns),
					   .next_admit_ns = atomic_load(&l->next_admit_ns)};
}

/* Racing stores (the accept thread, workers) both come from recent
 * arrivals: either is right. */
static void storm_store(struct usmc_listener *l, const struct listen_admit_state *st)
{
	atomic_store(&l->storm_hold_ns, st->storm_hold_ns);
	atomic_store(&l->storm_until_ns, st->storm_until_ns);
}

/* The decision for an SMC client arriving now; takes the storm's
 * admission token if it admits in a storm. */
static enum listen_admit listener_admit(struct usmc_listener *l, const struct usmc_opts *o)
{
	int64_t now = (int64_t)clock_now_ns();
	struct listen_admit_state st = storm_load(l);
	int64_t next0 = st.next_admit_ns, storm0 = st.storm_until_ns;
	enum listen_admit a =
		listen_admit_smcr(o->v[USMC_OPT_AUTO_FALLBACK], hs_pool_depth(&l->hs),
				  opts_hs_congestion(o), now, atomic_load(&l->hs_cost_ns), &st);

	if (st.storm_until_ns > storm0)
		storm_store(l, &st);
	/* one thread wins a storm's token */
	if (st.next_admit_ns != next0 &&
	    !atomic_compare_exchange_strong(&l->next_admit_ns, &next0, st.next_admit_ns))
		a = LISTEN_DECLINE_BUDGET;
	return a;
}

/* Kernel-compat: the SYN-time flags after the queue changed; @arrival: a
 * new connection found it so (only an arrival at a congested queue starts
 * a storm, not the queue's own growth as a handshake is queued). */
static void update_congestion(struct usmc_listener *l, const struct usmc_opts *o, bool arrival)
{
	bool congested;

	if (!o->v[USMC_OPT_AUTO_FALLBACK])
		return;
	/* Unserialized, a thread that read the depth before another moved it
	 * could write its flag after the other's: a pool drained to 0 would
	 * stay "congested" at SYN time until the next connection came. */
	pthread_mutex_lock(&l->syn_lock);
	congested = listen_hs_congested(hs_pool_depth(&l->hs), opts_hs_congestion(o));
	if (congested && arrival) {
		struct listen_admit_state st = storm_load(l);

		listen_storm_renew((int64_t)clock_now_ns(), &st);
		storm_store(l, &st);
	}
	kcompat_listener_set_congested(l->ctx->kc, &l->kc, congested);
	/* a storm: its SMC clients get TCP at SYN time, as cheap as plain
	 * ones; the program ends it at storm_until_ns by itself, so nothing
	 * stays refused after the storm (the listener's events, which rewrite
	 * the flag, stop with it) */
	kcompat_listener_set_storm(l->ctx->kc, &l->kc, atomic_load(&l->storm_until_ns));
	pthread_mutex_unlock(&l->syn_lock);
}

void listener_update_congestion(struct usmc_listener *l, const struct usmc_opts *o)
{
	update_congestion(l, o, true); /* the accept thread, for a new connection */
}

void listener_storm_demand(struct usmc_listener *l, const struct usmc_opts *o)
{
	int64_t now = (int64_t)clock_now_ns();
	struct listen_admit_state st;

	bool more;

	/* the accept thread, or usmc_accept() for a SYN-time fallback */
	pthread_mutex_lock(&l->demand_lock);
	more = listen_storm_demand(now, atomic_load(&l->hs_cost_ns), o->v[USMC_OPT_HS_THREADS],
				   &l->demand);
	pthread_mutex_unlock(&l->demand_lock);
	if (!more)
		return;
	st = storm_load(l);
	if (now >= st.storm_until_ns)
		return; /* over: the queue says whether another starts */
	listen_storm_renew(now, &st);
	storm_store(l, &st);
	kcompat_listener_set_storm(l->ctx->kc, &l->kc, st.storm_until_ns);
}

bool listener_decline_smcr(struct usmc_listener *l, const struct usmc_opts *o)
{
	enum listen_admit a = listener_admit(l, o);

	if (a == LISTEN_DECLINE_BUDGET) {
		atomic_fetch_add(&l->budget_fallbacks, 1);
		listener_storm_demand(l, o);
	}
	return a != LISTEN_ADMIT;
}

void listener_hs_submit(struct usmc_listener *l, struct usmc_conn *c)
{
	struct usmc_opts o = c->opts; /* @c belongs to the pool once queued */

	hs_pool_submit(&l->hs, c);	 /* stays counted in in_handshake */
	update_congestion(l, &o, false); /* kernel-compat: the queue grew */
}

/* Tests only: a worker calls it before each handshake step, if a test
 * defines it (tests hold workers there to congest the pool:
 * tests/common/hold_workers.h). Declared here, not in listen_core.h, so that a
 * test that defines it and includes listen_core.h sees no weak declaration. */
extern void listen_test_hook_worker(void) __attribute__((weak));

/* What @c's worker step, which returned @rc, came to (listen_hs_cost()). */
static enum listen_step step_outcome(const struct usmc_conn *c, int rc)
{
	if (rc == LISTEN_HS_PARKED)
		return LISTEN_STEP_PARKED;
	if (rc)
		return LISTEN_STEP_FAILED;
	return listen_step_final(c->mode == USMC_MODE_SMCR, c->peer_declined, c->reason);
}

/* The admission budget's measure after a step that began at @t0; racing
 * workers may lose an update. */
static void note_hs_cost(struct usmc_listener *l, int64_t t0, enum listen_step outcome)
{
	int64_t dt = (int64_t)clock_now_ns() - t0;

	atomic_store(&l->hs_cost_ns, listen_hs_cost(atomic_load(&l->hs_cost_ns), dt, outcome));
}

void listener_hs_worker(void *arg, struct usmc_conn *c)
{
	struct usmc_listener *l = arg;
	int64_t t0 = (int64_t)clock_now_ns();
	int rc;

	update_congestion(l, &c->opts, false); /* kernel-compat: the queue shrank */
	if (listen_test_hook_worker)
		listen_test_hook_worker();
	rc = listen_handshake(c); /* the socket is blocking (ACCEPT_FLAGS) */
	note_hs_cost(l, t0, step_outcome(c, rc));

	if (rc == LISTEN_HS_PARKED) {
		listener_park(l, c);
		return;
	}
	if (rc) {
		listener_drop(l, c, rc);
		return;
	}
	listener_record_hs_time(l, c);
	listener_enqueue(l, c);
	atomic_fetch_sub(&l->in_handshake, 1);
	if (atomic_load(&l->paused))
		listener_wake(l);
}

void listener_park(struct usmc_listener *l, struct usmc_conn *c)
{
	pthread_mutex_lock(&l->park_lock);
	conn_fifo_push(&l->parked, c);
	pthread_mutex_unlock(&l->park_lock);
	listener_wake(l);
}

/* The whole of @q, taken off it under park_lock. */
static struct usmc_conn *take_all(struct usmc_listener *l, struct conn_fifo *q)
{
	struct usmc_conn *c;

	pthread_mutex_lock(&l->park_lock);
	c = q->head;
	*q = (struct conn_fifo){0};
	pthread_mutex_unlock(&l->park_lock);
	return c;
}

struct usmc_conn *listener_take_parked(struct usmc_listener *l)
{
	return take_all(l, &l->parked);
}

struct usmc_conn *listener_take_handed(struct usmc_listener *l)
{
	return take_all(l, &l->handed);
}

void listener_copy_opts(struct usmc_listener *l, struct usmc_opts *out)
{
	opts_copy_locked(&l->opts, &l->opts_lock, out);
}

/* ---- what the accept thread needs of the listener ----------------------- */

unsigned int listener_room(struct usmc_listener *l)
{
	return listen_backlog_room(atomic_load(&l->in_handshake), atomic_load(&l->queued),
				   (unsigned int)l->backlog);
}

enum kc_peer listener_accepted_peer(struct usmc_listener *l, int fd)
{
	enum kc_peer p;

	if (!l->kc.active)
		return KC_PEER_UNKNOWN; /* as kcompat_server_peer() says, no lock */
	/* Its deduction reads the program's count of a kind, then ours: a
	 * second caller that takes and counts a socket of that kind between
	 * the two reads would hide ours, and a lone other kind would be
	 * taken for it. One caller at a time keeps our counts still. */
	pthread_mutex_lock(&l->peer_lock);
	p = kcompat_server_peer(l->ctx->kc, &l->kc, fd);
	pthread_mutex_unlock(&l->peer_lock);
	return p;
}

struct usmc_conn *listener_new_conn(struct usmc_listener *l, int fd, struct usmc_opts *o)
{
	struct usmc_conn *c;

	listener_copy_opts(l, o);
	atomic_fetch_add(&l->accepted, 1);
	c = conn_alloc(l->ctx, fd, o, true);
	if (!c) {
		listener_refuse(l, fd);
		return NULL;
	}
	c->kc_peer = listener_accepted_peer(l, fd);
	c->t_accept_ns = clock_now_ns();
	return c;
}

bool listener_decided_at_syn(struct usmc_listener *l, struct usmc_conn *c,
			     const struct usmc_opts *o)
{
	if (!o->v[USMC_OPT_SMC]) {
		conn_set_mode(c, USMC_MODE_TCP, USMC_REASON_DISABLED, false);
		return true;
	}
	listener_update_congestion(l, o); /* kernel-compat */
	if (c->kc_peer == KC_PEER_NOSMC) {
		conn_set_mode(c, USMC_MODE_TCP, USMC_REASON_PEERNOSMC, false);
		return true;
	}
	if (c->kc_peer == KC_PEER_CONGESTED) { /* its SYN-ACK went without the option */
		usmc_log(
			&l->ctx->log, USMC_LOG_WARN,
			"listener %s: handshake queue congested: SYN-ACK to %s without the SMC option, TCP",
			log_local(c->fd).s, conn_log_peer(c).s);
		atomic_fetch_add(&l->congestion_fallbacks, 1);
		listener_storm_demand(l, o);
		conn_set_mode(c, USMC_MODE_TCP, USMC_REASON_HS_CONGESTED, false);
		return true;
	}
	return false;
}

void listener_refuse(struct usmc_listener *l, int fd)
{
	(void)listener_accepted_peer(l, fd);
	close(fd);
	atomic_fetch_add(&l->hs_failed, 1);
}

void listener_wake(struct usmc_listener *l)
{
	uint64_t one = 1;

	if (write(l->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the thread is awake anyway */
	}
}

/* A handshake event of the context (called under the context's watch
 * lock: no lock here). Every listener hears of every event, so the wake-up
 * is only for one with a handshake that waits. */
static void hs_moved(struct smcr_hs_watch *w)
{
	struct usmc_listener *l =
		(struct usmc_listener *)((char *)w - offsetof(struct usmc_listener, hs_watch));

	atomic_store(&l->hs_moved, true);
	if (atomic_load(&l->event_waiters))
		listener_wake(l);
}

void listener_watch_events(struct usmc_listener *l, bool on)
{
	l->hs_watch.moved = hs_moved;
	listen_hs_watch(l->ctx, &l->hs_watch, on);
}
