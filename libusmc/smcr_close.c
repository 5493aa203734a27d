// SPDX-License-Identifier: MIT
/*
 * Close (net/smc/smc_close.c): shutdown, close with its linger, abort; the
 * orphan a close leaves until its peer closes too; and the connection's
 * TCP socket, watched from the handshake's end for the peer's death (a
 * hang-up without a close CDC) and told of the link group's.
 */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "smcr_conn.h"
#include "smcr_conn_int.h"

/* ---- our close ------------------------------------------------------- */

int smcr_shutdown(struct smcr_conn *sc, int how)
{
	int cancel = sc_cancel_off(); /* no cancellation point (smcr_conn_int.h) */

	pthread_mutex_lock(&sc->lock);
	if (how == SHUT_RD || how == SHUT_RDWR)
		sc->shut_rd = true;
	if (how == SHUT_WR || how == SHUT_RDWR) {
		sc->shut_wr = true;
		sc_tx_push_locked(sc);
	}
	sc_wake_locked(sc, SC_RD | SC_WR);
	sc_update_ready_locked(sc);
	pthread_mutex_unlock(&sc->lock);
	smcr_eng_kick(&sc->lgr->eng);
	sc_cancel_restore(cancel);
	return 0;
}

/* The peer still reads what we send: no error, no abort, no close of its. */
static bool sc_peer_live(const struct smcr_conn *sc)
{
	return !sc->err && !sc->rx.peer_abort && !sc->rx.peer_closed;
}

bool smcr_close(struct smcr_conn *sc, bool abort, long linger_ms, long close_wait_ms)
{
	long deadline = clock_now_ms() + linger_ms;
	int tcp_fd, cancel = sc_cancel_off(); /* no cancellation point (smcr_conn_int.h) */
	bool peer_gone, watched, unsent, kept = false;

	pthread_mutex_lock(&sc->lock);
	/* linger: give unsent data time to leave (and be completed) */
	while (!abort && sc_peer_live(sc) && sc->tx_fin < sc->tx_prep && clock_now_ms() < deadline)
		sc_wait_locked(sc, SC_LINGER, deadline - clock_now_ms());
	/* unread data or an explicit abort: abort, as Linux; so is data that
	 * can no longer reach its reader */
	unsent = sc->rx.tx_sent < sc->tx_prep;
	if (abort || sc->rx.rx_prod > sc->rx.rx_cons || (unsent && !sc_peer_live(sc)))
		sc->aborting = true;
	sc->closed = true;
	/* data still waiting for the peer's window goes on after we return,
	 * the close CDC behind it: until then the TCP socket stays open (a
	 * peer that sees the hang-up first takes us for dead,
	 * sc_eof_check_locked()) and the progress thread runs the CDCs that
	 * open the window */
	if (unsent && !sc->aborting && sc->tcp_fd >= 0) {
		sc->keeps_tcp = kept = true;
		smcr_eng_hold(&sc->lgr->eng);
	}
	sc_tx_push_locked(sc);
	/* otherwise the caller shuts the TCP socket down next: not before the
	 * close CDC is posted (a full send queue defers it), as Linux's
	 * smc_close_final() waits for a send slot */
	deadline = clock_now_ms() + SMCR_TCP_EOF_GRACE_MS / 2;
	while (!kept && !sc_close_posted(sc) && clock_now_ms() < deadline)
		sc_wait_locked(sc, SC_POSTED, deadline - clock_now_ms());
	/* the RMB goes back to the pool only once the peer can no longer write */
	peer_gone = sc->rx.peer_closed || sc->rx.peer_abort || sc->err;
	sc->orphan = !peer_gone;
	sc->orphan_ms = clock_now_ms();
	sc->orphan_deadline_ms = sc->orphan_ms + close_wait_ms;
	if (sc->orphan)
		atomic_fetch_add(&sc->lgr->orphans, 1);
	tcp_fd = kept ? -1 : sc->tcp_fd; /* kept: closed by sc_tcp_release_locked() */
	watched = sc->tcp_watched;
	if (!kept)
		sc->tcp_fd = -1;
	pthread_mutex_unlock(&sc->lock);
	/* the TCP socket is closed after this: stop watching it */
	if (tcp_fd >= 0 && watched)
		lgr_unwatch_tcp(sc->lgr, tcp_fd);
	else if (tcp_fd >= 0)
		atomic_fetch_sub(&sc->lgr->tcp_unwatched, 1);
	/* the peer's DELETE_RKEY follows its close: answer it soon */
	smcr_eng_churn(&sc->lgr->eng);
	if (peer_gone)
		lgr_conn_del(sc->lgr, sc->token);
	if (smcr_test_hook_close_put)
		smcr_test_hook_close_put(); /* tests widen the window here */
	smcr_conn_put(sc);
	sc_cancel_restore(cancel);
	return kept;
}

/* ---- the orphan ------------------------------------------------------ */

/*
 * Closed by its user, and the peer did not close within
 * USMC_OPT_CLOSE_WAIT_MS: abort it, as TCP ends FIN_WAIT2. One that failed
 * meanwhile (a hang-up reset it, say) leaves then too: nothing else takes
 * it out of the table while its link group lives. Requires sc->lock; true
 * if it is to leave the link group's table.
 */
bool sc_orphan_expired_locked(struct smcr_conn *sc, long now)
{
	if (!sc->orphan || now < sc->orphan_deadline_ms)
		return false;
	if (!sc->err) {
		sc->aborting = true;
		sc_tx_push_locked(sc);
		sc_fail_locked(sc, -ETIMEDOUT);
	}
	return true;
}

/* Closed by its user, its peer silent since (SMCR_ORPHAN_PROBE_MS): test
 * the link group once. Requires sc->lock. */
void sc_orphan_probe_locked(struct smcr_conn *sc, long now)
{
	struct lgr *lgr = sc->lgr;
	long quiet_since = lgr_last_rx_ms(lgr);

	if (!sc->orphan || sc->orphan_probed || sc->err || !sc->closed_sent)
		return;
	if (quiet_since < sc->orphan_ms)
		quiet_since = sc->orphan_ms;
	if (now - quiet_since < SMCR_ORPHAN_PROBE_MS)
		return;
	sc->orphan_probed = true;
	atomic_store(&lgr->llc.test_now, true);
}

/* ---- the TCP socket, the peer's death -------------------------------- */

void smcr_conn_establish(struct smcr_conn *sc, int tcp_fd)
{
	/* the progress thread's tick adds it to its epoll set later
	 * (sc_watch_due_locked()) */
	pthread_mutex_lock(&sc->lock);
	sc->tcp_fd = tcp_fd;
	sc->tcp_watch_ms = clock_now_ms() + SMCR_TCP_WATCH_DELAY_MS;
	pthread_mutex_unlock(&sc->lock);
	atomic_fetch_add(&sc->lgr->tcp_unwatched, 1);
	/* publish the initial readiness (data may already have arrived) */
	sc_fail(sc, 0);
	sc_hs_done(sc, false);
}

/*
 * Watch the TCP socket of a connection that has lived
 * SMCR_TCP_WATCH_DELAY_MS; requires sc->lock (smcr_close() takes tcp_fd
 * away under it, so the descriptor is still this connection's). True if it
 * still waits for its turn.
 */
bool sc_watch_due_locked(struct smcr_conn *sc, long now)
{
	if (sc->tcp_fd < 0 || sc->tcp_watched)
		return false;
	if (now < sc->tcp_watch_ms)
		return true;
	sc->tcp_watched = true;
	atomic_fetch_sub(&sc->lgr->tcp_unwatched, 1);
	/* a failure leaves the peer's death to TEST_LINK */
	lgr_watch_tcp(sc->lgr, sc->token, sc->tcp_fd);
	return false;
}

/*
 * The link group died: fail the connection, and tell the peer on its TCP
 * socket. A peer whose link group lives on (it had nothing in flight when
 * ours failed, say) would otherwise wait for CDCs that never come until
 * its own TEST_LINK fires; our FIN starts its hang-up watch instead
 * (sc_tcp_hup(), SMCR_TCP_EOF_GRACE_MS), which ends its end with no close
 * CDC. Linux aborts the TCP socket for the same reason
 * (net/smc/smc_close.c smc_close_active_abort(): tcp_abort() on the
 * clcsock when a link group is terminated). Userspace cannot reset a
 * socket it keeps open, so a FIN it is: shutdown() of the writing side
 * only, which leaves our own hang-up watch quiet. A connection its user
 * closed already gave up its socket (smcr_close()) and shut it down.
 */
bool sc_lgr_dead(struct smcr_conn *sc, int err)
{
	bool orphan;

	pthread_mutex_lock(&sc->lock);
	sc_fail_locked(sc, err);
	/* under sc->lock: smcr_close() takes tcp_fd away under it */
	if (sc->tcp_fd >= 0)
		shutdown(sc->tcp_fd, SHUT_WR);
	orphan = sc->orphan;
	pthread_mutex_unlock(&sc->lock);
	return orphan;
}

void sc_tcp_hup(struct lgr *lgr, uint32_t token)
{
	struct smcr_conn *sc = lgr_conn_get(lgr, token);

	if (!sc)
		return;
	pthread_mutex_lock(&sc->lock);
	if (!sc->tcp_eof_ms)
		sc->tcp_eof_ms = clock_now_ms();
	pthread_mutex_unlock(&sc->lock);
	atomic_store(&lgr->tcp_eof_seen, true);
	smcr_conn_put(sc);
}

/*
 * The barrier behind @sc's hang-up: the link group's last one if it was
 * sent after the hang-up was seen (the order argument below holds for it),
 * else a new one. One barrier serves every connection of a dying peer.
 * Progress thread only.
 */
static uint32_t sc_hup_barrier(struct smcr_conn *sc, long now)
{
	struct lgr *lgr = sc->lgr;

	if (!lgr->hup_barrier || lgr->hup_barrier_ms < sc->tcp_eof_ms) {
		lgr->hup_barrier = smcr_llc_barrier(lgr);
		lgr->hup_barrier_ms = now;
	}
	return lgr->hup_barrier;
}

/* A hang-up with no close: the connection ends with ECONNRESET. */
static void sc_hup_reset_locked(struct smcr_conn *sc, const char *why)
{
	usmc_log(sc->lgr->sctx->log, USMC_LOG_INFO,
		 "connection %08x: the peer's TCP socket hung up without a close CDC (%s): reset",
		 sc->token, why);
	sc->hup_barrier = 0;
	sc_fail_locked(sc, -ECONNRESET);
}

static bool sc_hup_explained(const struct smcr_conn *sc)
{
	/* Linux shuts its TCP socket's write side on shutdown(SHUT_WR) too
	 * (net/smc/af_smc.c smc_shutdown()), after the done-writing CDC */
	return sc->rx.peer_closed || sc->rx.peer_done_writing || sc->rx.peer_abort || sc->err;
}

/*
 * A peer closes its TCP socket only after its close CDC (net/smc/smc_close.c
 * smc_close_active() sends it before the TCP close; usmc_close() waits for
 * it to be posted), but the CDC may still be on its way (rxe sends RDMA
 * from a work queue, TCP at once: under load seconds apart). So a hang-up
 * with no close or abort CDC sends an LLC barrier: the peer answers it
 * after every CDC it posted before (RC order, smcr_llc_barrier()), hence
 * after the close that preceded its hang-up. The answer with no close
 * (sc_hup_answer_locked()): the peer closed TCP without closing SMC. No
 * answer, and nothing else from the peer, within SMCR_TCP_EOF_GRACE_MS: the
 * peer is dead (its QP went with its process; smcr_llc_answer_waits()).
 * Either way ECONNRESET.
 * Requires sc->lock; true while the barrier's answer is awaited.
 */
bool sc_eof_check_locked(struct smcr_conn *sc, long now)
{
	if (!sc->tcp_eof_ms || sc_hup_explained(sc))
		return false;
	if (!sc->hup_barrier)
		sc->hup_barrier = sc_hup_barrier(sc, now);
	if (smcr_llc_answer_waits(now, sc->tcp_eof_ms, lgr_last_rx_ms(sc->lgr)))
		return true;
	sc_hup_reset_locked(sc, "no answer to the barrier behind it");
	/* and the link group: is that peer gone altogether? */
	atomic_store(&sc->lgr->llc.test_now, true);
	return false;
}

/* The answer to LLC barrier @gen came: if it answers the one behind the
 * hang-up (or a later one) and still no close came, the peer closed TCP
 * without closing SMC (sc_eof_check_locked()). Requires sc->lock. */
void sc_hup_answer_locked(struct smcr_conn *sc, uint32_t gen)
{
	if (sc->hup_barrier && (int32_t)(gen - sc->hup_barrier) >= 0) {
		if (!sc_hup_explained(sc))
			sc_hup_reset_locked(sc, "the barrier behind it came back first");
		sc->hup_barrier = 0;
	}
}
