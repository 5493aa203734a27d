// SPDX-License-Identifier: MIT
/*
 * Link groups: one RC QP (one link, max_links 1), its receive buffers, the
 * send queue accounting, the LGR's buffer pools, the LLC flows and the
 * progress thread that sleeps on the completion channel and dispatches
 * completions to the LLC and CDC handlers (smc-r-protocol.md §3, §5.4, §8.4).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ctx.h"
#include "smcr.h"

#define LGR_RX_TAG   (1ull << 63) /* wr_id of a receive: tag | buffer index */
#define LGR_CQ_BATCH 16
#define LGR_CQE	     (SMCR_MAX_SEND_WR + SMCR_RX_WRS + 16)
#define LGR_TICK_MS  250 /* timer resolution of the progress thread */
#define LGR_EP_CH    1ull
#define LGR_EP_STOP  2ull
#define LGR_EP_TCP   (1ull << 40) /* | connection token */

long smcr_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static uint32_t random_u32(void)
{
	uint32_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)smcr_now_ms() * 2654435761u;
	return v;
}

static struct ibv_context *open_dev_by_name(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ib = NULL;

	for (int i = 0; list && list[i] && !ib; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ib = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	return ib;
}

static int post_recv(struct lgr *lgr, uint32_t idx)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(lgr->rx_bufs + (size_t)idx * SMCR_RX_BUF_LEN),
		.length = SMCR_RX_BUF_LEN,
		.lkey = lgr->rx_mr->lkey,
	};
	struct ibv_recv_wr wr = {.wr_id = LGR_RX_TAG | idx, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad;

	return -ibv_post_recv(lgr->qp, &wr, &bad);
}

static int lgr_qp_create(struct lgr *lgr)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = lgr->cq,
		.recv_cq = lgr->cq,
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = SMCR_MAX_SEND_WR,
			.max_recv_wr = SMCR_RX_WRS,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = SMCR_MAX_INLINE},
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = lgr->dev.port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	};

	lgr->qp = ibv_create_qp(lgr->pd, &ia);
	if (!lgr->qp)
		return errno ? -errno : -ENOMEM;
	return -ibv_modify_qp(lgr->qp, &a,
			      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int lgr_rx_setup(struct lgr *lgr)
{
	size_t len = (size_t)SMCR_RX_WRS * SMCR_RX_BUF_LEN;
	int rc;

	lgr->rx_bufs = aligned_alloc(4096, len);
	if (!lgr->rx_bufs)
		return -ENOMEM;
	lgr->rx_mr = ibv_reg_mr(lgr->pd, lgr->rx_bufs, len, IBV_ACCESS_LOCAL_WRITE);
	if (!lgr->rx_mr)
		return errno ? -errno : -ENOMEM;
	/* receives may be posted in INIT; they must be there before RTR */
	for (uint32_t i = 0; i < SMCR_RX_WRS; i++) {
		rc = post_recv(lgr, i);
		if (rc)
			return rc;
	}
	return 0;
}

static int lgr_pools(struct lgr *lgr)
{
	struct bufpool_config cfg = {
		.kind = BUFPOOL_RMB, .ops = &bufpool_verbs_hooks, .ops_ctx = lgr->pd};
	const char *env = getenv("USMC_MAX_BUFS");

	/* tuning and test knob: fewer buffers per pool than the protocol's 255 */
	if (env && *env)
		cfg.max_bufs = (uint32_t)strtoul(env, NULL, 0);

	lgr->rmbs = bufpool_create(&cfg);
	if (!lgr->rmbs)
		return -errno;
	cfg.kind = BUFPOOL_SNDBUF;
	lgr->sndbufs = bufpool_create(&cfg);
	return lgr->sndbufs ? 0 : -errno;
}

static int lgr_verbs(struct lgr *lgr)
{
	int rc;

	lgr->ib = open_dev_by_name(lgr->dev.name);
	if (!lgr->ib)
		return -ENODEV;
	lgr->pd = ibv_alloc_pd(lgr->ib);
	lgr->ch = ibv_create_comp_channel(lgr->ib);
	if (!lgr->pd || !lgr->ch)
		return -ENOMEM;
	fcntl(lgr->ch->fd, F_SETFL, fcntl(lgr->ch->fd, F_GETFL) | O_NONBLOCK);
	lgr->cq = ibv_create_cq(lgr->ib, LGR_CQE, lgr, lgr->ch, 0);
	if (!lgr->cq)
		return -ENOMEM;
	rc = lgr_qp_create(lgr);
	if (!rc)
		rc = lgr_rx_setup(lgr);
	if (!rc)
		rc = lgr_pools(lgr);
	return rc;
}

int lgr_create(struct usmc_ctx *ctx, bool is_server, const struct smcr_dev *dev, struct lgr **out)
{
	struct lgr *lgr = calloc(1, sizeof(*lgr));
	int rc;

	if (!lgr)
		return -ENOMEM;
	lgr->ctx = ctx;
	lgr->is_server = is_server;
	lgr->dev = *dev;
	lgr->state = LGR_INIT;
	atomic_fetch_add(&ctx->rdma.lgrs_open, 1);
	lgr->id = atomic_fetch_add(&ctx->rdma.lgr_seq, 256) + 256;
	lgr->psn = random_u32() & 0xffffff;
	lgr->link_num = 1;
	lgr->max_conns = SMCR_MAX_CONNS;
	lgr->busy_poll = ctx->opts.v[USMC_OPT_BUSY_POLL];
	lgr->testlink_ms = ctx->opts.v[USMC_OPT_TESTLINK_MS];
	lgr->idle_ms = ctx->opts.v[USMC_OPT_LGR_IDLE_MS];
	lgr->last_rx_ms = smcr_now_ms();
	pthread_mutex_init(&lgr->lock, NULL);
	pthread_mutex_init(&lgr->tx_lock, NULL);
	pthread_mutex_init(&lgr->flow_lock, NULL);
	pthread_mutex_init(&lgr->llc_lock, NULL);
	pthread_cond_init(&lgr->llc_cond, NULL);
	lgr->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	lgr->ep = epoll_create1(EPOLL_CLOEXEC);
	rc = lgr->stop_fd < 0 || lgr->ep < 0 ? -errno : lgr_verbs(lgr);
	if (rc) {
		lgr_free(lgr);
		return rc;
	}
	atomic_fetch_add(&ctx->rdma.lgrs_created, 1);
	*out = lgr;
	return 0;
}

int lgr_qp_rtr(struct lgr *lgr, uint32_t peer_qpn, uint32_t peer_psn, const uint8_t peer_gid[16],
	       enum ibv_mtu mtu)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = peer_qpn,
		.rq_psn = peer_psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = SMCR_QP_MIN_RNR,
		.ah_attr = {.is_global = 1,
			    .port_num = lgr->dev.port,
			    .grh = {.sgid_index = (uint8_t)lgr->dev.gid_index, .hop_limit = 64}},
	};

	memcpy(a.ah_attr.grh.dgid.raw, peer_gid, 16);
	lgr->peer_qpn = peer_qpn;
	memcpy(lgr->peer_gid, peer_gid, 16);
	return -ibv_modify_qp(lgr->qp, &a,
			      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				      IBV_QP_MIN_RNR_TIMER);
}

int lgr_qp_rts(struct lgr *lgr)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.timeout = SMCR_QP_TIMEOUT,
		.retry_cnt = SMCR_QP_RETRY,
		.rnr_retry = SMCR_QP_RNR_RETRY,
		.sq_psn = lgr->psn,
		.max_rd_atomic = 1,
	};

	return -ibv_modify_qp(lgr->qp, &a,
			      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* ---- send queue ------------------------------------------------------ */

static int post_send(struct lgr *lgr, struct ibv_send_wr *wr, int n, const struct smcr_tx_pend *p,
		     int limit, bool force)
{
	struct ibv_send_wr *bad;
	int rc = 0;

	pthread_mutex_lock(&lgr->tx_lock);
	if (atomic_load(&lgr->state) == LGR_DEAD && !force)
		rc = -ECONNABORTED;
	else if (lgr->sq_used + n > limit)
		rc = -EAGAIN;
	if (!rc) {
		lgr->pend[lgr->pend_head % SMCR_MAX_SEND_WR] = *p;
		lgr->pend[lgr->pend_head % SMCR_MAX_SEND_WR].nwr = (uint16_t)n;
		rc = -ibv_post_send(lgr->qp, wr, &bad);
		if (!rc) {
			lgr->pend_head++;
			lgr->sq_used += n;
		}
	}
	pthread_mutex_unlock(&lgr->tx_lock);
	return rc;
}

int lgr_post_send(struct lgr *lgr, struct ibv_send_wr *wr, int n, const struct smcr_tx_pend *p,
		  bool llc)
{
	return post_send(lgr, wr, n, p, llc ? SMCR_MAX_SEND_WR : SMCR_TX_CDC_WRS, false);
}

/* A signaled send completed: its entries (and the unsignaled ones before it) are free. */
static bool lgr_send_done(struct lgr *lgr, struct smcr_tx_pend *p)
{
	bool ok = false;

	pthread_mutex_lock(&lgr->tx_lock);
	if (lgr->pend_tail != lgr->pend_head) {
		*p = lgr->pend[lgr->pend_tail++ % SMCR_MAX_SEND_WR];
		lgr->sq_used -= p->nwr;
		ok = true;
	}
	pthread_mutex_unlock(&lgr->tx_lock);
	return ok;
}

static int llc_send(struct lgr *lgr, const struct llc_msg *m, bool force)
{
	uint8_t buf[LLC_MSG_LEN];
	struct ibv_sge sge = {.addr = (uintptr_t)buf};
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE,
	};
	struct smcr_tx_pend p = {0};
	int len = llc_encode(m, buf, sizeof(buf));

	if (len < 0)
		return len; /* we only send 44-byte LLC messages */
	sge.length = (uint32_t)len;
	return post_send(lgr, &wr, 1, &p, SMCR_MAX_SEND_WR, force);
}

int lgr_llc_send(struct lgr *lgr, const struct llc_msg *m)
{
	return llc_send(lgr, m, false);
}

/* ---- LLC ------------------------------------------------------------- */

static void llc_deliver_resp(struct lgr *lgr, const struct llc_msg *m)
{
	pthread_mutex_lock(&lgr->llc_lock);
	if (lgr->llc_wait_type == m->type && !lgr->llc_resp_valid) {
		lgr->llc_resp = *m;
		lgr->llc_resp_valid = true;
		pthread_cond_broadcast(&lgr->llc_cond);
	}
	pthread_mutex_unlock(&lgr->llc_lock);
}

static int cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, long deadline_ms)
{
	struct timespec ts;
	long left = deadline_ms - smcr_now_ms();

	if (left <= 0)
		return -ETIMEDOUT;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += left / 1000;
	ts.tv_nsec += (left % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(c, m, &ts);
	return 0;
}

int lgr_llc_flow(struct lgr *lgr, const struct llc_msg *req, struct llc_msg *resp)
{
	struct timespec ts;
	long deadline;
	int rc;

	/* Linux waits up to 20 s for a running flow, then 2 s for the answer */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += SMCR_FLOW_WAIT_MS / 1000;
	rc = pthread_mutex_timedlock(&lgr->flow_lock, &ts);
	if (rc)
		return -rc;
	deadline = smcr_now_ms() + SMCR_LLC_WAIT_MS;
	pthread_mutex_lock(&lgr->llc_lock);
	lgr->llc_wait_type = req->type;
	lgr->llc_resp_valid = false;
	pthread_mutex_unlock(&lgr->llc_lock);
	rc = lgr_llc_send(lgr, req);
	pthread_mutex_lock(&lgr->llc_lock);
	while (!rc && !lgr->llc_resp_valid) {
		if (atomic_load(&lgr->state) == LGR_DEAD)
			rc = -ECONNABORTED;
		else
			rc = cond_wait_until(&lgr->llc_cond, &lgr->llc_lock, deadline);
	}
	if (!rc)
		*resp = lgr->llc_resp;
	lgr->llc_wait_type = 0;
	pthread_mutex_unlock(&lgr->llc_lock);
	pthread_mutex_unlock(&lgr->flow_lock);
	return rc;
}

int lgr_wait_confirm_link(struct lgr *lgr, int timeout_ms, struct llc_msg *req)
{
	long deadline = smcr_now_ms() + timeout_ms;
	int rc = 0;

	pthread_mutex_lock(&lgr->llc_lock);
	while (!rc && !lgr->confirm_req_valid) {
		if (atomic_load(&lgr->state) == LGR_DEAD)
			rc = -ECONNABORTED;
		else
			rc = cond_wait_until(&lgr->llc_cond, &lgr->llc_lock, deadline);
	}
	if (!rc)
		*req = lgr->confirm_req;
	pthread_mutex_unlock(&lgr->llc_lock);
	return rc;
}

/* Answer a request the peer started; the reserved LLC send entries make room. */
static void llc_answer(struct lgr *lgr, struct llc_msg *m)
{
	switch (m->type) {
	case LLC_TEST_LINK:
		llc_make_response(m);
		atomic_fetch_add(&lgr->test_link_answered, 1);
		break;
	case LLC_CONFIRM_RKEY:
		/* single link: the same rkey arrives in CLC; accept and echo */
		llc_confirm_rkey_response(m, true);
		atomic_fetch_add(&lgr->rkey_confirmed, 1);
		break;
	case LLC_DELETE_RKEY: {
		bool unknown[LLC_V2_DEL_RKEY_MAX] = {false};

		llc_delete_rkey_response(m, unknown);
		atomic_fetch_add(&lgr->rkey_deleted, 1);
		break;
	}
	case LLC_ADD_LINK: /* max_links 1: never a second link */
		llc_add_link_reject(m);
		break;
	case LLC_REQ_ADD_LINK: /* §8.4: "cannot start", 44 bytes of zeros */
		memset(&m->req_add_link, 0, sizeof(m->req_add_link));
		m->flags = LLC_FLAG_RESP;
		break;
	default:
		return;
	}
	lgr_llc_send(lgr, m);
}

static void llc_rx(struct lgr *lgr, const uint8_t *buf, uint32_t len)
{
	static _Thread_local struct llc_msg m; /* large (ADD_LINK rkeys): not on the stack */

	if (llc_decode(buf, len, &m))
		return; /* Linux drops malformed LLC silently */
	if (m.flags & LLC_FLAG_RESP) {
		if (m.type == LLC_TEST_LINK)
			lgr->tl_deadline = 0;
		llc_deliver_resp(lgr, &m);
		return;
	}
	switch (m.type) {
	case LLC_CONFIRM_LINK:
		pthread_mutex_lock(&lgr->llc_lock);
		if (!lgr->is_server && !lgr->confirm_req_valid) {
			lgr->confirm_req = m;
			lgr->confirm_req_valid = true;
			pthread_cond_broadcast(&lgr->llc_cond);
		}
		pthread_mutex_unlock(&lgr->llc_lock);
		break;
	case LLC_DELETE_LINK:
		/* one link: deleting it (or ALL) ends the link group */
		lgr_terminate(lgr, -ECONNABORTED, false);
		break;
	default:
		llc_answer(lgr, &m);
	}
}

/* ---- progress thread -------------------------------------------------- */

static void lgr_rx_done(struct lgr *lgr, const struct ibv_wc *wc)
{
	uint32_t idx = (uint32_t)(wc->wr_id & ~LGR_RX_TAG);
	const uint8_t *buf;

	if (wc->status != IBV_WC_SUCCESS || idx >= SMCR_RX_WRS)
		return;
	buf = lgr->rx_bufs + (size_t)idx * SMCR_RX_BUF_LEN;
	lgr->last_rx_ms = smcr_now_ms();
	if (wc->byte_len >= 1 && buf[0] == 0xFE)
		smcr_cdc_rx(lgr, buf, wc->byte_len);
	else
		llc_rx(lgr, buf, wc->byte_len);
	/* repost at once: there is no credit scheme for SENDs */
	if (post_recv(lgr, idx))
		lgr_terminate(lgr, -ECONNABORTED, false);
}

static int lgr_drain_cq(struct lgr *lgr)
{
	struct ibv_wc wc[LGR_CQ_BATCH];
	bool sent = false;
	int n, total = 0;

	while ((n = ibv_poll_cq(lgr->cq, LGR_CQ_BATCH, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			struct smcr_tx_pend p;

			if (wc[i].status != IBV_WC_SUCCESS && atomic_load(&lgr->state) != LGR_DEAD)
				lgr_terminate(lgr, -ECONNABORTED, false);
			if (wc[i].wr_id & LGR_RX_TAG) {
				lgr_rx_done(lgr, &wc[i]);
			} else if (lgr_send_done(lgr, &p)) {
				sent = true;
				if (p.conn)
					smcr_tx_done(lgr, &p);
			}
		}
		total += n;
	}
	if (sent)
		smcr_kick_pending(lgr);
	return total;
}

static void lgr_timers(struct lgr *lgr)
{
	long now = smcr_now_ms();
	struct llc_msg m = {.version = LLC_V2, .type = LLC_TEST_LINK};

	if (atomic_load(&lgr->state) != LGR_ACTIVE)
		return;
	if (lgr->tl_deadline && now > lgr->tl_deadline) {
		lgr_terminate(lgr, -ETIMEDOUT, false); /* TEST_LINK unanswered */
		return;
	}
	if (!lgr->tl_deadline && (atomic_exchange(&lgr->test_now, false) ||
				  (lgr->testlink_ms && now - lgr->last_rx_ms > lgr->testlink_ms))) {
		if (!lgr_llc_send(lgr, &m)) {
			atomic_fetch_add(&lgr->test_link_sent, 1);
			lgr->tl_deadline = now + SMCR_LLC_WAIT_MS;
		}
	}
}

static void lgr_wait_event(struct lgr *lgr)
{
	struct epoll_event ev[16];
	struct ibv_cq *cq;
	void *cq_ctx;
	int n = epoll_wait(lgr->ep, ev, 16, LGR_TICK_MS);

	for (int i = 0; i < n; i++) {
		if (ev[i].data.u64 & LGR_EP_TCP)
			smcr_tcp_hup(lgr, (uint32_t)ev[i].data.u64);
		else if (ev[i].data.u64 == LGR_EP_CH && !ibv_get_cq_event(lgr->ch, &cq, &cq_ctx)) {
			ibv_ack_cq_events(cq, 1);
			ibv_req_notify_cq(cq, 0);
		}
	}
}

void lgr_watch_tcp(struct lgr *lgr, struct smcr_conn *sc, int fd)
{
	/* one-shot: a hang-up is reported once, then the socket is left alone */
	struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT,
				 .data.u64 = LGR_EP_TCP | sc->token};

	if (!epoll_ctl(lgr->ep, EPOLL_CTL_ADD, fd, &ev))
		sc->tcp_fd = fd;
}

void lgr_unwatch_tcp(struct lgr *lgr, struct smcr_conn *sc)
{
	if (sc->tcp_fd >= 0)
		epoll_ctl(lgr->ep, EPOLL_CTL_DEL, sc->tcp_fd, NULL);
	sc->tcp_fd = -1;
}

static bool lgr_idle_unlink(struct lgr *lgr);

static void *lgr_progress(void *arg)
{
	struct lgr *lgr = arg;
	long next_tick = 0;

	ibv_req_notify_cq(lgr->cq, 0);
	while (!atomic_load(&lgr->stop)) {
		int n = lgr_drain_cq(lgr);

		if (smcr_now_ms() >= next_tick) {
			lgr_timers(lgr);
			smcr_tcp_eof_check(lgr);
			next_tick = smcr_now_ms() + LGR_TICK_MS;
			if (lgr_idle_unlink(lgr)) {
				/* free ourselves: nobody can reach this LGR any more */
				pthread_detach(pthread_self());
				lgr->thread_started = false;
				lgr_free(lgr);
				return NULL;
			}
		}
		if (n || lgr->busy_poll)
			continue;
		/* notify was armed: drain once more so no completion slips between */
		lgr_wait_event(lgr);
	}
	return NULL;
}

int lgr_start(struct lgr *lgr)
{
	struct epoll_event ch = {.events = EPOLLIN, .data.u64 = LGR_EP_CH};
	struct epoll_event stop = {.events = EPOLLIN, .data.u64 = LGR_EP_STOP};
	int rc;

	if (epoll_ctl(lgr->ep, EPOLL_CTL_ADD, lgr->ch->fd, &ch) ||
	    epoll_ctl(lgr->ep, EPOLL_CTL_ADD, lgr->stop_fd, &stop))
		return -errno;
	rc = pthread_create(&lgr->thread, NULL, lgr_progress, lgr);

	if (rc)
		return -rc;
	lgr->thread_started = true;
	return 0;
}

/* ---- connections table ------------------------------------------------ */

int lgr_conn_add(struct lgr *lgr, struct smcr_conn *sc)
{
	int rc = -ENOSPC;

	pthread_mutex_lock(&lgr->lock);
	for (uint32_t i = 1; i <= SMCR_MAX_CONNS && lgr->nconns < lgr->max_conns &&
			     atomic_load(&lgr->state) != LGR_DEAD;
	     i++) {
		if (lgr->conns[i])
			continue;
		uint32_t gen = atomic_fetch_add(&lgr->ctx->rdma.token_seq, 1) & 0xffffff;

		sc->token = (gen << 8) | i;
		lgr->conns[i] = sc;
		lgr->nconns++;
		atomic_fetch_add(&sc->refs, 1);
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&lgr->lock);
	return rc;
}

int lgr_conns_get(struct lgr *lgr, struct smcr_conn *list[SMCR_MAX_CONNS + 1])
{
	int n = 0;

	pthread_mutex_lock(&lgr->lock);
	for (int i = 1; i <= SMCR_MAX_CONNS; i++)
		if (lgr->conns[i]) {
			list[n++] = lgr->conns[i];
			atomic_fetch_add(&lgr->conns[i]->refs, 1);
		}
	pthread_mutex_unlock(&lgr->lock);
	return n;
}

void lgr_conn_del(struct lgr *lgr, struct smcr_conn *sc)
{
	bool was = false;

	pthread_mutex_lock(&lgr->lock);
	if (lgr->conns[sc->token & 0xff] == sc) {
		lgr->conns[sc->token & 0xff] = NULL;
		if (--lgr->nconns == 0)
			lgr->idle_since_ms = smcr_now_ms();
		was = true;
	}
	pthread_mutex_unlock(&lgr->lock);
	if (was)
		smcr_conn_put(sc);
}

struct smcr_conn *lgr_conn_get(struct lgr *lgr, uint32_t token)
{
	struct smcr_conn *sc;

	pthread_mutex_lock(&lgr->lock);
	sc = lgr->conns[token & 0xff];
	if (sc && sc->token == token)
		atomic_fetch_add(&sc->refs, 1);
	else
		sc = NULL;
	pthread_mutex_unlock(&lgr->lock);
	return sc;
}

/* ---- life cycle ----------------------------------------------------- */

void lgr_terminate(struct lgr *lgr, int err, bool send_delete)
{
	struct smcr_conn *list[SMCR_MAX_CONNS + 1];
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	int expect = LGR_ACTIVE, n;

	if (!atomic_compare_exchange_strong(&lgr->state, &expect, LGR_DEAD)) {
		expect = LGR_INIT;
		if (!atomic_compare_exchange_strong(&lgr->state, &expect, LGR_DEAD))
			return;
	} else if (send_delete) {
		struct llc_msg m = {.version = LLC_V2,
				    .type = LLC_DELETE_LINK,
				    .flags = LLC_FLAG_DEL_LINK_ALL | LLC_FLAG_DEL_LINK_ORDERLY,
				    .delete_link = {.reason = LLC_DEL_PROG_INIT_TERM}};

		llc_send(lgr, &m, true);
		/* give it a moment to leave before the QP goes to ERR */
		usleep(20000);
	}
	if (lgr->qp)
		ibv_modify_qp(lgr->qp, &a, IBV_QP_STATE);
	n = lgr_conns_get(lgr, list);
	for (int i = 0; i < n; i++) {
		/* closed by the user, waiting for the peer: nothing to wait for */
		if (smcr_conn_fail(list[i], err))
			lgr_conn_del(lgr, list[i]);
		smcr_conn_put(list[i]);
	}
	pthread_mutex_lock(&lgr->llc_lock);
	pthread_cond_broadcast(&lgr->llc_cond);
	pthread_mutex_unlock(&lgr->llc_lock);
}

void lgr_publish(struct lgr *lgr)
{
	struct smcr_ctx *s = &lgr->ctx->rdma;

	pthread_mutex_lock(&s->lock);
	lgr->next = s->lgrs;
	s->lgrs = lgr;
	pthread_mutex_unlock(&s->lock);
}

struct lgr *lgr_find(struct usmc_ctx *ctx, bool is_server, const uint8_t peer_id[8],
		     const uint8_t peer_gid[16], uint32_t peer_qpn, bool match_qpn)
{
	struct smcr_ctx *s = &ctx->rdma;
	struct lgr *l;

	pthread_mutex_lock(&s->lock);
	for (l = s->lgrs; l; l = l->next) {
		if (l->is_server != is_server || atomic_load(&l->state) != LGR_ACTIVE ||
		    memcmp(l->peer_id, peer_id, SMCR_SYSTEM_ID_LEN) ||
		    memcmp(l->peer_gid, peer_gid, 16))
			continue;
		if (match_qpn && l->peer_qpn != peer_qpn)
			continue;
		/* a server starts a new link group when this one is full (as Linux) */
		pthread_mutex_lock(&l->lock);
		bool full = l->nconns >= l->max_conns;

		pthread_mutex_unlock(&l->lock);
		if (is_server && full)
			continue;
		l->users++;
		break;
	}
	pthread_mutex_unlock(&s->lock);
	return l;
}

void lgr_unuse(struct lgr *lgr)
{
	struct smcr_ctx *s = &lgr->ctx->rdma;

	pthread_mutex_lock(&s->lock);
	lgr->users--;
	pthread_mutex_unlock(&s->lock);
}

/*
 * Idle for idle_ms with no connection and no finder: unlink from the
 * context (no one can find it any more) and report true; the caller frees.
 */
static bool lgr_idle_unlink(struct lgr *lgr)
{
	struct smcr_ctx *s = &lgr->ctx->rdma;
	bool expired = false;

	pthread_mutex_lock(&s->lock);
	pthread_mutex_lock(&lgr->lock);
	if (!lgr->nconns && !lgr->users && lgr->idle_since_ms &&
	    (smcr_now_ms() - lgr->idle_since_ms > lgr->idle_ms ||
	     atomic_load(&lgr->state) == LGR_DEAD)) {
		for (struct lgr **pp = &s->lgrs; *pp; pp = &(*pp)->next)
			if (*pp == lgr) {
				*pp = lgr->next;
				expired = true;
				break;
			}
	}
	pthread_mutex_unlock(&lgr->lock);
	pthread_mutex_unlock(&s->lock);
	return expired;
}

static void lgr_stop_thread(struct lgr *lgr)
{
	uint64_t one = 1;

	if (!lgr->thread_started)
		return;
	atomic_store(&lgr->stop, true);
	if (write(lgr->stop_fd, &one, sizeof(one)) < 0) {
		/* the tick ends the wait anyway */
	}
	pthread_join(lgr->thread, NULL);
	lgr->thread_started = false;
}

/* Connections closed by the user but waiting for the peer's close. */
static void lgr_free_orphans(struct lgr *lgr)
{
	for (int i = 1; i <= SMCR_MAX_CONNS; i++) {
		struct smcr_conn *sc = lgr->conns[i];

		if (sc)
			lgr_conn_del(lgr, sc);
	}
}

void lgr_free(struct lgr *lgr)
{
	if (lgr->qp)
		lgr_terminate(lgr, -ECONNABORTED, atomic_load(&lgr->state) == LGR_ACTIVE);
	lgr_stop_thread(lgr);
	if (lgr->cq) {
		struct smcr_tx_pend p;

		lgr_drain_cq(lgr); /* flushed work requests */
		while (lgr_send_done(lgr, &p))
			if (p.conn)
				smcr_conn_put(p.conn);
	}
	lgr_free_orphans(lgr);
	if (lgr->qp)
		ibv_destroy_qp(lgr->qp);
	/* the QP is gone: the peer can no longer write into the RMBs */
	if (lgr->rmbs)
		bufpool_destroy(lgr->rmbs, NULL);
	if (lgr->sndbufs)
		bufpool_destroy(lgr->sndbufs, NULL);
	if (lgr->rx_mr)
		ibv_dereg_mr(lgr->rx_mr);
	free(lgr->rx_bufs);
	if (lgr->cq)
		ibv_destroy_cq(lgr->cq);
	if (lgr->ch)
		ibv_destroy_comp_channel(lgr->ch);
	if (lgr->pd)
		ibv_dealloc_pd(lgr->pd);
	if (lgr->ib)
		ibv_close_device(lgr->ib);
	atomic_fetch_sub(&lgr->ctx->rdma.lgrs_open, 1);
	if (lgr->stop_fd >= 0)
		close(lgr->stop_fd);
	if (lgr->ep >= 0)
		close(lgr->ep);
	pthread_cond_destroy(&lgr->llc_cond);
	pthread_mutex_destroy(&lgr->llc_lock);
	pthread_mutex_destroy(&lgr->flow_lock);
	pthread_mutex_destroy(&lgr->tx_lock);
	pthread_mutex_destroy(&lgr->lock);
	free(lgr);
}

void lgr_destroy_all(struct usmc_ctx *ctx)
{
	struct smcr_ctx *s = &ctx->rdma;
	struct lgr *l;

	pthread_mutex_lock(&s->lock);
	l = s->lgrs;
	s->lgrs = NULL;
	pthread_mutex_unlock(&s->lock);
	while (l) {
		struct lgr *next = l->next;

		lgr_free(l);
		l = next;
	}
	/* link groups that freed themselves when idle may still be finishing */
	for (int i = 0; i < 5000 && atomic_load(&s->lgrs_open) > 0; i++)
		usleep(1000);
}
