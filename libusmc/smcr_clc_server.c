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

/* A connection on the reused link group: CONFIRM_RKEY, then the ACCEPT. */
static int reuse_accept(struct smcr_hs *hs, struct smcr_serve *st)
{
	struct lgr *lgr = st->sc->lgr;
	struct clc_accept_confirm m;
	int rc;

	if (smcr_clc_confirm_rkey(lgr, st->sc))
		return smcr_hs_decline(hs, SMC_CLC_DECL_ERR_REGBUF, false);
	smcr_clc_fill_ac(&m, CLC_ACCEPT, lgr, st->sc, false);
	memcpy(m.eid, st->neg.eid, CLC_EID_LEN);
	rc = smcr_clc_send_ac(hs->fd, &m);
	return rc ? rc : SMCR_HS_AWAIT_CONFIRM;
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
	smcr_clc_set_peer_rmb(st->sc, &conf);
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

static int serve_confirm_link(struct lgr *lgr, const struct serve_neg *n)
{
	struct llc_msg req = {.version = LLC_V2,
			      .type = LLC_CONFIRM_LINK,
			      .flags = LLC_FLAG_NO_RMBE_EYEC},
		       resp;
	const struct smcr_link *lnk = lgr_conn_link(lgr);

	memcpy(req.confirm_link.mac, lnk->dev.mac, SMCR_MAC_LEN);
	memcpy(req.confirm_link.gid, lnk->dev.gid, SMCR_GID_LEN);
	req.confirm_link.qpn = lnk->qp->qp_num;
	req.confirm_link.link_num = lnk->link_num;
	req.confirm_link.link_uid = lgr->id + lnk->link_num;
	req.confirm_link.max_links = n->release >= CLC_RELEASE_1 ? n->max_links : 2;
	req.confirm_link.max_conns = n->release >= CLC_RELEASE_1 ? n->max_conns : 0;
	return smcr_llc_flow(lgr, &req, &resp);
}

/* The client's CONFIRM arrived: bring the link up; 0 or the decline reason. */
static uint32_t serve_link_up(struct lgr *lgr, const struct clc_proposal *p,
			      const struct clc_accept_confirm *conf, const struct serve_neg *n)
{
	struct smcr_link *lnk = lgr_conn_link(lgr);

	if (smcr_link_qp_rtr(lnk, conf->qpn, conf->psn, p->roce_gid,
			     mtu_min(lnk->dev.active_mtu, conf->qp_mtu)) ||
	    smcr_link_qp_rts(lnk) || lgr_start(lgr))
		return SMC_CLC_DECL_ERR_RDYLNK;
	if (serve_confirm_link(lgr, n) || lgr_activate(lgr, lnk->link_num, n->max_conns))
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
	if (smcr_hs_conn_new(hs, st->lgr, &st->sc))
		return smcr_hs_decline(hs, SMC_CLC_DECL_MEM, false);
	smcr_clc_fill_ac(&m, CLC_ACCEPT, st->lgr, st->sc, true);
	memcpy(m.eid, st->neg.eid, CLC_EID_LEN);
	smcr_clc_fill_fce(&m.fce, st->neg.release, st->neg.max_conns, st->neg.max_links);
	rc = smcr_clc_send_ac(hs->fd, &m);
	return rc ? rc : SMCR_HS_AWAIT_CONFIRM;
}

/* The client's CONFIRM to a first-contact ACCEPT: bring the link up. */
static int first_contact_confirm(struct smcr_hs *hs, struct smcr_serve *st)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_accept_confirm conf;
	uint32_t reason;
	int rc = smcr_hs_recv(hs, buf, sizeof(buf), CLC_CONFIRM, &conf, smcr_hs_wait_ms(hs));
	long confirmed_ms = clock_now_ms();

	if (rc != CLC_RX_MSG)
		return smcr_hs_declined_or(hs, rc);
	reason = serve_check_confirm(&conf, &st->neg);
	if (reason)
		return smcr_hs_declined_or(hs, smcr_hs_decline(hs, reason, false));
	smcr_clc_set_peer_rmb(st->sc, &conf);
	reason = serve_link_up(st->lgr, &st->prop, &conf, &st->neg);
	if (reason == SMC_CLC_DECL_TIMEOUT_CL)
		return smcr_hs_declined_or(
			hs, smcr_hs_decline_unless_declined(hs, reason, confirmed_ms));
	if (reason)
		return smcr_hs_declined_or(hs, smcr_hs_decline(hs, reason, false));
	lgr_publish(st->lgr);
	st->lgr = NULL; /* published: the connection holds it now */
	return smcr_hs_established(hs, serve_take_conn(st));
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
	n->max_links = p->max_links < SMCR_MAX_LINKS ? p->max_links : SMCR_MAX_LINKS;
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

	st->claims_seen = lgr_claims_ended(hs->sctx); /* before the look: none missed */
	rc = lgr_claim(hs->sctx, &key, &cfg, retry ? 0 : smcr_hs_deadline(hs, claim_wait_ms(hs)),
		       &st->pending, &reuse);

	if (rc == -ETIMEDOUT && retry)
		return SMCR_HS_AWAIT_CLAIM;
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

int smcr_clc_serve_accept(struct smcr_hs *hs, struct smcr_serve *st)
{
	uint32_t reason;
	int rc;

	st->sctx = hs->sctx;
	reason = serve_negotiate(hs, &st->prop, &st->neg);
	if (!reason && smcr_hs_find_dev(hs, &st->dev))
		reason = SMC_CLC_DECL_NOSMCRDEV;
	if (reason)
		return usmc_err_of_wire(smcr_hs_decline(hs, reason, false));
	rc = serve_claim(hs, st);
	if (rc == SMCR_HS_AWAIT_CLAIM)
		return rc; /* nothing held yet */
	if (!rc)
		rc = smcr_serve_first_contact(st) ? first_contact_accept(hs, st)
						  : reuse_accept(hs, st);
	st->accepted = rc == SMCR_HS_AWAIT_CONFIRM;
	if (!st->accepted)
		smcr_clc_serve_abort(st);
	return usmc_err_of_wire(rc);
}

int smcr_clc_serve_confirm(struct smcr_hs *hs, struct smcr_serve *st)
{
	int rc = smcr_serve_first_contact(st) ? first_contact_confirm(hs, st)
					      : reuse_confirm(hs, st);

	smcr_clc_serve_abort(st); /* what the connection did not take */
	return usmc_err_of_wire(rc);
}

void smcr_clc_serve_abort(struct smcr_serve *st)
{
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
