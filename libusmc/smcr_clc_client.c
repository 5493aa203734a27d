// SPDX-License-Identifier: MIT
/*
 * The client's CLC handshake (smcr_clc.h; net/smc/af_smc.c
 * smc_connect_rdma() and smc_connect_rdma_v2_prepare()): the PROPOSAL, the
 * server's ACCEPT or DECLINE, then a first contact (a new link group: the
 * CONFIRM, the QP, LLC CONFIRM_LINK) or a reuse (CONFIRM_RKEY if needed,
 * the CONFIRM). The waiting client and the asynchronous one run the same
 * steps; only how the answer is read differs.
 */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "bufpool.h"
#include "clc_io.h"
#include "clock.h"
#include "error.h"
#include "lgr.h"
#include "reason.h"
#include "smcr_clc.h"
#include "smcr_conn.h"

/* A non-first-contact ACCEPT names a link group that a concurrent connect
 * of ours may still be confirming: wait for it, boundedly. */
#define CLIENT_REUSE_WAIT_MS 2000

static void build_proposal(struct smcr_ctx *sctx, const struct smcr_dev *dev,
			   struct clc_proposal *p)
{
	memset(p, 0, sizeof(*p));
	p->version = CLC_V2;
	p->typev1 = CLC_TYPE_N;
	p->typev2 = CLC_TYPE_R;
	/* fill the local fields though Linux leaves them zero: a v2 peer
	 * ignores them (net/smc/smc_clc.c smc_clc_send_proposal()) */
	memcpy(p->peer_id, sctx->system_id, CLC_PEER_ID_LEN);
	memcpy(p->gid, dev->gid, CLC_GID_LEN);
	memcpy(p->mac, dev->mac, CLC_MAC_LEN);
	p->has_smcd_info = true;
	p->has_v2_ext = true;
	p->eid_count = 1;
	smcr_ctx_ueid(sctx, p->eid[0]);
	p->release = SMCR_RELEASE;
	memcpy(p->roce_gid, dev->gid, CLC_GID_LEN);
	p->max_conns = SMCR_MAX_CONNS;
	p->max_links = SMCR_MAX_LINKS;
	p->feature_mask = SMCR_FEATURE_MASK;
}

/* Checks of a first-contact ACCEPT (net/smc/af_smc.c
 * smc_connect_rdma_v2_prepare()); 0 or the decline reason. */
static uint32_t client_check_fc(const struct clc_accept_confirm *a, struct in_addr server)
{
	if (!smcr_clc_gid_is_addr(a->gid, server))
		return SMC_CLC_DECL_DIFFPREFIX;
	if (a->fce.release >= CLC_RELEASE_1) {
		if (a->fce.max_conns < SMCR_MIN_CONNS)
			return SMC_CLC_DECL_MAXCONNERR;
		if (a->fce.max_links < 1 || a->fce.max_links > 2)
			return SMC_CLC_DECL_MAXLINKERR;
	}
	return 0;
}

/* The first-contact CONFIRM: our link and RMB, the negotiated FCE. */
static int client_send_confirm(struct smcr_hs *hs, struct lgr *lgr, struct smcr_conn *sc,
			       const struct clc_accept_confirm *a, uint8_t release)
{
	const struct smcr_link *lnk = lgr_conn_link(lgr);
	struct clc_accept_confirm m;

	smcr_clc_fill_ac(&m, CLC_CONFIRM, lgr, sc, true);
	m.qp_mtu = (uint8_t)mtu_min(lnk->dev.active_mtu, a->qp_mtu);
	memcpy(m.eid, a->eid, CLC_EID_LEN);
	smcr_clc_fill_fce(&m.fce, release, a->fce.max_conns, a->fce.max_links);
	m.fce.feature_mask = a->fce.feature_mask & SMCR_FEATURE_MASK;
	m.gid_count = 1;
	memcpy(m.gids[0], lnk->dev.gid, CLC_GID_LEN);
	return smcr_clc_send_ac(hs->fd, &m);
}

/* Answer the server's CONFIRM_LINK with our link's address. */
static int client_confirm_link_resp(struct lgr *lgr, struct llc_msg *req)
{
	const struct smcr_link *lnk = lgr_conn_link(lgr);

	llc_make_response(req);
	memcpy(req->confirm_link.mac, lnk->dev.mac, SMCR_MAC_LEN);
	memcpy(req->confirm_link.gid, lnk->dev.gid, SMCR_GID_LEN);
	req->confirm_link.qpn = lnk->qp->qp_num;
	return smcr_llc_send(lgr, req);
}

/* Set up the link group's QP toward the server and start it; 0 or a reason. */
static uint32_t client_link_up(struct lgr *lgr, const struct clc_accept_confirm *a,
			       struct in_addr server, struct smcr_conn **sc,
			       const struct smcr_hs *hs)
{
	struct smcr_link *lnk = lgr_conn_link(lgr);

	lgr_set_peer(lgr, a->peer_id, a->mac, server);
	if (smcr_hs_conn_new(hs, lgr, sc) ||
	    smcr_link_qp_rtr(lnk, a->qpn, a->psn, a->gid,
			     mtu_min(lnk->dev.active_mtu, a->qp_mtu)) ||
	    lgr_start(lgr))
		return SMC_CLC_DECL_MEM;
	smcr_clc_set_peer_rmb(*sc, a);
	return 0;
}

static int client_first_contact(struct smcr_hs *hs, const struct smcr_dev *dev,
				const struct clc_accept_confirm *a, struct in_addr server)
{
	struct lgr_config cfg = smcr_clc_lgr_config(hs->opts);
	uint8_t release = a->fce.release > SMCR_RELEASE ? SMCR_RELEASE : a->fce.release;
	uint32_t reason = client_check_fc(a, server);
	struct smcr_conn *sc = NULL;
	struct llc_msg req;
	struct lgr *lgr;
	int rc;

	if (reason)
		return smcr_hs_decline(hs, reason, false);
	if (lgr_create(hs->sctx, &smcr_conn_lgr_ops, &cfg, false, dev, &lgr))
		return smcr_hs_decline(hs, SMC_CLC_DECL_MEM, false);
	reason = client_link_up(lgr, a, server, &sc, hs);
	if (reason)
		goto decline;
	rc = client_send_confirm(hs, lgr, sc, a, release);
	if (rc)
		goto fail;
	if (smcr_llc_wait_confirm_link(lgr, SMCR_CL_WAIT_MS, &req)) {
		rc = smcr_hs_await_server_decline(hs, SMC_CLC_DECL_TIMEOUT_CL,
						  SMCR_CL_DECLINE_WAIT_MS);
		goto fail;
	}
	reason = SMC_CLC_DECL_RMBE_EC;
	if (!(req.flags & LLC_FLAG_NO_RMBE_EYEC))
		goto decline;
	reason = SMC_CLC_DECL_TIMEOUT_CL;
	if (smcr_link_qp_rts(lgr_conn_link(lgr)))
		goto decline;
	rc = client_confirm_link_resp(lgr, &req);
	if (!rc)
		rc = lgr_activate(lgr, req.confirm_link.link_num,
				  release >= CLC_RELEASE_1 ? a->fce.max_conns : SMCR_MAX_CONNS);
	if (rc)
		goto fail;
	lgr_publish(lgr);
	return smcr_hs_established(hs, sc);
decline:
	rc = smcr_hs_decline(hs, reason, false);
fail:
	if (sc)
		smcr_conn_discard(sc);
	lgr_free(lgr);
	return rc;
}

/* Reuse @lgr (from lgr_find_wait(), NULL if none: out of sync). */
static int client_reuse(struct smcr_hs *hs, const struct clc_accept_confirm *a, struct lgr *lgr)
{
	struct clc_accept_confirm m;
	struct smcr_conn *sc;
	int rc;

	if (!lgr)
		return smcr_hs_decline(hs, SMC_CLC_DECL_SYNCERR, true);
	rc = smcr_hs_conn_new(hs, lgr, &sc);
	lgr_put(lgr);
	if (rc)
		return smcr_hs_decline(hs, SMC_CLC_DECL_MEM, false);
	smcr_clc_set_peer_rmb(sc, a);
	if (smcr_clc_confirm_rkey(lgr, sc)) {
		smcr_conn_discard(sc);
		return smcr_hs_decline(hs, SMC_CLC_DECL_ERR_REGBUF, false);
	}
	smcr_clc_fill_ac(&m, CLC_CONFIRM, lgr, sc, false);
	memcpy(m.eid, a->eid, CLC_EID_LEN);
	rc = smcr_clc_send_ac(hs->fd, &m);
	if (rc) {
		smcr_conn_discard(sc);
		return rc;
	}
	return smcr_hs_established(hs, sc);
}

/* After the ACCEPT: a new link group (within the caps), or the one it
 * names. SMCR_HS_AWAIT_LGR (without @wait only): a first contact of ours
 * with that server is still setting up the link group named. */
static int client_after_accept(struct smcr_hs *hs, struct smcr_client *cl, bool wait)
{
	const struct clc_accept_confirm *a = &cl->accept;
	struct lgr_config cfg = smcr_clc_lgr_config(hs->opts);
	struct lgr_key key = {.role = SMCR_ROLE_CLIENT,
			      .peer_id = a->peer_id,
			      .peer_gid = a->gid,
			      .peer_addr = cl->server,
			      .peer_qpn = a->qpn,
			      .match_qpn = true};
	struct lgr_pending pending;
	struct lgr *lgr;
	bool busy;
	int rc;

	if (!a->first_contact) {
		if (!cl->reuse_deadline_ms)
			cl->reuse_deadline_ms = clock_now_ms() + CLIENT_REUSE_WAIT_MS;
		/* waits (or asks again) only while a first contact with that
		 * server is in progress: only it can still publish the link
		 * group; else it is out of sync at once */
		lgr = lgr_find_wait(hs->sctx, &key, wait ? cl->reuse_deadline_ms : 0, &busy);
		if (!lgr && busy && !wait && clock_now_ms() < cl->reuse_deadline_ms)
			return SMCR_HS_AWAIT_LGR;
		return client_reuse(hs, a, lgr);
	}
	/* the server decides first contact: no lock, only the caps */
	if (lgr_reserve(hs->sctx, &key, &cfg, &pending))
		return smcr_hs_decline(hs, SMC_CLC_DECL_MEM, false);
	rc = client_first_contact(hs, &cl->dev, a, cl->server);
	lgr_unclaim(hs->sctx, &pending);
	return rc;
}

int smcr_clc_propose(struct smcr_hs *hs, struct smcr_client *cl)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_proposal p;
	int len;

	memset(cl, 0, sizeof(*cl));
	/* no device: not a byte of CLC, the server sees a TCP client */
	if (smcr_hs_find_dev(hs, &cl->dev) || smcr_hs_peer_ipv4(hs, &cl->server)) {
		hs->reason = USMC_REASON_NOSMCRDEV;
		return SMCR_HS_NODEV;
	}
	build_proposal(hs->sctx, &cl->dev, &p);
	len = clc_proposal_encode(&p, buf, sizeof(buf));
	if (len < 0)
		return usmc_err_of_wire(len);
	/* THE RULE: the proposal goes right after the connect, never later */
	return usmc_err_of_wire(clc_io_send(hs->fd, buf, (size_t)len));
}

/* The server's answer to the PROPOSAL, read without waiting: one recv()
 * while it is incomplete (the bytes carry over in @cl), never a byte past
 * it (a DECLINE may be followed by the server's data at once).
 * SMCR_HS_AWAIT_ANSWER while it is incomplete. */
static int client_read_answer(struct smcr_hs *hs, struct smcr_client *cl)
{
	struct clc_hdr hdr;
	int len =
		clc_io_read(hs->fd, cl->rx, sizeof(cl->rx), &cl->rx_have, CLC_DECLINE_V1_LEN, &hdr);

	if (len == -EAGAIN)
		return SMCR_HS_AWAIT_ANSWER;
	cl->rx_have = 0;
	return smcr_hs_classify(hs, cl->rx, len, &hdr, CLC_ACCEPT, &cl->accept);
}

int smcr_clc_answer(struct smcr_hs *hs, struct smcr_client *cl, bool wait)
{
	int rc = CLC_RX_MSG;

	if (!cl->accepted) {
		rc = wait ? smcr_hs_recv(hs, cl->rx, sizeof(cl->rx), CLC_ACCEPT, &cl->accept,
					 smcr_hs_wait_ms(hs))
			  : client_read_answer(hs, cl);
		if (rc == SMCR_HS_AWAIT_ANSWER)
			return rc;
		cl->accepted = rc == CLC_RX_MSG;
	}
	if (rc == CLC_RX_MSG)
		rc = client_after_accept(hs, cl, wait);
	if (rc == SMCR_HS_AWAIT_LGR)
		return rc;
	return usmc_err_of_wire(smcr_hs_declined_or(hs, rc));
}

int smcr_clc_connect(struct smcr_hs *hs)
{
	struct smcr_client cl;
	int rc = smcr_clc_propose(hs, &cl);

	return rc ? rc : smcr_clc_answer(hs, &cl, true);
}
