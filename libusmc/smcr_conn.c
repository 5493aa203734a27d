// SPDX-License-Identifier: MIT
/*
 * SMC-R connection data path (smcr_conn.h; net/smc/smc_tx.c, smc_rx.c,
 * smc_cdc.c): the send buffer ring is
 * RDMA-written into the peer's RMB (split at both rings' wraps) followed by a
 * CDC SEND on the same QP; received CDCs move the cursors. Cursors are kept
 * as 64-bit byte totals of the stream and converted to (wrap, count) on the
 * wire, so every comparison is plain arithmetic; every cursor a peer sends
 * is validated against the ring sizes before it is used.
 *
 * Readiness for usmc_conn_fd(): an AF_UNIX socketpair per connection. The
 * user polls ev[0]. One byte waits ev[1] -> ev[0] exactly while the
 * connection is readable; ev[0]'s send side is kept full (bytes sent
 * ev[0] -> ev[1] and left unread) exactly while it is not writable.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bufpool.h"
#include "cdc.h"
#include "cdc_rx.h"
#include "clock.h"
#include "log.h"
#include "smcr_conn.h"

#define EV_FILL_CHUNK 4096

/* ---- readiness ------------------------------------------------------- */

static bool sc_readable(const struct smcr_conn *sc)
{
	return sc->rx.rx_prod > sc->rx.rx_cons || sc->rx.peer_done_writing || sc->rx.peer_closed ||
	       sc->rx.peer_abort || sc->err || sc->shut_rd;
}

static bool sc_writable(const struct smcr_conn *sc)
{
	return sc->tx_prep - sc->tx_fin < sc->snd_len || sc->err || sc->rx.peer_abort ||
	       sc->shut_wr || sc->closed;
}

/* Publish readiness on the user's descriptor; requires sc->lock, after
 * every state change. */
static void sc_update_ready_locked(struct smcr_conn *sc)
{
	static const uint8_t fill[EV_FILL_CHUNK];
	uint8_t tmp[EV_FILL_CHUNK];
	bool rd = sc_readable(sc), wr = sc_writable(sc);

	if (rd && !sc->rd_sig)
		sc->rd_sig = write(sc->ev[1], "r", 1) == 1;
	else if (!rd && sc->rd_sig)
		sc->rd_sig = read(sc->ev[0], tmp, 1) != 1;
	if (!wr && !sc->wr_blocked_sig) {
		while (write(sc->ev[0], fill, sizeof(fill)) > 0)
			;
		sc->wr_blocked_sig = true;
	} else if (wr && sc->wr_blocked_sig) {
		while (read(sc->ev[1], tmp, sizeof(tmp)) > 0)
			;
		sc->wr_blocked_sig = false;
	}
}

static int ev_pair(int ev[2])
{
	int small = 1;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, ev))
		return -errno;
	/* the kernel rounds up to its minimum: a few KiB fill it */
	setsockopt(ev[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	return 0;
}

/* ---- life cycle ------------------------------------------------------ */

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
	pthread_cond_init(&sc->cond, &ca);
	pthread_condattr_destroy(&ca);
	rc = ev_pair(sc->ev);
	if (!rc)
		rc = bufpool_claim(lgr->rmbs, rmb_size, &sc->rmb);
	if (!rc)
		rc = bufpool_claim(lgr->sndbufs, snd_size, &sc->sndbuf);
	if (!rc) {
		sc->rx.rmb_len = (uint32_t)sc->rmb->len;
		sc->snd_len = (uint32_t)sc->sndbuf->len;
		rc = lgr_conn_add(lgr, sc, &sc->token);
	}
	if (rc) {
		smcr_conn_put(sc);
		return rc;
	}
	*out = sc;
	return 0;
}

/*
 * The RMB goes back to the pool: tell the peer to forget its rkey, as
 * Linux does (net/smc/smc_core.c smcr_buf_unuse() -> smc_llc_do_delete_rkey()), so a Linux peer's
 * 255 rtoken slots do not fill up. Not waited for: this may run in the progress thread, which
 * delivers the answer.
 */
static void sc_delete_rkey(struct smcr_conn *sc)
{
	struct llc_msg m = {.version = LLC_V2, .type = LLC_DELETE_RKEY};

	m.delete_rkey.num_rkeys = 1;
	m.delete_rkey.rkeys[0] = sc->rmb->rkey;
	if (atomic_load(&sc->lgr->state) == LGR_ACTIVE)
		smcr_llc_send(sc->lgr, &m);
}

/*
 * Can the peer still RDMA-write into @sc's RMB? Only its close or abort, or
 * a dead link group (the QP in error), rules that out: a connection we
 * ended ourselves (a protocol error, an expired close) may still be
 * written by its peer.
 */
static bool sc_rmb_may_be_written(const struct smcr_conn *sc)
{
	return !sc->rx.peer_closed && !sc->rx.peer_abort &&
	       atomic_load(&sc->lgr->state) != LGR_DEAD;
}

void smcr_conn_put(struct smcr_conn *sc)
{
	struct lgr *lgr;

	if (atomic_fetch_sub(&sc->refs, 1) != 1)
		return;
	/* no reference left: no table entry, no pending send, no user */
	if (sc->rmb && sc->rx.peer_len)
		sc_delete_rkey(sc);
	/* no late write of this peer may land in another connection's stream:
	 * a buffer it may still write gets a new rkey first, or stays claimed
	 * until the link group's QP is gone */
	if (sc->rmb && (!sc_rmb_may_be_written(sc) || !bufpool_rekey(sc->lgr->rmbs, sc->rmb)))
		bufpool_release(sc->lgr->rmbs, sc->rmb);
	if (sc->orphan)
		atomic_fetch_sub(&sc->lgr->orphans, 1);
	if (sc->sndbuf)
		bufpool_release(sc->lgr->sndbufs, sc->sndbuf);
	if (sc->ev[0] >= 0)
		close(sc->ev[0]);
	if (sc->ev[1] >= 0)
		close(sc->ev[1]);
	pthread_cond_destroy(&sc->cond);
	pthread_mutex_destroy(&sc->lock);
	lgr = sc->lgr;
	free(sc);
	lgr_put(lgr); /* the last touch of the link group */
}

static bool sc_cdc_apply_locked(struct smcr_conn *sc, const struct cdc_msg *m);
static void sc_tx_push_locked(struct smcr_conn *sc);

static void sc_get(struct smcr_conn *sc)
{
	atomic_fetch_add(&sc->refs, 1);
}

void smcr_conn_discard(struct smcr_conn *sc)
{
	lgr_conn_del(sc->lgr, sc->token);
	smcr_conn_put(sc);
}

int smcr_conn_fd(const struct smcr_conn *sc)
{
	return sc->ev[0];
}

void smcr_conn_set_peer(struct smcr_conn *sc, const struct smcr_peer_rmb *peer)
{
	pthread_mutex_lock(&sc->lock);
	sc->peer_token = peer->token;
	sc->peer_rkey = peer->rkey;
	sc->rx.peer_len = (uint32_t)smc_uncompress_bufsize(peer->size_class);
	/* RMBE index counts from 1 (Linux: always 1) */
	sc->peer_rmb_addr = peer->dma_addr + (uint64_t)(peer->rmbe_idx - 1) * sc->rx.peer_len;
	/* on a reused link group the peer's first CDC may beat its CLC CONFIRM */
	if (sc->early_valid) {
		sc->early_valid = false;
		sc->rx_seq = sc->early.seqno;
		sc->rx_seq_seen = true;
		if (!sc_cdc_apply_locked(sc, &sc->early)) {
			usmc_log(
				sc->lgr->sctx->log, USMC_LOG_WARN,
				"link group %x: peer broke the CDC rules on connection %08x: aborted",
				sc->lgr->id, sc->token);
			sc->aborting = true;
			sc_tx_push_locked(sc);
			if (!sc->err)
				sc->err = -EPROTO;
		}
	}
	pthread_mutex_unlock(&sc->lock);
}

static void sc_fail_locked(struct smcr_conn *sc, int err)
{
	if (!sc->err) {
		sc->err = err;
		/* The peer's stream was complete: a link group that ends later
		 * (the peer process exits, say) takes nothing from it. */
		sc->err_after_eof = sc->rx.peer_done_writing || sc->rx.peer_closed;
	}
	pthread_cond_broadcast(&sc->cond);
	sc_update_ready_locked(sc);
}

static bool sc_fail(struct smcr_conn *sc, int err)
{
	bool orphan;

	pthread_mutex_lock(&sc->lock);
	sc_fail_locked(sc, err);
	orphan = sc->orphan;
	pthread_mutex_unlock(&sc->lock);
	return orphan;
}

void smcr_conn_establish(struct smcr_conn *sc, int tcp_fd)
{
	if (!lgr_watch_tcp(sc->lgr, sc->token, tcp_fd)) {
		pthread_mutex_lock(&sc->lock);
		sc->tcp_fd = tcp_fd;
		pthread_mutex_unlock(&sc->lock);
	}
	/* publish the initial readiness (data may already have arrived) */
	sc_fail(sc, 0);
}

static void sc_tcp_hup(struct lgr *lgr, uint32_t token)
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
 * A peer closes its TCP socket only after its close CDC (net/smc/smc_close.c
 * smc_close_active() sends it before the TCP close), so a hang-up with no
 * close or abort CDC within the grace time means the peer process died:
 * the connection ends with ECONNRESET. Requires sc->lock; true if the
 * grace time is still running.
 */
static bool sc_eof_check_locked(struct smcr_conn *sc, long now)
{
	if (!sc->tcp_eof_ms || sc->rx.peer_closed || sc->rx.peer_abort || sc->err)
		return false;
	if (now - sc->tcp_eof_ms <= SMCR_TCP_EOF_GRACE_MS)
		return true;
	sc_fail_locked(sc, -ECONNRESET);
	/* and the link group: is that peer gone altogether? */
	atomic_store(&sc->lgr->llc.test_now, true);
	return false;
}

/*
 * Closed by its user, and the peer did not close within
 * USMC_OPT_CLOSE_WAIT_MS: abort it, as TCP ends FIN_WAIT2. Requires
 * sc->lock; true if it is to leave the link group's table.
 */
static bool sc_orphan_expired_locked(struct smcr_conn *sc, long now)
{
	if (!sc->orphan || sc->err || now < sc->orphan_deadline_ms)
		return false;
	sc->aborting = true;
	sc_tx_push_locked(sc);
	sc_fail_locked(sc, -ETIMEDOUT);
	return true;
}

static void sc_tick(struct lgr *lgr)
{
	struct smcr_conn *list[SMCR_MAX_CONNS];
	bool eof = atomic_exchange(&lgr->tcp_eof_seen, false), again = false;
	long now = clock_now_ms();
	int n;

	if (!eof && !atomic_load(&lgr->orphans))
		return;
	n = lgr_conns_get(lgr, list);
	for (int i = 0; i < n; i++) {
		struct smcr_conn *sc = list[i];
		bool reap;

		pthread_mutex_lock(&sc->lock);
		if (eof && sc_eof_check_locked(sc, now))
			again = true;
		reap = sc_orphan_expired_locked(sc, now);
		pthread_mutex_unlock(&sc->lock);
		if (reap)
			lgr_conn_del(lgr, sc->token);
		smcr_conn_put(sc);
	}
	if (again)
		atomic_store(&lgr->tcp_eof_seen, true);
}

/* ---- transmit ------------------------------------------------------- */

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
					  .lkey = sc->sndbuf->lkey};
		wr[k] = (struct ibv_send_wr){.sg_list = &sge[k],
					     .num_sge = 1,
					     .opcode = IBV_WR_RDMA_WRITE,
					     .wr.rdma = {.remote_addr = sc->peer_rmb_addr + roff,
							 .rkey = sc->peer_rkey}};
		wr[k].next = &wr[k + 1];
		k++;
		off += chunk;
		n -= chunk;
	}
	return k;
}

/*
 * Send what the window allows plus a CDC, if there is anything to say.
 * Requires sc->lock. No room in the send queue: tx_pending, and the
 * progress thread calls again when a send completes.
 */
static void sc_tx_push_locked(struct smcr_conn *sc)
{
	struct ibv_send_wr wr[SMCR_TX_WRS_PER_CDC];
	struct ibv_sge sge[SMCR_TX_WRS_PER_CDC];
	uint8_t buf[CDC_MSG_LEN];
	uint64_t pending = sc->tx_prep - sc->rx.tx_sent;
	uint64_t space = sc->rx.peer_len - (sc->rx.tx_sent - sc->rx.peer_cons);
	uint64_t n = pending < space ? pending : space;
	bool all_sent = sc->rx.tx_sent + n == sc->tx_prep;
	struct smcr_tx_pend p = {.conn = sc, .mark = sc->rx.tx_sent + n};
	struct cdc_msg m;
	int k, rc;

	if (sc->err || !sc->rx.peer_len || (sc->abort_sent))
		return;
	if (sc->aborting)
		n = 0, all_sent = true;
	if (!n && !sc->rx.cons_update_due && !sc_flags_due(sc, all_sent))
		return;
	k = n ? sc_build_writes(sc, n, wr, sge) : 0;
	m = (struct cdc_msg){
		.seqno = (uint16_t)(sc->tx_seq + 1),
		.token = sc->peer_token,
		.prod = cdc_rx_curs_of(sc->rx.tx_sent + n, sc->rx.peer_len),
		.cons = cdc_rx_curs_of(sc->rx.rx_cons, sc->rx.rmb_len),
		.prod_flags = pending > n ? CDC_PF_WRITE_BLOCKED : 0,
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
	rc = smcr_wr_post_send(sc->lgr, wr, k + 1, &p, SMCR_SQ_CDC);
	if (rc) {
		atomic_fetch_sub(&sc->refs, 1);
		if (rc == -EAGAIN) {
			sc->tx_pending = true;
			atomic_store(&sc->lgr->any_pending, true);
		} else {
			sc_fail_locked(sc, rc);
		}
		return;
	}
	sc->tx_seq = m.seqno;
	sc->rx.tx_sent += n;
	sc->rx.rx_cons_sent = sc->rx.rx_cons;
	sc->rx.cons_update_due = false;
	if (m.conn_state_flags & CDC_CS_PEER_DONE_WRITING)
		sc->shut_wr_sent = true;
	if (m.conn_state_flags & CDC_CS_PEER_CONN_CLOSED)
		sc->closed_sent = true;
	if (m.conn_state_flags & CDC_CS_PEER_CONN_ABORT)
		sc->abort_sent = true;
}

static void sc_tx_done(struct lgr *lgr, const struct smcr_tx_pend *p)
{
	struct smcr_conn *sc = p->conn;

	(void)lgr;
	pthread_mutex_lock(&sc->lock);
	if (p->mark > sc->tx_fin) {
		sc->tx_fin = p->mark;
		pthread_cond_broadcast(&sc->cond);
		sc_update_ready_locked(sc);
	}
	pthread_mutex_unlock(&sc->lock);
	smcr_conn_put(sc);
}

static void sc_kick_pending(struct lgr *lgr)
{
	struct smcr_conn *list[SMCR_MAX_CONNS];
	int n;

	if (!atomic_exchange(&lgr->any_pending, false))
		return;
	n = lgr_conns_get(lgr, list);
	for (int i = 0; i < n; i++) {
		struct smcr_conn *sc = list[i];

		pthread_mutex_lock(&sc->lock);
		if (sc->tx_pending) {
			sc->tx_pending = false;
			sc_tx_push_locked(sc);
		}
		pthread_mutex_unlock(&sc->lock);
		smcr_conn_put(sc);
	}
}

/* ---- receive --------------------------------------------------------- */

/* Apply a CDC to sc; requires sc->lock. Returns false for a protocol
 * violation (sc unchanged: cdc_rx_apply() refuses before it moves anything). */
static bool sc_cdc_apply_locked(struct smcr_conn *sc, const struct cdc_msg *m)
{
	return cdc_rx_apply(&sc->rx, m) == CDC_RX_OK;
}

static void sc_cdc_rx(struct lgr *lgr, const uint8_t *buf, uint32_t len)
{
	struct smcr_conn *sc;
	struct cdc_msg m;
	bool drop_conn = false;

	if (cdc_decode(buf, len, &m)) {
		usmc_log(lgr->sctx->log, USMC_LOG_WARN,
			 "link group %x: malformed CDC message dropped (%u bytes)", lgr->id, len);
		return; /* as Linux: malformed CDC dropped */
	}
	sc = lgr_conn_get(lgr, m.token);
	if (!sc)
		return;
	pthread_mutex_lock(&sc->lock);
	if (!sc->rx.peer_len) {
		/* keep the newest; its cursors supersede older ones, flags add up */
		uint8_t fl = sc->early_valid ? sc->early.conn_state_flags : 0;

		if (!sc->early_valid || !cdc_seq_before(m.seqno, sc->early.seqno)) {
			sc->early = m;
			sc->early.conn_state_flags |= fl;
			sc->early_valid = true;
		}
	} else if (!sc->err && !(sc->rx_seq_seen && cdc_seq_before(m.seqno, sc->rx_seq))) {
		sc->rx_seq = m.seqno;
		sc->rx_seq_seen = true;
		if (sc_cdc_apply_locked(sc, &m)) {
			if (!sc->rx.peer_abort)
				sc_tx_push_locked(sc);
		} else {
			/* a lying peer costs only this connection */
			usmc_log(
				lgr->sctx->log, USMC_LOG_WARN,
				"link group %x: peer broke the CDC rules on connection %08x: aborted",
				lgr->id, sc->token);
			sc->aborting = true;
			sc_tx_push_locked(sc);
			sc_fail_locked(sc, -EPROTO);
		}
		pthread_cond_broadcast(&sc->cond);
		sc_update_ready_locked(sc);
	}
	drop_conn = sc->orphan && (sc->rx.peer_closed || sc->rx.peer_abort || sc->err);
	pthread_mutex_unlock(&sc->lock);
	if (drop_conn)
		lgr_conn_del(lgr, sc->token);
	smcr_conn_put(sc);
}

/* ---- user calls ------------------------------------------------------ */

/* Wait for a change at most @ms; requires sc->lock. */
static void sc_wait_locked(struct smcr_conn *sc, long ms)
{
	struct timespec ts;

	clock_deadline_ts(clock_now_ms() + ms, &ts);
	pthread_cond_timedwait(&sc->cond, &sc->lock, &ts);
}

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
	size_t t = 0;

	for (int i = 0; i < iovcnt; i++)
		t += iov[i].iov_len;
	return t;
}

/* Copy up to @len bytes between a ring and the iovec at stream offset @pos. */
static void ring_copy(uint8_t *ring, uint32_t size, uint64_t pos, const struct iovec *iov,
		      int iovcnt, size_t skip, size_t len, bool to_ring)
{
	int i = 0;

	while (i < iovcnt && skip >= iov[i].iov_len)
		skip -= iov[i++].iov_len;
	while (len && i < iovcnt) {
		uint32_t off = (uint32_t)(pos % size);
		size_t n = iov[i].iov_len - skip;
		uint8_t *u = (uint8_t *)iov[i].iov_base + skip;

		if (n > len)
			n = len;
		if (n > size - off)
			n = size - off;
		if (to_ring)
			memcpy(ring + off, u, n);
		else
			memcpy(u, ring + off, n);
		pos += n;
		len -= n;
		skip += n;
		if (skip == iov[i].iov_len) {
			skip = 0;
			i++;
		}
	}
}

ssize_t smcr_sendv(struct smcr_conn *sc, const struct iovec *iov, int iovcnt, bool nonblock)
{
	size_t total = iov_total(iov, iovcnt), done = 0;
	ssize_t rc = 0;

	pthread_mutex_lock(&sc->lock);
	while (done < total || !total) {
		uint64_t room = sc->snd_len - (sc->tx_prep - sc->tx_fin);
		size_t n = total - done;

		if (sc->shut_wr || sc->closed || sc->rx.peer_abort) {
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
			if (nonblock) {
				rc = -EAGAIN;
				break;
			}
			sc_wait_locked(sc, 1000);
			continue;
		}
		if (n > room)
			n = room;
		ring_copy(sc->sndbuf->addr, sc->snd_len, sc->tx_prep, iov, iovcnt, done, n, true);
		sc->tx_prep += n;
		done += n;
		sc_tx_push_locked(sc);
		if (nonblock)
			break;
	}
	sc_update_ready_locked(sc);
	pthread_mutex_unlock(&sc->lock);
	return done ? (ssize_t)done : rc;
}

/* Tell the peer about consumed bytes when it matters (net/smc/smc_tx.c
 * smc_tx_consumer_update(), with smc_rx.c smc_rx_update_consumer()'s limit). */
static void sc_consumer_update_locked(struct smcr_conn *sc)
{
	uint64_t unconf = sc->rx.rx_cons - sc->rx.rx_cons_sent;
	uint64_t limit = sc->rx.rmb_len / 10 > SMCR_CONS_UPDATE_MIN ? sc->rx.rmb_len / 10
								    : SMCR_CONS_UPDATE_MIN;
	uint64_t sender_free = sc->rx.rmb_len - (sc->rx.rx_prod - sc->rx.rx_cons_sent);

	if (unconf > limit && (sender_free <= sc->rx.rmb_len / 2 || sc->rx.peer_write_blocked)) {
		sc->rx.cons_update_due = true;
		sc_tx_push_locked(sc);
	}
}

ssize_t smcr_recvv(struct smcr_conn *sc, const struct iovec *iov, int iovcnt, int flags,
		   bool nonblock)
{
	size_t total = iov_total(iov, iovcnt), done = 0;
	ssize_t rc = 0;

	pthread_mutex_lock(&sc->lock);
	while (done < total) {
		uint64_t avail = sc->rx.rx_prod - sc->rx.rx_cons - ((flags & MSG_PEEK) ? done : 0);
		size_t n = total - done;

		if (avail) {
			if (n > avail)
				n = avail;
			ring_copy(sc->rmb->addr, sc->rx.rmb_len,
				  sc->rx.rx_cons + ((flags & MSG_PEEK) ? done : 0), iov, iovcnt,
				  done, n, false);
			done += n;
			if (!(flags & MSG_PEEK)) {
				sc->rx.rx_cons += n;
				sc_consumer_update_locked(sc);
			}
			if (!(flags & MSG_WAITALL) || (flags & MSG_PEEK))
				break;
			continue;
		}
		if (sc->rx.peer_abort) {
			rc = -ECONNRESET;
			break;
		}
		if (sc->err && !sc->err_after_eof) {
			rc = sc->err;
			break;
		}
		if (sc->rx.peer_done_writing || sc->rx.peer_closed || sc->shut_rd)
			break; /* end of stream */
		if (nonblock || done) {
			rc = -EAGAIN;
			if (!nonblock && (flags & MSG_WAITALL)) {
				sc_wait_locked(sc, 1000);
				continue;
			}
			break;
		}
		sc_wait_locked(sc, 1000);
	}
	sc_update_ready_locked(sc);
	pthread_mutex_unlock(&sc->lock);
	if (done)
		return (ssize_t)done;
	return rc == -EAGAIN && !nonblock ? 0 : rc;
}

int smcr_shutdown(struct smcr_conn *sc, int how)
{
	pthread_mutex_lock(&sc->lock);
	if (how == SHUT_RD || how == SHUT_RDWR)
		sc->shut_rd = true;
	if (how == SHUT_WR || how == SHUT_RDWR) {
		sc->shut_wr = true;
		sc_tx_push_locked(sc);
	}
	pthread_cond_broadcast(&sc->cond);
	sc_update_ready_locked(sc);
	pthread_mutex_unlock(&sc->lock);
	return 0;
}

void smcr_close(struct smcr_conn *sc, bool abort, long linger_ms, long close_wait_ms)
{
	long deadline = clock_now_ms() + linger_ms;
	int tcp_fd;
	bool peer_gone;

	pthread_mutex_lock(&sc->lock);
	/* linger: give unsent data time to leave (and be completed) */
	while (!abort && !sc->err && !sc->rx.peer_abort && sc->tx_fin < sc->tx_prep &&
	       clock_now_ms() < deadline)
		sc_wait_locked(sc, 50);
	/* unread data, leftovers or an explicit abort: abort, as Linux */
	if (abort || sc->rx.rx_prod > sc->rx.rx_cons || sc->rx.tx_sent < sc->tx_prep)
		sc->aborting = true;
	sc->closed = true;
	sc_tx_push_locked(sc);
	/* the RMB goes back to the pool only once the peer can no longer write */
	peer_gone = sc->rx.peer_closed || sc->rx.peer_abort || sc->err;
	sc->orphan = !peer_gone;
	sc->orphan_deadline_ms = clock_now_ms() + close_wait_ms;
	if (sc->orphan)
		atomic_fetch_add(&sc->lgr->orphans, 1);
	tcp_fd = sc->tcp_fd;
	sc->tcp_fd = -1;
	pthread_mutex_unlock(&sc->lock);
	/* the TCP socket is closed after this: stop watching it */
	if (tcp_fd >= 0)
		lgr_unwatch_tcp(sc->lgr, tcp_fd);
	if (peer_gone)
		lgr_conn_del(sc->lgr, sc->token);
	if (smcr_test_hook_close_put)
		smcr_test_hook_close_put(); /* tests widen the window here */
	smcr_conn_put(sc);
}

const struct lgr_conn_ops smcr_conn_lgr_ops = {
	.get = sc_get,
	.put = smcr_conn_put,
	.cdc_rx = sc_cdc_rx,
	.tx_done = sc_tx_done,
	.kick_pending = sc_kick_pending,
	.fail = sc_fail,
	.tcp_hup = sc_tcp_hup,
	.tick = sc_tick,
};
