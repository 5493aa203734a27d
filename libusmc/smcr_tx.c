// SPDX-License-Identifier: MIT
/*
 * Transmit (net/smc/smc_tx.c, smc_cdc.c's send side): the send buffer ring
 * is RDMA-written into the peer's RMB (split at both rings' wraps) followed
 * by a CDC SEND on the same QP, which carries the cursors and our end of
 * the stream's flags. Cursors are kept as 64-bit byte totals of the stream
 * and converted to (wrap, count) on the wire, so every comparison is plain
 * arithmetic.
 */
#include <errno.h>

#include "cdc.h"
#include "cdc_rx.h"
#include "clock.h"
#include "smcr_conn.h"
#include "smcr_conn_int.h"
#include "smcr_ring.h"

/* ---- a CDC and the writes before it ---------------------------------- */

struct smcr_link *sc_link_locked(struct smcr_conn *sc)
{
	return &sc->lgr->lnk[sc->lnk_slot];
}

static uint8_t sc_state_flags(const struct smcr_conn *sc, bool all_sent)
{
	uint8_t f = 0;

	if (sc->aborting)
		return CDC_CS_PEER_CONN_ABORT;
	if (sc->shut_wr && all_sent)
		f |= CDC_CS_PEER_DONE_WRITING;
	if (sc->closed && all_sent)
		f |= CDC_CS_PEER_CONN_CLOSED;
	return f;
}

static bool sc_flags_due(const struct smcr_conn *sc, bool all_sent)
{
	if (sc->aborting)
		return !sc->abort_sent;
	return all_sent && ((sc->shut_wr && !sc->shut_wr_sent) || (sc->closed && !sc->closed_sent));
}

/* Chain RDMA WRITEs for [tx_sent, tx_sent + n); returns how many (<= 3). */
static int sc_build_writes(struct smcr_conn *sc, uint64_t n, struct ibv_send_wr *wr,
			   struct ibv_sge *sge)
{
	uint64_t off = sc->rx.tx_sent;
	int k = 0;

	while (n) {
		uint32_t soff = (uint32_t)(off % sc->snd_len),
			 roff = (uint32_t)(off % sc->rx.peer_len);
		uint64_t chunk = n;

		if (chunk > sc->snd_len - soff)
			chunk = sc->snd_len - soff;
		if (chunk > sc->rx.peer_len - roff)
			chunk = sc->rx.peer_len - roff;
		sge[k] = (struct ibv_sge){.addr = (uintptr_t)sc->sndbuf->addr + soff,
					  .length = (uint32_t)chunk,
					  .lkey = bufpool_buf_lkey(sc->sndbuf, sc->lnk_slot)};
		/* small: copied into the work request at the post (as Linux's
		 * net/smc/smc_tx.c smcr_tx_rdma_writes() with its inline limit),
		 * so a short message is two inline WRs behind one doorbell */
		wr[k] = (struct ibv_send_wr){
			.sg_list = &sge[k],
			.num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = chunk <= sc_link_locked(sc)->max_inline ? IBV_SEND_INLINE : 0,
			.wr.rdma = {.remote_addr = sc->peer_rmb_addr + roff,
				    .rkey = sc->peer_rkey}};
		wr[k].next = &wr[k + 1];
		k++;
		off += chunk;
		n -= chunk;
	}
	return k;
}

/* One CDC with up to half the peer's RMB of data before it; requires
 * sc->lock. True if data went and more is pending. */
static bool sc_tx_push_one_locked(struct smcr_conn *sc)
{
	struct ibv_send_wr wr[SMCR_TX_WRS_PER_CDC];
	struct ibv_sge sge[SMCR_TX_WRS_PER_CDC];
	uint8_t buf[CDC_MSG_LEN];
	uint64_t pending = sc->tx_prep - sc->rx.tx_sent;
	uint64_t space = sc->rx.peer_len - (sc->rx.tx_sent - sc->rx.peer_cons);
	uint64_t n = pending < space ? pending : space;
	bool all_sent, blocked;
	struct smcr_tx_pend p;
	struct cdc_msg m;
	int k, rc;

	/* at most half the peer's RMB per CDC: the peer reads the first half
	 * while the second is on the wire (a pipelined window) */
	if (n > sc->rx.peer_len / 2 && sc->rx.peer_len >= 2)
		n = sc->rx.peer_len / 2;
	all_sent = sc->rx.tx_sent + n == sc->tx_prep;
	/* blocked only when this fills the window, not at the half cut */
	blocked = pending > n && space == n;
	p = (struct smcr_tx_pend){.conn = sc, .mark = sc->rx.tx_sent + n, .lnk_slot = sc->lnk_slot};
	if (sc->err || !sc->rx.peer_len || (sc->abort_sent))
		return false;
	if (sc->aborting)
		n = 0, all_sent = true;
	if (!n && !sc->rx.cons_update_due && !sc->eof_ask && !sc->tx_resync &&
	    !sc_flags_due(sc, all_sent))
		return false;
	k = n ? sc_build_writes(sc, n, wr, sge) : 0;
	m = (struct cdc_msg){
		.seqno = (uint16_t)(sc->tx_seq + 1),
		.token = sc->peer_token,
		.prod = cdc_rx_curs_of(sc->rx.tx_sent + n, sc->rx.peer_len),
		.cons = cdc_rx_curs_of(sc_rx_credit(sc), sc->rx.rmb_len),
		.prod_flags = (uint8_t)((blocked ? CDC_PF_WRITE_BLOCKED : 0) |
					(sc->eof_ask ? CDC_PF_CONS_CURS_UPD_REQ : 0)),
		.conn_state_flags = sc_state_flags(sc, all_sent),
	};
	cdc_encode(&m, buf, sizeof(buf));
	sge[k] = (struct ibv_sge){.addr = (uintptr_t)buf, .length = CDC_MSG_LEN};
	wr[k] = (struct ibv_send_wr){.sg_list = &sge[k],
				     .num_sge = 1,
				     .opcode = IBV_WR_SEND,
				     .send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED |
						   IBV_SEND_INLINE};
	atomic_fetch_add(&sc->refs, 1); /* the pending send's; before the completion can run */
	rc = smcr_wr_post_send(sc_link_locked(sc), wr, k + 1, &p, SMCR_SQ_CDC);
	if (rc) {
		atomic_fetch_sub(&sc->refs, 1);
		if (rc == -EAGAIN) { /* the post marked the link (smcr_wr.h) */
			sc->tx_pending = true;
			smcr_eng_want_progress(&sc->lgr->eng); /* send completions must run */
		} else if (rc == -ECONNABORTED) {
			/* the link went down under us, before its failover moved
			 * us: that writes again from here (sc_switch_locked()), or
			 * the link group's end, with no link left, fails us */
			sc->tx_pending = true;
		} else {
			sc_fail_locked(sc, rc);
		}
		return false;
	}
	sc->tx_seq = m.seqno;
	sc->tx_resync = false;
	sc->rx.tx_sent += n;
	sc->rx.rx_cons_sent = sc_rx_credit(sc);
	sc->rx.cons_update_due = false;
	if (sc->eof_ask) /* behind the question: when its answer comes, so has the peer's */
		sc->eof_barrier = smcr_llc_barrier(sc->lgr);
	sc->eof_ask = false;
	if (m.conn_state_flags & CDC_CS_PEER_DONE_WRITING)
		sc->shut_wr_sent = true;
	if (m.conn_state_flags & CDC_CS_PEER_CONN_CLOSED)
		sc->closed_sent = true;
	if (m.conn_state_flags & CDC_CS_PEER_CONN_ABORT)
		sc->abort_sent = true;
	if (sc->closed_sent || sc->abort_sent)
		sc_tcp_release_locked(sc);
	return n && !all_sent;
}

/*
 * Send what the window allows, each piece with its CDC, if there is
 * anything to say. Requires sc->lock. No room in the send queue:
 * tx_pending, and whoever runs the completions calls again when a send
 * completes.
 */
void sc_tx_push_locked(struct smcr_conn *sc)
{
	/* a window is at most two halves; a wrap may cut one more */
	for (int i = 0; i < 3 && sc_tx_push_one_locked(sc); i++)
		;
}

/* ---- failover -------------------------------------------------------- */

/*
 * Onto the link in slot @to: the peer's RMB as that link reaches it (the
 * link group's rtokens: the peer's ADD_LINK or CONFIRM_RKEY told it), and
 * the stream rewound to what the peer surely has, which goes again: what
 * a CDC whose send completed covered, or what the peer said it consumed
 * (Linux's smc_switch_cursor() rewinds to tx_curs_fin, moved on to the
 * peer's consumer cursor when that is ahead). Writing a byte twice at its
 * place in the peer's ring is harmless; a producer cursor that went back
 * is stale news to the peer (wire/cdc_rx.c). One CDC goes even with
 * nothing to write: the state flags and our consumer cursor, which may
 * have been lost with the old link. Requires sc->lock.
 */
static bool sc_switch_locked(struct smcr_conn *sc, int to)
{
	struct lgr_rtoken rt;
	uint64_t sure = sc->tx_fin > sc->rx.peer_cons ? sc->tx_fin : sc->rx.peer_cons;

	if (!sc->rx.peer_len) { /* in its handshake: no peer RMB yet */
		sc->lnk_slot = (uint8_t)to;
		return true;
	}
	if (lgr_rtoken_get(&sc->lgr->rtok, sc->peer_rtok, to, &rt)) {
		/* the peer never said where its RMB is on that link */
		sc_fail_locked(sc, -ECONNABORTED);
		return false;
	}
	sc->lnk_slot = (uint8_t)to;
	sc->peer_rkey = rt.rkey;
	sc->peer_rmb_addr = rt.addr + sc->peer_rmbe_off;
	if (sc->rx.tx_sent > sc->rx.tx_sent_max)
		sc->rx.tx_sent_max = sc->rx.tx_sent;
	if (sure < sc->rx.tx_sent)
		sc->rx.tx_sent = sure;
	sc->tx_resync = true;
	sc->tx_pending = false;
	sc_tx_push_locked(sc);
	/* the peer's CDCs lost with the old link: smcr_conn.h */
	if (!sc->failover_ms)
		atomic_fetch_add(&sc->lgr->failover_watches, 1);
	sc->failover_ms = clock_now_ms();
	return true;
}

bool sc_switch_link(struct smcr_conn *sc, int from, int to)
{
	bool moved = false;

	pthread_mutex_lock(&sc->lock);
	if (sc->lnk_slot == from && !sc->err)
		moved = sc_switch_locked(sc, to);
	pthread_mutex_unlock(&sc->lock);
	return moved;
}

/* ---- send completions, send queue space ------------------------------ */

void sc_tx_done(struct lgr *lgr, const struct smcr_tx_pend *p)
{
	struct smcr_conn *sc = p->conn;

	(void)lgr;
	pthread_mutex_lock(&sc->lock);
	/*
	 * A failed one confirms nothing: a failover writes it again. Nor does
	 * a late one of the link the connection left: the writes that send its
	 * bytes again are posted, and read the send buffer when they run, so
	 * the buffer is freed by their completions, on the new link, only.
	 */
	if (!p->failed && p->lnk_slot == sc->lnk_slot && p->mark > sc->tx_fin) {
		sc->tx_fin = p->mark;
		sc_wake_locked(sc, SC_WR); /* room: only a writer cares */
		sc_update_ready_locked(sc);
	}
	pthread_mutex_unlock(&sc->lock);
	smcr_conn_put(sc);
}

void sc_kick_pending(struct lgr *lgr)
{
	struct smcr_conn *list[SMCR_MAX_CONNS];
	int n;

	n = lgr_conns_get(lgr, list);
	for (int i = 0; i < n; i++) {
		struct smcr_conn *sc = list[i];

		pthread_mutex_lock(&sc->lock);
		if (sc->tx_pending) {
			sc->tx_pending = false;
			sc_tx_push_locked(sc);
			sc_wake_locked(sc, SC_WR); /* a close waits for its CDC to leave */
		}
		pthread_mutex_unlock(&sc->lock);
		smcr_conn_put(sc);
	}
}

/* ---- the user's send ------------------------------------------------- */

/* The send side is over: the peer reads nothing more, an error, our
 * shutdown or close. */
static bool sc_tx_ended(const struct smcr_conn *sc)
{
	return sc->shut_wr || sc->closed || sc->rx.peer_abort || sc->rx.peer_closed || sc->err;
}

/*
 * Copy @n bytes of the user's @iov after @done into the send buffer at
 * tx_prep: room the writer found free, which nobody else writes or sends
 * before tx_prep moves past it. Requires sc->lock and the writer's turn;
 * the copy runs with the lock dropped. False if the send side ended
 * meanwhile: the bytes are not taken, as if the end had come first.
 */
static bool sc_tx_copy_locked(struct smcr_conn *sc, const struct iovec *iov, int iovcnt,
			      size_t done, size_t n)
{
	uint64_t pos = sc->tx_prep;

	pthread_mutex_unlock(&sc->lock);
	smcr_ring_copy(sc->sndbuf->addr, sc->snd_len, pos, iov, iovcnt, done, n, true);
	pthread_mutex_lock(&sc->lock);
	return !sc_tx_ended(sc);
}

/* smcr_sendv() with sc->lock and the writer's turn held; @cancel: the
 * caller's cancellation state. */
static ssize_t sc_sendv_locked(struct smcr_conn *sc, const struct iovec *iov, int iovcnt,
			       bool nonblock, int cancel)
{
	size_t total = smcr_iov_total(iov, iovcnt), done = 0;
	ssize_t rc = 0;
	bool polled = false;

	while (done < total || !total) {
		uint64_t room = sc_snd_room(sc);
		size_t n = total - done;

		/* the peer closed (not a shutdown(SHUT_WR)): it reads nothing
		 * more, and data sent now would fill its RMB and block us for
		 * good; TCP's peer answers such data with a reset (EPIPE) */
		if (sc->shut_wr || sc->closed || sc->rx.peer_abort || sc->rx.peer_closed) {
			rc = -EPIPE;
			break;
		}
		if (sc->err) {
			rc = sc->err;
			break;
		}
		if (!total)
			break;
		if (!room) {
			/* nobody may be running the completions: run them once */
			if (nonblock && !polled && (polled = true) &&
			    smcr_eng_try_poll(&sc->lgr->eng, &sc->lock))
				continue;
			if (nonblock) {
				rc = -EAGAIN;
				break;
			}
			sc_wait_locked(sc, SC_WR, 1000);
			if (!done)
				sc_cancel_point_locked(sc, SC_WR, cancel);
			continue;
		}
		if (n > room)
			n = room;
		if (!sc_tx_copy_locked(sc, iov, iovcnt, done, n))
			continue; /* ended meanwhile: the checks above say how */
		sc->tx_prep += n;
		sc->sent_since_read = true;
		done += n;
		sc_tx_push_locked(sc);
		if (nonblock)
			break;
	}
	sc_update_ready_locked(sc);
	return done ? (ssize_t)done : rc;
}

ssize_t smcr_sendv(struct smcr_conn *sc, const struct iovec *iov, int iovcnt, bool nonblock)
{
	int cancel = sc_user_call_begin(sc, SC_WR, nonblock);
	ssize_t rc = sc_sendv_locked(sc, iov, iovcnt, nonblock, cancel);

	sc_user_call_end(sc, SC_WR, cancel);
	return rc;
}
