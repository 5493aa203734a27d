// SPDX-License-Identifier: MIT
/*
 * When a connection is readable and writable (smcr_conn_int.h), told to
 * the threads that wait on it and to the descriptor its user polls.
 *
 * Readiness for usmc_conn_fd(): an AF_UNIX socketpair per connection,
 * created when the user first asks for it. The user polls ev[0]. Bytes wait ev[1] -> ev[0]
 * exactly while the connection is readable (one per edge: sc_rd_edge_locked());
 * ev[0]'s send side is kept full (bytes sent ev[0] ->
 * ev[1] and left unread) exactly while it is not writable. Once nothing more can arrive (the
 * peer shut its write side down, closed, aborted; an error; our SHUT_RD), ev[1]'s write side is
 * shut down, which makes AF_UNIX report EPOLLRDHUP (and POLLRDHUP) on ev[0], as TCP does
 * once its receive side is shut (tcp_poll(): RCV_SHUTDOWN); once both directions are over,
 * ev[0]'s too: EPOLLHUP, as tcp_poll() gives for SHUTDOWN_MASK.
 */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cdc_rx.h"
#include "clock.h"
#include "smcr_conn.h"
#include "smcr_conn_int.h"

#define EV_FILL_CHUNK 4096
#define EV_EDGE_MAX   64 /* readability bytes in the pair at most */

/* ---- the state ------------------------------------------------------- */

static bool sc_readable(const struct smcr_conn *sc)
{
	return sc->rx.rx_prod > sc->rx.rx_cons || cdc_rx_eof(&sc->rx) || sc->rx.peer_abort ||
	       sc->err || sc->shut_rd;
}

/* Nothing more will arrive: TCP's RCV_SHUTDOWN (EPOLLRDHUP). Sticky. */
static bool sc_rdhup(const struct smcr_conn *sc)
{
	return sc->rx.peer_done_writing || sc->rx.peer_closed || sc->rx.peer_abort || sc->err ||
	       sc->shut_rd;
}

/* Both directions are over: TCP's SHUTDOWN_MASK or a reset (EPOLLHUP).
 * Sticky, and implies sc_writable(). */
static bool sc_hup(const struct smcr_conn *sc)
{
	return sc_rdhup(sc) && (sc->shut_wr || sc->rx.peer_abort || sc->err);
}

/*
 * Where the send buffer is free again up to: what has completed, or what
 * the peer has consumed, whichever is further. Linux frees only at the
 * completion (net/smc/smc_cdc.c smc_cdc_tx_handler()), but the consumer
 * cursor proves more: the peer read those bytes, so the RDMA WRITE that
 * carried them was executed before the CDC that announced them (one QP,
 * in order), and nothing reads that part of the buffer again. Only a
 * retransmission could, and a responder drops a duplicate WRITE (IBTA
 * C9-105). On rxe the completion comes up to a millisecond after the
 * credit in a stream: freed at the credit, the writer fills the buffer
 * while the window is open instead of after (docs/smcr.md "The stream's
 * cycle"). rx.peer_cons <= rx.tx_sent <= tx_prep (wire/cdc_rx.h), so the
 * free space never exceeds the buffer.
 */
uint64_t sc_snd_free(const struct smcr_conn *sc)
{
	return sc->rx.peer_cons > sc->tx_fin ? sc->rx.peer_cons : sc->tx_fin;
}

uint64_t sc_snd_room(const struct smcr_conn *sc)
{
	return sc->snd_len - (sc->tx_prep - sc_snd_free(sc));
}

static bool sc_writable(const struct smcr_conn *sc)
{
	return sc_snd_room(sc) > 0 || sc->err || sc->rx.peer_abort || sc->rx.peer_closed ||
	       sc->shut_wr || sc->closed;
}

/* The close (or abort) CDC is on the wire, or never will be. */
bool sc_close_posted(const struct smcr_conn *sc)
{
	return sc->closed_sent || sc->abort_sent || sc->err || sc->rx.peer_abort || !sc->tx_pending;
}

/* ---- the user's descriptor ------------------------------------------- */

/*
 * The shutdowns of the readiness pair, as AF_UNIX reports them on ev[0]
 * (unix_shutdown(), unix_poll()): ev[1]'s write side shut = RCV_SHUTDOWN
 * on ev[0], so EPOLLIN | EPOLLRDHUP for good (ev[0] reads EOF once the
 * byte is gone); ev[1]'s read side shut too = SEND_SHUTDOWN on ev[0] as
 * well, so EPOLLHUP. One call sets both bits when both come at once, as
 * TCP sets them together. Requires sc->lock; returns the system calls
 * made. Nothing is written into the pair afterwards: both states imply
 * readable (no byte needed), the second writable (no fill), and the fill
 * is drained before EPOLLHUP.
 */
static int sc_ready_shutdowns_locked(struct smcr_conn *sc)
{
	int how = -1;

	if (!sc->hup_sig && !sc->wr_blocked_sig && sc_hup(sc)) {
		how = SHUT_RDWR;
		sc->hup_sig = sc->rdhup_sig = true;
	} else if (!sc->rdhup_sig && sc_rdhup(sc)) {
		how = SHUT_WR;
		sc->rdhup_sig = true;
	}
	if (how < 0)
		return 0;
	shutdown(sc->ev[1], how);
	return 1;
}

/*
 * Data came after a read that did not drain: a new edge, as TCP wakes its
 * waiters at every arrival (sk_data_ready()), so that an application that
 * reads one buffer per EPOLLET edge is told again. One more byte into the
 * pair does it: AF_UNIX wakes ev[0]'s waiters at every write. Not after
 * the RDHUP shutdown (readable for good, and the pair takes no more), nor
 * before the reader read (its edge still stands): a reader that drains the
 * stream pays nothing for it. At EV_EDGE_MAX bytes the old edges, seen
 * already, are read back first. Requires sc->lock; returns the system
 * calls made.
 */
static int sc_rd_edge_locked(struct smcr_conn *sc)
{
	uint8_t tmp[EV_EDGE_MAX];
	int ops = 0;

	if (!sc->rd_read || sc->rx.rx_prod <= sc->rd_edge_prod || sc->rdhup_sig)
		return 0;
	if (sc->rd_bytes >= EV_EDGE_MAX && read(sc->ev[0], tmp, (size_t)sc->rd_bytes - 1) > 0)
		sc->rd_bytes = 1, ops++;
	if (write(sc->ev[1], "r", 1) == 1)
		sc->rd_bytes++;
	sc->rd_edge_prod = sc->rx.rx_prod;
	sc->rd_read = false;
	return ops + 1;
}

/* Readable, or no longer: the first edge, a new one, or the bytes read
 * back. Requires sc->lock; returns the system calls made. */
static int sc_update_rd_locked(struct smcr_conn *sc, bool rd)
{
	uint8_t tmp[EV_EDGE_MAX];

	if (rd && !sc->rd_sig) {
		/* after the RDHUP shutdown, readable without a byte */
		sc->rd_bytes = !sc->rdhup_sig && write(sc->ev[1], "r", 1) == 1;
		sc->rd_sig = sc->rdhup_sig || sc->rd_bytes;
		sc->rd_edge_prod = sc->rx.rx_prod;
		sc->rd_read = false;
		return 1;
	}
	if (rd)
		return sc_rd_edge_locked(sc);
	if (!sc->rd_sig || !sc->rd_bytes)
		return 0; /* not told, or told by the RDHUP shutdown, for good */
	/* read back every edge's byte */
	if (read(sc->ev[0], tmp, (size_t)sc->rd_bytes) == sc->rd_bytes)
		sc->rd_bytes = 0;
	sc->rd_sig = sc->rdhup_sig || sc->rd_bytes;
	return 1;
}

/* ---- an event set's watch ------------------------------------------- */

/*
 * Tell the watch the state if it changed; requires sc->lock. A full send
 * buffer counts in room_waiters, as a descriptor that shows one does: the
 * room comes with send completions, which must then run as they come.
 */
static void sc_watch_update_locked(struct smcr_conn *sc, bool rd, bool wr)
{
	unsigned state = (rd ? SMCR_READY_RD : 0) | (wr ? SMCR_READY_WR : 0) |
			 (sc_rdhup(sc) ? SMCR_READY_RDHUP : 0) |
			 (sc->err || sc->rx.peer_abort ? SMCR_READY_ERR : 0);

	if (!wr && !sc->watch_room) {
		sc->watch_room = true;
		if (atomic_fetch_add(&sc->lgr->eng.room_waiters, 1) == 0)
			smcr_eng_scq_demand_raised(&sc->lgr->eng);
	} else if (wr && sc->watch_room) {
		sc->watch_room = false;
		atomic_fetch_sub(&sc->lgr->eng.room_waiters, 1);
	}
	if (state != sc->watch_state) {
		sc->watch_state = state;
		sc->watch_fn(sc->watch_arg, state);
	}
}

/* The watch goes: what it counted in the engine too; requires sc->lock. */
void sc_watch_drop_locked(struct smcr_conn *sc)
{
	if (!sc->watch_fn)
		return;
	sc->watch_fn = NULL;
	sc->watch_arg = NULL;
	if (sc->watch_room)
		atomic_fetch_sub(&sc->lgr->eng.room_waiters, 1);
	sc->watch_room = false;
}

void smcr_conn_watch(struct smcr_conn *sc, smcr_watch_fn fn, void *arg)
{
	int cancel = sc_cancel_off(); /* no cancellation point */

	pthread_mutex_lock(&sc->lock);
	sc_watch_drop_locked(sc);
	if (fn) {
		sc->watch_fn = fn;
		sc->watch_arg = arg;
		sc->watch_state = ~0u; /* told at once */
		sc_watch_update_locked(sc, sc_readable(sc), sc_writable(sc));
	}
	pthread_mutex_unlock(&sc->lock);
	sc_cancel_restore(cancel);
}

/* ---- publication ----------------------------------------------------- */

/* Publish readiness on the user's descriptor and to the watch; requires
 * sc->lock, after every state change. */
void sc_update_ready_locked(struct smcr_conn *sc)
{
	static const uint8_t fill[EV_FILL_CHUNK];
	uint8_t tmp[EV_FILL_CHUNK];
	bool rd = sc_readable(sc), wr = sc_writable(sc);

	int ops = 0;

	if (sc->watch_fn)
		sc_watch_update_locked(sc, rd, wr);
	if (sc->ev[0] < 0)
		return; /* nobody asked for the descriptor */
	ops += sc_ready_shutdowns_locked(sc);
	ops += sc_update_rd_locked(sc, rd);
	if (!wr && !sc->wr_blocked_sig) {
		if (!sc->ev_fill_small) {
			/* the kernel rounds up to its minimum: a few KiB fill it.
			 * Set at the first fill, not per pair: a short connection
			 * never fills its send buffer */
			int small = 1;

			setsockopt(sc->ev[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
			sc->ev_fill_small = true;
			ops++;
		}
		while (ops++, write(sc->ev[0], fill, sizeof(fill)) > 0)
			;
		sc->wr_blocked_sig = true;
		/* room comes with send completions: have them run as they come */
		if (atomic_fetch_add(&sc->lgr->eng.room_waiters, 1) == 0)
			smcr_eng_scq_demand_raised(&sc->lgr->eng);
	} else if (wr && sc->wr_blocked_sig) {
		while (ops++, read(sc->ev[1], tmp, sizeof(tmp)) > 0)
			;
		sc->wr_blocked_sig = false;
		atomic_fetch_sub(&sc->lgr->eng.room_waiters, 1);
		ops += sc_ready_shutdowns_locked(sc); /* EPOLLHUP waited for the drain */
	}
	if (ops) {
		eng_count(&sc->lgr->st, ENG_READY_OPS, (uint64_t)ops);
		eng_count(&sc->lgr->st, ENG_SYSCALLS, (uint64_t)ops);
	}
}

static int ev_pair(int ev[2])
{
	return socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, ev) ? -errno : 0;
}

/* The readiness pair, made now and told the state; requires sc->lock. */
static int sc_ev_pair_make_locked(struct smcr_conn *sc)
{
	int rc = ev_pair(sc->ev);

	if (rc)
		return rc;
	sc->rd_sig = sc->wr_blocked_sig = sc->rdhup_sig = sc->hup_sig = false;
	sc->rd_bytes = 0;
	sc_update_ready_locked(sc);
	return 0;
}

int smcr_conn_fd(struct smcr_conn *sc)
{
	int fd, rc = 0, cancel = sc_cancel_off(); /* no cancellation point */
	bool thread;

	pthread_mutex_lock(&sc->lock);
	if (sc->ev[0] < 0) {
		rc = sc_ev_pair_make_locked(sc);
		if (!rc) /* an event loop now needs completions run as they come */
			atomic_fetch_add(&sc->lgr->eng.fd_users, 1);
	}
	fd = rc ? rc : sc->ev[0];
	thread = !rc && !sc->ev_looped; /* a loop's poller runs them itself */
	pthread_mutex_unlock(&sc->lock);
	if (thread)
		smcr_eng_want_progress(&sc->lgr->eng);
	sc_cancel_restore(cancel);
	return fd;
}

int smcr_conn_fd_loop(struct smcr_conn *sc, bool on)
{
	int rc = 0, cancel = sc_cancel_off(); /* no cancellation point */
	bool flip;

	pthread_mutex_lock(&sc->lock);
	if (on && sc->ev[0] < 0) {
		/* made for the loop: never counted, so the thread never takes
		 * the engine for it */
		rc = sc_ev_pair_make_locked(sc);
		sc->ev_looped = rc == 0;
	}
	flip = !rc && sc->ev[0] >= 0 && sc->ev_looped != on;
	if (flip) {
		sc->ev_looped = on;
		atomic_fetch_add(&sc->lgr->eng.fd_users, on ? -1 : 1);
	}
	pthread_mutex_unlock(&sc->lock);
	if (flip && !on) /* the loop may be gone before the thread takes over */
		smcr_eng_want_progress(&sc->lgr->eng);
	sc_cancel_restore(cancel);
	return rc;
}

/* ---- the threads that wait ------------------------------------------- */

/* Wake the threads waiting on @sc for @what; requires sc->lock. (A
 * waiter that holds the engine's token is not on the condition: glibc's
 * broadcast then makes no system call, so none is counted here; a sleeping
 * waiter counts its own futex wait.) */
void sc_wake_locked(struct smcr_conn *sc, int what)
{
	if ((what & SC_RD) && sc->rwaiters)
		pthread_cond_broadcast(&sc->rcond);
	if ((what & SC_WR) && sc->wwaiters)
		pthread_cond_broadcast(&sc->wcond);
}

void sc_fail_locked(struct smcr_conn *sc, int err)
{
	if (!sc->err) {
		sc->err = err;
		/* The peer's stream was complete: a link group that ends later
		 * (the peer process exits, say) takes nothing from it. */
		sc->err_after_eof = cdc_rx_eof(&sc->rx);
	}
	sc_wake_locked(sc, SC_RD | SC_WR);
	sc_update_ready_locked(sc);
	smcr_eng_kick(&sc->lgr->eng); /* an owner asleep on the channel looks again */
}

bool sc_fail(struct smcr_conn *sc, int err)
{
	bool orphan;

	pthread_mutex_lock(&sc->lock);
	sc_fail_locked(sc, err);
	orphan = sc->orphan;
	pthread_mutex_unlock(&sc->lock);
	return orphan;
}

static bool sc_ready_rd(void *arg)
{
	return sc_readable(arg);
}

static bool sc_ready_wr(void *arg)
{
	return sc_writable(arg);
}

static bool sc_ready_linger(void *arg)
{
	struct smcr_conn *sc = arg;

	return sc->tx_fin >= sc->tx_prep || sc->err || sc->rx.peer_abort;
}

static bool sc_ready_posted(void *arg)
{
	return sc_close_posted(arg);
}

/* A writer short of room waits this long for the peer's credit before it
 * asks for our send completions too (sc_wait_locked()). */
#define SC_ROOM_CREDIT_MS 10

/*
 * Room comes back with the peer's credit or with our send completions,
 * whichever is first (sc_snd_free()). In a stream the credit is first (on
 * rxe up to a millisecond before the completion), and a writer that also
 * asked for completions was woken twice per CDC, the second time for
 * nothing. So a writer first waits for the credit alone, with the send CQ
 * left unarmed; only a peer that reads nothing for SC_ROOM_CREDIT_MS makes
 * the completions worth a wake-up (they free what it has not consumed, for
 * the writer to buffer more). Completions that nobody waits for are run by
 * the next poll meanwhile. Requires sc->lock; true if the wait is over
 * (room, an error, or @deadline passed).
 */
static bool sc_wait_credit_locked(struct smcr_conn *sc, long deadline)
{
	long credit_by = clock_now_ms() + SC_ROOM_CREDIT_MS;

	if (credit_by >= deadline)
		return false;
	smcr_eng_wait(&sc->lgr->eng, &sc->lock, &sc->wcond, sc_ready_wr, sc, 0, credit_by);
	return sc_writable(sc) || clock_now_ms() >= deadline;
}

static bool *sc_user_turn(struct smcr_conn *sc, int what)
{
	return what == SC_RD ? &sc->rx_user : &sc->tx_user;
}

void sc_user_enter_locked(struct smcr_conn *sc, int what)
{
	bool *turn = sc_user_turn(sc, what);

	while (*turn) {
		sc->user_waiters++;
		pthread_cond_wait(&sc->user_cond, &sc->lock);
		sc->user_waiters--;
	}
	*turn = true;
}

void sc_user_leave_locked(struct smcr_conn *sc, int what)
{
	*sc_user_turn(sc, what) = false;
	if (sc->user_waiters)
		pthread_cond_broadcast(&sc->user_cond);
}

/* ---- cancellation ---------------------------------------------------- */

int sc_cancel_off(void)
{
	int old;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	return old;
}

void sc_cancel_restore(int old)
{
	int was;

	pthread_setcancelstate(old, &was);
}

void sc_cancel_point_locked(struct smcr_conn *sc, int what, int old)
{
	if (old != PTHREAD_CANCEL_ENABLE)
		return;
	if (what)
		sc_user_leave_locked(sc, what);
	pthread_mutex_unlock(&sc->lock);
	sc_cancel_restore(PTHREAD_CANCEL_ENABLE);
	pthread_testcancel();
	sc_cancel_off();
	pthread_mutex_lock(&sc->lock);
	if (what)
		sc_user_enter_locked(sc, what);
}

int sc_user_call_begin(struct smcr_conn *sc, int what, bool nonblock)
{
	int cancel = sc_cancel_off();

	pthread_mutex_lock(&sc->lock);
	if (!nonblock)
		sc_cancel_point_locked(sc, 0, cancel); /* a blocking call starts */
	sc_user_enter_locked(sc, what);
	return cancel;
}

void sc_user_call_end(struct smcr_conn *sc, int what, int cancel)
{
	sc_user_leave_locked(sc, what);
	pthread_mutex_unlock(&sc->lock);
	sc_cancel_restore(cancel);
}

/*
 * Wait at most @ms for what @what needs, running the link group's
 * completions meanwhile (smcr_eng.h: this thread may be the one that polls
 * and sleeps on the channel); requires sc->lock, which it drops meanwhile.
 */
void sc_wait_locked(struct smcr_conn *sc, int what, long ms)
{
	long deadline = clock_now_ms() + ms;

	if (what == SC_RD || what == SC_WR)
		sc_user_leave_locked(sc, what);
	if (what == SC_RD) {
		sc->rwaiters++;
		smcr_eng_wait(&sc->lgr->eng, &sc->lock, &sc->rcond, sc_ready_rd, sc,
			      sc->sent_since_read ? SMCR_WAIT_REPLY : 0, deadline);
		sc->rwaiters--;
	} else {
		smcr_eng_ready_fn ready = what == SC_WR	      ? sc_ready_wr
					  : what == SC_LINGER ? sc_ready_linger
							      : sc_ready_posted;

		sc->wwaiters++;
		if (what != SC_WR || !sc_wait_credit_locked(sc, deadline))
			smcr_eng_wait(&sc->lgr->eng, &sc->lock, &sc->wcond, ready, sc,
				      SMCR_WAIT_SCQ, deadline);
		sc->wwaiters--;
	}
	if (what == SC_RD || what == SC_WR)
		sc_user_enter_locked(sc, what);
}
