// SPDX-License-Identifier: MIT
/*
 * The server's CLC handshake (smcr_clc.h; net/smc/af_smc.c
 * smc_listen_work(), smc_listen_rdma_*()): with the client's decoded
 * PROPOSAL, negotiate, claim a first contact or reuse a link group, send
 * the ACCEPT; then, in a second step (the listener may park the handshake
 * in between), the client's CONFIRM and the link.
 */
#include <errno.h>
#include <string.h>

#include "bufpool.h"
#include "clock.h"
#include "error.h"
#include "lgr.h"
#include "log.h"
#include "reason.h"
#include "smcr_clc.h"
#include "smcr_conn.h"

/* The server's connection, handed from @st to the handshake's answer. */
static struct smcr_conn *serve_take_conn(struct smcr_serve *st)
{
	struct smcr_conn *sc = st->sc;

	st->sc = NULL;
	return sc;
}

/* Server checks before any device work (net/smc/af_smc.c
 * smc_listen_v2_check(), smc_clc_srv_v2x_features_validate()); 0 or the
 * decline reason. */
static uint32_t serve_check(struct smcr_ctx *sctx, const struct clc_proposal *p, uint8_t *eid_idx)
{
	uint8_t ueid[SMCR_UEID_LEN];

	if (p->version < CLC_V2 || !p->has_v2_ext ||
	    (p->typev2 != CLC_TYPE_R && p->typev2 != CLC_TYPE_B))
		return SMC_CLC_DECL_NOSMCRDEV; /* v1 only: not offered by libusmc */
	if (!p->eid_count)
		return SMC_CLC_DECL_NOUEID;
	if (p->release >= CLC_RELEASE_1) {
		if (p->max_conns < SMCR_MIN_CONNS)
			return SMC_CLC_DECL_MAXCONNERR;
		if (p->max_links < 1)
			return SMC_CLC_DECL_MAXLINKERR;
	}
	smcr_ctx_ueid(sctx, ueid);
	for (uint8_t i = 0; i < p->eid_count; i++)
		if (!memcmp(p->eid[i], ueid, CLC_EID_LEN)) {
			*eid_idx = i;
			return 0;
		}
	return SMC_CLC_DECL_NOSMCDEV; /* as Linux: no common UEID */
}

/* The ACCEPT on the reused link group. */
static int reuse_send_accept(struct smcr_hs *hs, struct smcr_serve *st)
{
	struct clc_accept_confirm m;
	int rc;

	smcr_clc_fill_ac(&m, CLC_ACCEPT, st->sc->lgr, st->sc, false);
	memcpy(m.eid, st->neg.eid, CLC_EID_LEN);
	rc = smcr_clc_send_ac(hs->fd, &m);
	st->phase = SERVE_CONFIRM;
	st->wait_until_ms = hs->deadline_ms;
	return rc ? rc : SMCR_HS_AWAIT_READ;
}

/* Park until a handshake event of the context, at the latest @until_ms. */
static int await_event(struct smcr_serve *st, long until_ms)
{
	st->wait_until_ms = until_ms;
	return SMCR_HS_AWAIT_EVENT;
}

/*
 * A connection on the reused link group: CONFIRM_RKEY for its RMB unless
 * the peer holds the rkey already, then the ACCEPT (net/smc/af_smc.c
 * smc_listen_rdma_reg()). The flow runs as events: started when the link
 * group's flow is free, its answer taken when it came; neither waited for
 * past the handshake's deadline.
 */
static int reuse_rkey_step(struct smcr_hs *hs, struct smcr_serve *st)
{
	struct lgr *lgr = st->sc->lgr;
	struct llc_msg resp;
	int rc;

	st->events_seen = smcr_ctx_hs_events(st->sctx); /* before the look */
	if (!st->flow) {
		rc = smcr_clc_rkey_start(lgr, st->sc, &st->flow);
		if (rc == -EBUSY && clock_now_ms() < hs->deadline_ms)
			return await_event(st, hs->deadline_ms);
		if (rc == -EBUSY || rc < 0)
			return smcr_hs_decline(hs, SMC_CLC_DECL_ERR_REGBUF, false);
		if (!st->flow) /* the peer holds the rkey */
			return reuse_send_accept(hs, st);
		st->flow_due_ms = smcr_hs_deadline(hs, SMCR_LLC_FLOW_DUE_MS);
	}
	rc = smcr_llc_flow_result(lgr, st->flow, st->flow_due_ms, &resp);
	if (rc == -EAGAIN)
		return await_event(st, smcr_llc_flow_due(lgr, st->flow, st->flow_due_ms));
	st->flow = 0;
	if (smcr_clc_rkey_answered(st->sc, rc, &resp))
		return smcr_hs_decline(hs, SMC_CLC_DECL_ERR_REGBUF, false);
	return reuse_send_accept(hs, st);
}

/* The client's answer to a reuse ACCEPT. */
static int reuse_confirm(struct smcr_hs *hs, struct smcr_serve *st)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_accept_confirm conf;
	int rc = smcr_hs_recv(hs, buf, sizeof(buf), CLC_CONFIRM, &conf, smcr_hs_wait_ms(hs));

	/* the client has no such link group: ours is useless (net/smc/af_smc.c
	 * smc_listen_decline() -> smc_lgr_terminate_sched() on out-of-sync) */
	if (rc == CLC_RX_DECLINED_SYNC)
		lgr_terminate(st->sc->lgr, -ECONNABORTED, true);
	if (rc != CLC_RX_MSG)
		return smcr_hs_declined_or(hs, rc);
	/* Linux: smc_listen_rdma_finish() -> smc_rmb_rtoken_handling() */
	if (smcr_clc_set_peer_rmb(st->sc, &conf))
		return smcr_hs_declined_or(hs, smcr_hs_decline(hs, SMC_CLC_DECL_ERR_RTOK, false));
	return smcr_hs_established(hs, serve_take_conn(st));
}

/* First-contact CONFIRM must repeat what the ACCEPT negotiated. */
static uint32_t serve_check_confirm(const struct clc_accept_confirm *conf,
				    const struct serve_neg *n)
{
	if (!conf->first_contact)
		return SMC_CLC_DECL_SYNCERR;
	if (conf->fce.release != n->release)
		return SMC_CLC_DECL_RELEASEERR;
	if (n->release >= CLC_RELEASE_1 && conf->fce.max_conns != n->max_conns)
		return SMC_CLC_DECL_MAXCONNERR;
	if (n->release >= CLC_RELEASE_1 && conf->fce.max_links != n->max_links)
		return SMC_CLC_DECL_MAXLINKERR;
	return 0;
}

/* Send our CONFIRM_LINK on the new link (net/smc/af_smc.c
 * smcr_serv_conf_first_link()); its answer is an event. */
static int serve_confirm_link(struct lgr *lgr, const struct serve_neg *n, uint32_t *flow)
{
	struct llc_msg req = {
		.version = LLC_V2, .type = LLC_CONFIRM_LINK, .flags = LLC_FLAG_NO_RMBE_EYEC};
	const struct smcr_link *lnk = lgr_conn_link(lgr);

	memcpy(req.confirm_link.mac, lnk->dev.mac, SMCR_MAC_LEN);
	memcpy(req.confirm_link.gid, lnk->dev.gid, SMCR_GID_LEN);
	req.confirm_link.qpn = lnk->qp->qp_num;
	req.confirm_link.link_num = lnk->link_num;
	req.confirm_link.link_uid = lgr->id + lnk->link_num;
	req.confirm_link.max_links = n->release >= CLC_RELEASE_1 ? n->max_links : 2;
	req.confirm_link.max_conns = n->release >= CLC_RELEASE_1 ? n->max_conns : 0;
	return smcr_llc_flow_start(lgr, &req, flow);
}

/* The client's CONFIRM arrived: bring the link up and send our
 * CONFIRM_LINK; 0 or the decline reason. */
static uint32_t serve_link_up(struct smcr_serve *st, const struct clc_accept_confirm *conf)
{
	struct smcr_link *lnk = lgr_conn_link(st->lgr);

	if (smcr_link_qp_rtr(lnk, conf->qpn, conf->psn, st->prop.roce_gid,
			     mtu_min(lnk->dev.active_mtu, conf->qp_mtu)) ||
	    smcr_link_qp_rts(lnk) || lgr_start(st->lgr))
		return SMC_CLC_DECL_ERR_RDYLNK;
	if (serve_confirm_link(st->lgr, &st->neg, &st->flow))
		return SMC_CLC_DECL_TIMEOUT_CL;
	return 0;
}

/* A first contact: a new link group and connection, then the ACCEPT. */
static int first_contact_accept(struct smcr_hs *hs, struct smcr_serve *st)
{
	struct lgr_config cfg = smcr_clc_lgr_config(hs->opts);
	struct clc_accept_confirm m;
	int rc;

	if (lgr_create(hs->sctx, &smcr_conn_lgr_ops, &cfg, true, &st->dev, &st->lgr))
		return smcr_hs_decline(hs, SMC_CLC_DECL_MEM, false);
	lgr_set_peer(st->lgr, st->prop.peer_id, st->prop.mac, st->neg.peer_addr);
	/* a v2.0 client negotiates none: Linux's then takes an ADD_LINK (2) */
	st->lgr->max_links = st->neg.release >= CLC_RELEASE_1 ? st->neg.max_links : 1;
	if (smcr_hs_conn_new(hs, st->lgr, &st->sc))
		return smcr_hs_decline(hs, SMC_CLC_DECL_MEM, false);
	smcr_clc_fill_ac(&m, CLC_ACCEPT, st->lgr, st->sc, true);
	memcpy(m.eid, st->neg.eid, CLC_EID_LEN);
	smcr_clc_fill_fce(&m.fce, st->neg.release, st->neg.max_conns, st->neg.max_links);
	rc = smcr_clc_send_ac(hs->fd, &m);
	st->phase = SERVE_CONFIRM;
	st->wait_until_ms = hs->deadline_ms;
	return rc ? rc : SMCR_HS_AWAIT_READ;
}

/* The first bytes the client sent since its CONFIRM_LINK failed: its
 * DECLINE taken (CLC_RX_DECLINED*), 0 if it is on TCP already (its data),
 * -ETIMEDOUT if nothing whole yet, or an error. Never waits. */
static int look_for_decline(struct smcr_hs *hs)
{
	return smcr_hs_await_decline(hs, 0);
}

/* After the client's DECLINE window: ours, then a crossing one. */
static int cross_decline_step(struct smcr_hs *hs, struct smcr_serve *st)
{
	int rc = look_for_decline(hs);

	if (rc == -ETIMEDOUT && clock_now_ms() < st->wait_until_ms)
		return SMCR_HS_AWAIT_READ;
	if (smcr_hs_rx_declined(rc))
		usmc_log(hs->sctx->log, USMC_LOG_INFO,
			 "CLC: %s's DECLINE crossed ours: taken, not the application's",
			 log_peer(hs->fd).s);
	else if (rc < 0 && rc != -ETIMEDOUT)
		return rc;
	return smcr_hs_tcp(hs, SMC_CLC_DECL_TIMEOUT_CL, false);
}

/* The client's DECLINE, if it comes within CLC_WAIT_SHORT_MS; else ours. */
static int peer_decline_step(struct smcr_hs *hs, struct smcr_serve *st)
{
	int rc = look_for_decline(hs);

	if (smcr_hs_rx_declined(rc))
		return SMCR_HS_TCP;
	if (!rc)
		return smcr_hs_tcp(hs, SMC_CLC_DECL_TIMEOUT_CL, false);
	if (rc != -ETIMEDOUT)
		return rc;
	if (clock_now_ms() < st->wait_until_ms)
		return SMCR_HS_AWAIT_READ;
	rc = smcr_hs_decline(hs, SMC_CLC_DECL_TIMEOUT_CL, false);
	if (rc != SMCR_HS_TCP)
		return rc;
	st->phase = SERVE_CROSS_DECLINE;
	st->wait_until_ms =
		smcr_hs_deadline(hs, st->confirmed_ms + SMCR_SRV_CROSS_WAIT_MS - clock_now_ms());
	return cross_decline_step(hs, st);
}

/*
 * A first contact's CONFIRM_LINK failed (docs/smcr.md "A failed first
 * contact"): exactly one DECLINE goes, the server's, and none lands in an
 * application's stream. Linux's client gives up after 2 x SMC_LLC_WAIT_TIME
 * plus CLC_WAIT_TIME_SHORT (net/smc/af_smc.c smcr_clnt_conf_first_link())
 * and declines itself; ours never does (smcr_hs_await_server_decline()).
 * So: the client's DECLINE is taken if it comes within CLC_WAIT_SHORT_MS
 * (as smcr_serv_conf_first_link() waits), else ours goes, long before that
 * client gives up; and if ours was held in the network past its bound, the
 * client's DECLINE crosses it and is taken until SMCR_SRV_CROSS_WAIT_MS
 * after the CONFIRM, never left for the application. The first bytes that
 * are not a DECLINE are the client's data: it is on TCP already. Each wait
 * is a parked step (SMCR_HS_AWAIT_READ), not a worker's.
 */
static int decline_first_contact(struct smcr_hs *hs, struct smcr_serve *st)
{
	smcr_clc_serve_abort(st); /* the link group is of no use now */
	st->phase = SERVE_PEER_DECLINE;
	st->wait_until_ms = smcr_hs_deadline(hs, CLC_WAIT_SHORT_MS);
	return peer_decline_step(hs, st);
}

/* Our CONFIRM_LINK's answer: the link group is up, or the first contact
 * failed. */
static int confirm_link_step(struct smcr_hs *hs, struct smcr_serve *st)
{
	struct llc_msg resp;
	int rc;

	st->events_seen = smcr_ctx_hs_events(st->sctx); /* before the look */
	rc = smcr_llc_flow_result(st->lgr, st->flow, st->flow_due_ms, &resp);
	if (rc == -EAGAIN)
		return await_event(st, smcr_llc_flow_due(st->lgr, st->flow, st->flow_due_ms));
	st->flow = 0;
	if (rc || lgr_activate(st->lgr, lgr_conn_link(st->lgr)->link_num, st->neg.max_conns))
		return decline_first_contact(hs, st);
	lgr_publish(st->lgr);
	smcr_llc_add_link_start(st->lgr); /* a second link, if both ends allow it */
	st->lgr = NULL;			  /* published: the connection holds it now */
	return smcr_hs_established(hs, serve_take_conn(st));
}

/* The client's CONFIRM to a first-contact ACCEPT: bring the link up. */
static int first_contact_confirm(struct smcr_hs *hs, struct smcr_serve *st)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_accept_confirm conf;
	uint32_t reason;
	int rc = smcr_hs_recv(hs, buf, sizeof(buf), CLC_CONFIRM, &conf, smcr_hs_wait_ms(hs));

	if (rc != CLC_RX_MSG)
		return smcr_hs_declined_or(hs, rc);
	st->confirmed_ms = clock_now_ms();
	reason = serve_check_confirm(&conf, &st->neg);
	if (reason)
		return smcr_hs_declined_or(hs, smcr_hs_decline(hs, reason, false));
	/* a first contact's table is empty: this never fails */
	reason = smcr_clc_set_peer_rmb(st->sc, &conf) ? SMC_CLC_DECL_ERR_RTOK : 0;
	if (!reason)
		reason = serve_link_up(st, &conf);
	if (reason == SMC_CLC_DECL_TIMEOUT_CL)
		return decline_first_contact(hs, st);
	if (reason)
		return smcr_hs_declined_or(hs, smcr_hs_decline(hs, reason, false));
	st->phase = SERVE_CONFIRM_LINK;
	st->flow_due_ms = smcr_hs_deadline(hs, SMCR_LLC_WAIT_MS);
	return confirm_link_step(hs, st);
}

/* Negotiate release, limits and UEID from the PROPOSAL; 0 or a reason. */
static uint32_t serve_negotiate(struct smcr_hs *hs, const struct clc_proposal *p,
				struct serve_neg *n)
{
	uint8_t eid_idx = 0;
	uint32_t reason = serve_check(hs->sctx, p, &eid_idx);

	/* a host without any SMC-R device says so first (Linux would name
	 * a UEID mismatch first; the device is the more useful answer) */
	if (!hs->have_device)
		return SMC_CLC_DECL_NOSMCRDEV;
	if (reason)
		return reason;
	if (smcr_hs_peer_ipv4(hs, &n->peer_addr))
		return SMC_CLC_DECL_NOSMCRDEV; /* an IPv6 client: no SMC-Rv2 GID */
	if (!smcr_clc_gid_is_addr(p->roce_gid, n->peer_addr))
		return SMC_CLC_DECL_DIFFPREFIX;
	n->release = p->release > SMCR_RELEASE ? SMCR_RELEASE : p->release;
	n->max_conns = p->max_conns < SMCR_MAX_CONNS ? p->max_conns : SMCR_MAX_CONNS;
	n->max_links = smcr_clc_max_links(hs->opts);
	if (p->max_links < n->max_links)
		n->max_links = p->max_links;
	n->eid = p->eid[eid_idx];
	return 0;
}

/* How long a handshake waits for another one's first contact with the same
 * peer: its CLC wait, then its CONFIRM_LINK. */
static long claim_wait_ms(const struct smcr_hs *hs)
{
	return hs->opts->v[USMC_OPT_CLC_TIMEOUT_MS] + SMCR_LLC_WAIT_MS;
}

/*
 * Reuse a link group with this peer, or claim the first contact. Only
 * handshakes with the same peer wait for each other (lgr_claim()); past the
 * caps the client is declined (MEM) and falls back to TCP. 0, or how the
 * handshake ended.
 */
static int serve_claim(struct smcr_hs *hs, struct smcr_serve *st)
{
	struct lgr_config cfg = smcr_clc_lgr_config(hs->opts);
	struct lgr_key key = {.role = SMCR_ROLE_SERVER,
			      .peer_id = st->prop.peer_id,
			      .peer_gid = st->prop.roce_gid,
			      .peer_addr = st->neg.peer_addr};
	struct lgr *reuse = NULL;
	/* a listener's handshake (it has a deadline) does not wait on its
	 * worker for another one's first contact with the same peer: it asks
	 * without waiting and the listener retries it (the first contact may
	 * itself wait for a worker to take its CONFIRM) */
	bool retry = hs->deadline_ms && clock_now_ms() < hs->deadline_ms;
	int rc;

	st->events_seen = smcr_ctx_hs_events(hs->sctx); /* before the look: none missed */
	rc = lgr_claim(hs->sctx, &key, &cfg, retry ? 0 : smcr_hs_deadline(hs, claim_wait_ms(hs)),
		       &st->pending, &reuse);

	if (rc == -ETIMEDOUT && retry)
		return await_event(st, hs->deadline_ms);
	if (rc)
		return smcr_hs_decline(
			hs, rc == -EUSERS ? SMC_CLC_DECL_MEM : SMC_CLC_DECL_TIMEOUT_CL, false);
	if (!reuse) {
		st->claimed = true;
		return 0;
	}
	rc = smcr_hs_conn_new(hs, reuse, &st->sc);
	lgr_put(reuse); /* the connection holds its own reference */
	return rc ? smcr_hs_decline(hs, SMC_CLC_DECL_MEM, false) : 0;
}

bool smcr_serve_first_contact(const struct smcr_serve *st)
{
	return st->claimed;
}

/* The link group @st's LLC flow runs on. */
static struct lgr *serve_lgr(const struct smcr_serve *st)
{
	return st->lgr ? st->lgr : st->sc->lgr;
}

bool smcr_serve_event_ready(const struct smcr_serve *st)
{
	if (st->flow)
		return smcr_llc_flow_settled(serve_lgr(st), st->flow);
	return st->events_seen != smcr_ctx_hs_events(st->sctx);
}

/* Negotiate, then claim a first contact or reuse a link group. No ACCEPT
 * leaves past the deadline: its link group would be built for a client
 * that has given up. */
static int serve_new(struct smcr_hs *hs, struct smcr_serve *st)
{
	uint32_t reason = serve_negotiate(hs, &st->prop, &st->neg);
	int rc;

	if (!reason && smcr_hs_find_dev(hs, &st->dev))
		reason = SMC_CLC_DECL_NOSMCRDEV;
	if (!reason && hs->deadline_ms && clock_now_ms() >= hs->deadline_ms)
		reason = SMC_CLC_DECL_TIMEOUT_CL;
	if (reason)
		return smcr_hs_decline(hs, reason, false);
	rc = serve_claim(hs, st);
	if (rc)
		return rc; /* SMCR_HS_AWAIT_EVENT (nothing held yet), or it ended */
	if (smcr_serve_first_contact(st))
		return first_contact_accept(hs, st);
	st->phase = SERVE_RKEY;
	return reuse_rkey_step(hs, st);
}

/* The step @st is at. */
static int serve_phase(struct smcr_hs *hs, struct smcr_serve *st)
{
	switch (st->phase) {
	case SERVE_NEW:
		return serve_new(hs, st);
	case SERVE_RKEY:
		return reuse_rkey_step(hs, st);
	case SERVE_CONFIRM:
		return smcr_serve_first_contact(st) ? first_contact_confirm(hs, st)
						    : reuse_confirm(hs, st);
	case SERVE_CONFIRM_LINK:
		return confirm_link_step(hs, st);
	case SERVE_PEER_DECLINE:
		return peer_decline_step(hs, st);
	case SERVE_CROSS_DECLINE:
		return cross_decline_step(hs, st);
	}
	return -EINVAL;
}

int smcr_clc_serve(struct smcr_hs *hs, struct smcr_serve *st)
{
	int rc;

	st->sctx = hs->sctx;
	rc = serve_phase(hs, st);
	st->waits_event = rc == SMCR_HS_AWAIT_EVENT;
	if (rc != SMCR_HS_AWAIT_READ && rc != SMCR_HS_AWAIT_EVENT)
		smcr_clc_serve_abort(st); /* what the connection did not take */
	return usmc_err_of_wire(rc);
}

void smcr_clc_serve_abort(struct smcr_serve *st)
{
	if (st->flow)
		smcr_llc_flow_abandon(serve_lgr(st), st->flow);
	st->flow = 0;
	if (st->sc)
		smcr_conn_discard(st->sc);
	st->sc = NULL;
	if (st->lgr)
		lgr_free(st->lgr);
	st->lgr = NULL;
	if (st->claimed)
		lgr_unclaim(st->sctx, &st->pending);
	st->claimed = false;
}
