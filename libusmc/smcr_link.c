// SPDX-License-Identifier: MIT
/*
 * A link's verbs objects and its QP's state changes (smcr_link.h), as
 * net/smc/smc_ib.c smc_ib_create_queue_pair(), smc_ib_modify_qp_rtr() and
 * smc_ib_modify_qp_rts(): each link opens its own device context, so it
 * sees its own port's async events.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>

#include "clock.h"
#include "smcr_link.h"

#define LNK_SCQE (SMCR_MAX_SEND_WR + 16)
#define LNK_RCQE (SMCR_RX_WRS + 16)
/* Asked of the QP: a 64 B message's WRITE goes inline with its CDC (rxe
 * allows 512); a device that refuses gets SMCR_MAX_INLINE. */
#define LNK_INLINE_WANT	  256
#define LNK_PSN_MASK	  0xffffff /* PSNs are 24 bits */

#define SMCR_QP_TIMEOUT	  15
#define SMCR_QP_RETRY	  7
#define SMCR_QP_RNR_RETRY 7 /* infinite: there is no credit scheme for SENDs */
#define SMCR_QP_MIN_RNR	  5

static uint32_t random_u32(void)
{
	uint32_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)clock_now_ms() * 2654435761u;
	return v;
}

void smcr_link_init(struct smcr_link *lnk, const struct smcr_dev *dev,
		    const struct smcr_link_upper *up)
{
	lnk->up = *up;
	lnk->dev = *dev;
	lnk->state = SMCR_LNK_ACTIVATING;
	lnk->psn = random_u32() & LNK_PSN_MASK;
	lnk->link_num = 1;
	lnk->last_rx_ms = clock_now_ms();
	lnk->tl_sent_ms = 0;
	pthread_mutex_init(&lnk->sq.lock, NULL);
}

/* The QP in INIT, with what the device grants of LNK_INLINE_WANT. */
static int link_qp_create(struct smcr_link *lnk)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = lnk->scq,
		.recv_cq = lnk->rcq,
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = SMCR_MAX_SEND_WR,
			.max_recv_wr = SMCR_RX_WRS,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = LNK_INLINE_WANT},
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = lnk->dev.port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	};

	lnk->qp = ibv_create_qp(lnk->pd, &ia);
	if (!lnk->qp) {
		ia.cap.max_inline_data = SMCR_MAX_INLINE;
		lnk->qp = ibv_create_qp(lnk->pd, &ia);
	}
	if (!lnk->qp)
		return errno ? -errno : -ENOMEM;
	/* what the device granted (at least what was asked) */
	lnk->max_inline = ia.cap.max_inline_data;
	return -ibv_modify_qp(lnk->qp, &a,
			      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int smcr_link_create(struct smcr_link *lnk)
{
	lnk->ib = smcr_dev_open(lnk->dev.name);
	if (!lnk->ib)
		return -ENODEV;
	lnk->pd = ibv_alloc_pd(lnk->ib);
	lnk->ch = ibv_create_comp_channel(lnk->ib);
	if (!lnk->pd || !lnk->ch)
		return -ENOMEM;
	fcntl(lnk->ch->fd, F_SETFL, fcntl(lnk->ch->fd, F_GETFL) | O_NONBLOCK);
	lnk->rcq = ibv_create_cq(lnk->ib, LNK_RCQE, lnk, lnk->ch, 0);
	lnk->scq = ibv_create_cq(lnk->ib, LNK_SCQE, lnk, lnk->ch, 0);
	if (!lnk->rcq || !lnk->scq)
		return -ENOMEM;
	return link_qp_create(lnk);
}

int smcr_link_qp_rtr(struct smcr_link *lnk, uint32_t peer_qpn, uint32_t peer_psn,
		     const uint8_t peer_gid[SMCR_GID_LEN], enum ibv_mtu mtu)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = peer_qpn,
		.rq_psn = peer_psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = SMCR_QP_MIN_RNR,
		.ah_attr = {.is_global = 1,
			    .port_num = lnk->dev.port,
			    .grh = {.sgid_index = (uint8_t)lnk->dev.gid_index, .hop_limit = 64}},
	};

	memcpy(a.ah_attr.grh.dgid.raw, peer_gid, SMCR_GID_LEN);
	lnk->peer_qpn = peer_qpn;
	memcpy(lnk->peer_gid, peer_gid, SMCR_GID_LEN);
	return -ibv_modify_qp(lnk->qp, &a,
			      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				      IBV_QP_MIN_RNR_TIMER);
}

int smcr_link_qp_rts(struct smcr_link *lnk)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.timeout = SMCR_QP_TIMEOUT,
		.retry_cnt = SMCR_QP_RETRY,
		.rnr_retry = SMCR_QP_RNR_RETRY,
		.sq_psn = lnk->psn,
		.max_rd_atomic = 1,
	};

	return -ibv_modify_qp(lnk->qp, &a,
			      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

void smcr_link_qp_error(struct smcr_link *lnk)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

	if (lnk->qp)
		ibv_modify_qp(lnk->qp, &a, IBV_QP_STATE);
}

void smcr_link_qp_destroy(struct smcr_link *lnk)
{
	if (lnk->qp)
		ibv_destroy_qp(lnk->qp);
}

void smcr_link_free(struct smcr_link *lnk)
{
	if (lnk->rcq)
		ibv_destroy_cq(lnk->rcq);
	if (lnk->scq)
		ibv_destroy_cq(lnk->scq);
	if (lnk->ch)
		ibv_destroy_comp_channel(lnk->ch);
	if (lnk->pd)
		ibv_dealloc_pd(lnk->pd);
	if (lnk->ib)
		ibv_close_device(lnk->ib);
	pthread_mutex_destroy(&lnk->sq.lock);
}

bool smcr_link_activate(struct smcr_link *lnk)
{
	int expect = SMCR_LNK_ACTIVATING;

	return atomic_compare_exchange_strong(&lnk->state, &expect, SMCR_LNK_ACTIVE);
}

int smcr_link_deactivate(struct smcr_link *lnk)
{
	int s = atomic_load(&lnk->state);

	/* a slot that holds no link stays unused */
	while (s != SMCR_LNK_UNUSED && s != SMCR_LNK_INACTIVE &&
	       !atomic_compare_exchange_weak(&lnk->state, &s, SMCR_LNK_INACTIVE))
		;
	return s;
}

bool smcr_link_async_fatal(const struct smcr_link *lnk, const struct ibv_async_event *e)
{
	switch (e->event_type) {
	case IBV_EVENT_PORT_ERR:
		return e->element.port_num == lnk->dev.port;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		return e->element.qp == lnk->qp;
	case IBV_EVENT_CQ_ERR:
		return e->element.cq == lnk->rcq || e->element.cq == lnk->scq;
	case IBV_EVENT_DEVICE_FATAL:
		return true;
	default:
		return false;
	}
}
