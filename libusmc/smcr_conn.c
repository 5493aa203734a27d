// SPDX-License-Identifier: MIT
/*
 * An SMC-R connection, the object (smcr_conn.h; net/smc/smc_core.c
 * smc_conn_create(), smc_conn_free()): created in its link group's table
 * with an RMB and a send buffer, referenced by its user, by the link
 * group's calls and by each pending send; the last reference frees it and
 * returns its buffers. The data path's mechanisms around it:
 * smcr_conn_int.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bufpool.h"
#include "smcr_conn.h"
#include "smcr_conn_int.h"

/* ---- life cycle ------------------------------------------------------ */

int smcr_conn_link_slot(struct smcr_conn *sc)
{
	int slot;

	pthread_mutex_lock(&sc->lock);
	slot = sc->lnk_slot;
	pthread_mutex_unlock(&sc->lock);
	return slot;
}

void smcr_conn_use_link(struct smcr_conn *sc, int slot)
{
	pthread_mutex_lock(&sc->lock);
	sc->lnk_slot = (uint8_t)slot;
	pthread_mutex_unlock(&sc->lock);
}

int smcr_conn_new(struct lgr *lgr, size_t rmb_size, size_t snd_size, struct smcr_conn **out)
{
	struct smcr_conn *sc = calloc(1, sizeof(*sc));
	pthread_condattr_t ca;
	int rc;

	if (!sc)
		return -ENOMEM;
	sc->ev[0] = sc->ev[1] = -1;
	sc->tcp_fd = -1;
	atomic_init(&sc->refs, 1);
	sc->lgr = lgr;
	lgr_get(lgr); /* dropped by the last smcr_conn_put(), after the buffers */
	pthread_mutex_init(&sc->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are monotonic */
	pthread_cond_init(&sc->rcond, &ca);
	pthread_cond_init(&sc->wcond, &ca);
	pthread_cond_init(&sc->user_cond, &ca);
	pthread_condattr_destroy(&ca);
	rc = bufpool_claim(lgr->rmbs, rmb_size, &sc->rmb);
	if (!rc)
		rc = bufpool_claim(lgr->sndbufs, snd_size, &sc->sndbuf);
	if (!rc) {
		sc->rx.rmb_len = (uint32_t)sc->rmb->len;
		sc->snd_len = (uint32_t)sc->sndbuf->len;
		/* a client's connection takes the link the server's ACCEPT
		 * names instead (smcr_conn_use_link()) */
		sc->lnk_slot = (uint8_t)lgr_link_assign(lgr);
		rc = lgr_conn_add(lgr, sc, &sc->token);
	}
	if (rc) {
		smcr_conn_put(sc);
		return rc;
	}
	/* the handshake's LLC (CONFIRM_RKEY both ways) must run as it comes */
	sc->in_hs = true;
	smcr_eng_hold(&lgr->eng);
	*out = sc;
	return 0;
}

/* Not waited for: this may run in the progress thread, which delivers the
 * answer. */
void smcr_rkey_forget(struct lgr *lgr, uint32_t rkey)
{
	struct llc_msg m = {.version = LLC_V2, .type = LLC_DELETE_RKEY};

	m.delete_rkey.num_rkeys = 1;
	m.delete_rkey.rkeys[0] = rkey;
	if (atomic_load(&lgr->state) == LGR_ACTIVE)
		smcr_llc_send(lgr, &m);
}

/*
 * Can the peer still RDMA-write into @sc's RMB? Only its close (unless EOF
 * is held: it may write what it could not before) or abort, or a dead link
 * group (the QP in error), rules that out: a connection we ended ourselves
 * (a protocol error, an expired close) may still be written by its peer.
 * A held EOF we gave up on (smcr_rx.c sc_eof_give_locked()) ended on our
 * clock, not on the peer's word: its close came while it was blocked, our
 * question opened the whole window, and a Linux peer writes what it holds
 * whenever its send path runs (net/smc/smc_tx.c smc_tx_sndbuf_nonempty(),
 * maybe deferred to its tx work or release_sock()): a write in flight when
 * our close leaves lands after we released the RMB. Only a CDC without
 * write_blocked (wire/cdc_rx.c apply_hold(), which ends the hold before
 * any give) says it had nothing more.
 */
bool sc_rmb_may_be_written(const struct smcr_conn *sc)
{
	return (!sc->rx.peer_closed || sc->rx.eof_held || sc->eof_given_up) && !sc->rx.peer_abort &&
	       atomic_load(&sc->lgr->state) != LGR_DEAD;
}

/*
 * May a released RMB keep its rkey with the peer? Linux deletes it at every
 * release and confirms it again at every reuse (smcr_buf_unuse(),
 * af_smc.c smcr_lgr_reg_rmbs()): four LLC messages per connection and end.
 * We keep it while it sits in the pool, so that reusing it within the link
 * group needs no LLC flow, as long as the peer's table of our rkeys (255
 * entries in Linux: SMC_RMBS_PER_LGR_MAX, smc_rtoken_add()) cannot fill up:
 * a pool of at most 255 RMBs (the default) has at most that many rkeys.
 * The peer finds a kept rkey again by value when the CLC names it
 * (smc_rtoken_add() returns the existing entry).
 */
static bool sc_keep_rkey(const struct lgr *lgr)
{
	return !lgr->cfg.max_bufs || lgr->cfg.max_bufs <= SMC_RMBS_PER_LGR_MAX;
}

/* The RMB goes back to the pool, or stays claimed until the link group's
 * QP is gone (a peer that may still write into it, and no new rkey). */
static void sc_rmb_release(struct smcr_conn *sc)
{
	struct bufpool_buf *rmb = sc->rmb;
	bool held = rmb->rkey_confirmed;

	if (!sc_rmb_may_be_written(sc)) {
		if (held && !sc_keep_rkey(sc->lgr)) {
			smcr_rkey_forget(sc->lgr, rmb->rkey);
			rmb->rkey_confirmed = false;
		}
		/* the peer wrote the ring from offset 0 as its CDCs announced:
		 * zero that much (bytes it wrote past them without a CDC are its
		 * own, in a buffer only its link group uses, and never read, since
		 * a connection reads only what its own peer announces) */
		bufpool_release_dirty(sc->lgr->rmbs, rmb, sc->rx.rx_prod);
		return;
	}
	/* no late write of this peer may land in another connection's stream:
	 * a buffer it may still write gets a new rkey first (the old one
	 * deleted at the peer, the new one confirmed at its next use) */
	if (held)
		smcr_rkey_forget(sc->lgr, rmb->rkey);
	if (!bufpool_rekey(sc->lgr->rmbs, rmb))
		bufpool_release(sc->lgr->rmbs, rmb);
}

/*
 * A connection closed with data unsent kept its TCP socket until its close
 * (or abort) CDC went out: shut it down and close it now, as usmc_close()
 * does for the others, and let the progress thread rest. Requires sc->lock
 * (or the last reference).
 */
void sc_tcp_release_locked(struct smcr_conn *sc)
{
	if (!sc->keeps_tcp)
		return;
	sc->keeps_tcp = false;
	if (sc->tcp_watched)
		lgr_unwatch_tcp(sc->lgr, sc->tcp_fd);
	else
		atomic_fetch_sub(&sc->lgr->tcp_unwatched, 1);
	shutdown(sc->tcp_fd, SHUT_RDWR);
	close(sc->tcp_fd);
	sc->tcp_fd = -1;
	smcr_eng_unhold(&sc->lgr->eng);
}

void smcr_conn_put(struct smcr_conn *sc)
{
	struct lgr *lgr;

	if (atomic_fetch_sub(&sc->refs, 1) != 1)
		return;
	/* no reference left: no table entry, no pending send, no user */
	if (sc->in_hs) /* a handshake that neither finished nor discarded */
		smcr_eng_unhold(&sc->lgr->eng);
	sc_tcp_release_locked(sc); /* its close never went out: the link group failed */
	if (sc->rmb)
		sc_rmb_release(sc);
	if (sc->orphan)
		atomic_fetch_sub(&sc->lgr->orphans, 1);
	if (sc->eof_asked_ms)
		atomic_fetch_sub(&sc->lgr->eof_holds, 1);
	if (sc->failover_ms)
		atomic_fetch_sub(&sc->lgr->failover_watches, 1);
	free(sc->spill);
	if (sc->sndbuf) /* the ring from offset 0, as far as the user's bytes went */
		bufpool_release_dirty(sc->lgr->sndbufs, sc->sndbuf, sc->tx_prep);
	sc_watch_drop_locked(sc); /* the user closed without unwatching */
	if (sc->ev[0] >= 0) {
		close(sc->ev[0]);
		if (!sc->ev_looped)
			atomic_fetch_sub(&sc->lgr->eng.fd_users, 1);
		if (sc->wr_blocked_sig)
			atomic_fetch_sub(&sc->lgr->eng.room_waiters, 1);
	}
	if (sc->ev[1] >= 0)
		close(sc->ev[1]);
	pthread_cond_destroy(&sc->rcond);
	pthread_cond_destroy(&sc->wcond);
	pthread_cond_destroy(&sc->user_cond);
	pthread_mutex_destroy(&sc->lock);
	lgr = sc->lgr;
	free(sc);
	lgr_put(lgr); /* the last touch of the link group */
}

void sc_get(struct smcr_conn *sc)
{
	atomic_fetch_add(&sc->refs, 1);
}

/* The handshake is over (established or discarded): drop its hold. A
 * discarded one may leave a flow of the peer's running: @churn. */
void sc_hs_done(struct smcr_conn *sc, bool churn)
{
	bool was;

	pthread_mutex_lock(&sc->lock);
	was = sc->in_hs;
	sc->in_hs = false;
	pthread_mutex_unlock(&sc->lock);
	if (was)
		smcr_eng_unhold(&sc->lgr->eng);
	if (churn)
		smcr_eng_churn(&sc->lgr->eng);
}

void smcr_conn_discard(struct smcr_conn *sc)
{
	sc_hs_done(sc, true);
	lgr_conn_del(sc->lgr, sc->token);
	smcr_conn_put(sc);
}

/* ---- where the stream stands ----------------------------------------- */

void smcr_conn_flow_info(struct smcr_conn *sc, struct usmc_conn_info *info)
{
	pthread_mutex_lock(&sc->lock);
	info->snd_unsent = sc->tx_prep - sc->rx.tx_sent;
	info->snd_unconsumed = sc->rx.tx_sent - sc->rx.peer_cons;
	info->rcv_unread = sc->rx.rx_prod - sc->rx.rx_cons;
	info->flow_flags =
		(info->snd_unsent && sc->rx.peer_len && info->snd_unconsumed == sc->rx.peer_len
			 ? USMC_FLOW_WINDOW_FULL
			 : 0) |
		(sc->tx_pending ? USMC_FLOW_SQ_WAIT : 0) |
		(sc->rx.peer_write_blocked ? USMC_FLOW_PEER_BLOCKED : 0) |
		(sc->rx.eof_held ? USMC_FLOW_EOF_HELD : 0);
	pthread_mutex_unlock(&sc->lock);
}
