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
#include <pthread.h>
#include <stdatomic.h>
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

static void build_proposal(struct smcr_ctx *sctx, const struct usmc_opts *opts,
			   const struct smcr_dev *dev, struct clc_proposal *p)
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
	p->max_links = smcr_clc_max_links(opts);
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
static int client_send_confirm(const struct smcr_hs *hs, struct lgr *lgr, struct smcr_conn *sc,
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
	/* release 0 negotiates none: we take a second link only if asked to */
	lgr->max_links =
		a->fce.release >= CLC_RELEASE_1 ? a->fce.max_links : smcr_clc_max_links(hs->opts);
	if (smcr_hs_conn_new(hs, lgr, sc) ||
	    smcr_link_qp_rtr(lnk, a->qpn, a->psn, a->gid,
			     mtu_min(lnk->dev.active_mtu, a->qp_mtu)) ||
	    lgr_start(lgr))
		return SMC_CLC_DECL_MEM;
	return smcr_clc_set_peer_rmb(*sc, a) ? SMC_CLC_DECL_ERR_RTOK : 0;
}

/* Phase @ph of the handshake after the ACCEPT, due @ms from now. */
static void phase_begin(struct smcr_client *cl, int ph, long ms)
{
	cl->phase = ph;
	cl->due_ms = clock_now_ms() + ms;
}

/* Milliseconds left of the phase, at least 0. */
static int phase_left_ms(const struct smcr_client *cl)
{
	long left = cl->due_ms - clock_now_ms();

	return left > 0 ? (int)left : 0;
}

/* A look that found nothing (@rc -ETIMEDOUT) while the phase is not over:
 * a client that does not wait comes back (SMCR_HS_AWAIT_LGR). */
static bool phase_pending(const struct smcr_client *cl, bool wait, int rc)
{
	return !wait && rc == -ETIMEDOUT && clock_now_ms() < cl->due_ms;
}

/* The connection the handshake set up, handed to its answer. */
static struct smcr_conn *client_take_conn(struct smcr_client *cl)
{
	struct smcr_conn *sc = cl->sc;

	cl->sc = NULL;
	return sc;
}

/*
 * The handshake's own thread, not waiting: the verbs set-up and teardown
 * of a link group take milliseconds of system calls (tens in an emulated
 * guest), which an event loop's call must not spend. It runs one job at a
 * time; the calls look whether it is done.
 * client_thread_start() - run @job on @cl; false if no thread could be
 * started (then the caller does the job itself).
 * client_thread_done() - its job is over (and joined), or none runs.
 */
static bool client_thread_start(struct smcr_client *cl, void *(*job)(void *))
{
	atomic_store(&cl->setup_done, false);
	cl->setup_running = !pthread_create(&cl->setup_th, NULL, job, cl);
	return cl->setup_running;
}

static bool client_thread_done(struct smcr_client *cl)
{
	if (!cl->setup_running)
		return true;
	if (!atomic_load_explicit(&cl->setup_done, memory_order_acquire))
		return false;
	pthread_join(cl->setup_th, NULL);
	cl->setup_running = false;
	return true;
}

/* The connection and link group a failed first contact set up, freed. */
static void client_release_link(struct smcr_client *cl)
{
	if (cl->sc)
		smcr_conn_discard(cl->sc);
	cl->sc = NULL;
	if (cl->lgr)
		lgr_free(cl->lgr);
	cl->lgr = NULL;
}

static void *client_release_thread(void *arg)
{
	struct smcr_client *cl = arg;

	client_release_link(cl);
	atomic_store_explicit(&cl->setup_done, true, memory_order_release);
	return NULL;
}

/* The server's CONFIRM_LINK did not come: it cannot have had our answer,
 * so it declines; take its DECLINE (smcr_hs_await_server_decline()). */
static int client_decline_step(struct smcr_hs *hs, struct smcr_client *cl, bool wait)
{
	int rc = smcr_hs_await_decline(hs, wait ? phase_left_ms(cl) : 0);

	if (phase_pending(cl, wait, rc))
		return SMCR_HS_AWAIT_LGR;
	return smcr_hs_server_declined(hs, SMC_CLC_DECL_TIMEOUT_CL, rc);
}

/* The server's CONFIRM_LINK: answer it, and the link group is up
 * (net/smc/af_smc.c smcr_clnt_conf_first_link()). */
static int client_link_step(struct smcr_hs *hs, struct smcr_client *cl, bool wait)
{
	const struct clc_accept_confirm *a = &cl->accept;
	struct llc_msg req;
	int rc = smcr_llc_wait_confirm_link(cl->lgr, wait ? phase_left_ms(cl) : 0, &req);

	if (phase_pending(cl, wait, rc))
		return SMCR_HS_AWAIT_LGR;
	if (rc) {
		/* the link group is of no use now; not waiting, its teardown
		 * (verbs objects, its thread) runs on the handshake's thread */
		phase_begin(cl, CL_SERVER_DECLINE, SMCR_CL_DECLINE_WAIT_MS);
		if (!wait && client_thread_start(cl, client_release_thread))
			return SMCR_HS_AWAIT_LGR;
		client_release_link(cl);
		return client_decline_step(hs, cl, wait);
	}
	if (!(req.flags & LLC_FLAG_NO_RMBE_EYEC))
		return smcr_hs_decline(hs, SMC_CLC_DECL_RMBE_EC, false);
	if (smcr_link_qp_rts(lgr_conn_link(cl->lgr)))
		return smcr_hs_decline(hs, SMC_CLC_DECL_TIMEOUT_CL, false);
	rc = client_confirm_link_resp(cl->lgr, &req);
	if (!rc)
		rc = lgr_activate(cl->lgr, req.confirm_link.link_num,
				  cl->release >= CLC_RELEASE_1 ? a->fce.max_conns : SMCR_MAX_CONNS);
	if (rc)
		return rc;
	lgr_publish(cl->lgr);
	cl->lgr = NULL; /* published: the connection holds it now */
	return smcr_hs_established(hs, client_take_conn(cl));
}

/* The new link group, its QP toward the server and our connection, then
 * the CONFIRM: local work (verbs objects, buffer registration), no wait
 * for the server. 0, a decline reason (positive), or a negative error. */
static int client_fc_setup(const struct smcr_hs *hs, struct smcr_client *cl)
{
	struct lgr_config cfg = smcr_clc_lgr_config(hs->opts);
	uint32_t reason;

	if (lgr_create(hs->sctx, &smcr_conn_lgr_ops, &cfg, false, &cl->dev, &cl->lgr))
		return (int)SMC_CLC_DECL_MEM;
	reason = client_link_up(cl->lgr, &cl->accept, cl->server, &cl->sc, hs);
	if (reason)
		return (int)reason;
	return client_send_confirm(hs, cl->lgr, cl->sc, &cl->accept, cl->release);
}

/* The first contact's set-up ended with @rc (client_fc_setup()): the
 * server's CONFIRM_LINK next. */
static int client_fc_set_up(struct smcr_hs *hs, struct smcr_client *cl, bool wait, int rc)
{
	if (rc > 0)
		return smcr_hs_decline(hs, (uint32_t)rc, false);
	if (rc)
		return rc;
	phase_begin(cl, CL_CONFIRM_LINK, SMCR_CL_WAIT_MS);
	return client_link_step(hs, cl, wait);
}

static void *client_fc_setup_thread(void *arg)
{
	struct smcr_client *cl = arg;

	cl->setup_rc = client_fc_setup(cl->setup_hs, cl);
	atomic_store_explicit(&cl->setup_done, true, memory_order_release);
	return NULL;
}

/* CL_SETUP, its thread's job done: the set-up's result. */
static int client_fc_setup_step(struct smcr_hs *hs, struct smcr_client *cl, bool wait)
{
	return client_fc_set_up(hs, cl, wait, cl->setup_rc);
}

/* A first contact: a new link group (within the caps), its QP, the
 * CONFIRM, then the server's CONFIRM_LINK. */
static int client_first_contact(struct smcr_hs *hs, struct smcr_client *cl, bool wait,
				const struct lgr_key *key)
{
	const struct clc_accept_confirm *a = &cl->accept;
	struct lgr_config cfg = smcr_clc_lgr_config(hs->opts);
	uint32_t reason = client_check_fc(a, cl->server);

	if (reason)
		return smcr_hs_decline(hs, reason, false);
	cl->release = a->fce.release > SMCR_RELEASE ? SMCR_RELEASE : a->fce.release;
	/* the server decides first contact: no lock, only the caps */
	if (lgr_reserve(hs->sctx, key, &cfg, &cl->pending))
		return smcr_hs_decline(hs, SMC_CLC_DECL_MEM, false);
	cl->reserved = true;
	phase_begin(cl, CL_SETUP, SMCR_CL_WAIT_MS);
	cl->setup_hs = hs;
	if (!wait && client_thread_start(cl, client_fc_setup_thread))
		return SMCR_HS_AWAIT_LGR;
	return client_fc_set_up(hs, cl, wait, client_fc_setup(hs, cl));
}

/* Not waiting: our CONFIRM_RKEY's flow started when the link group's flow
 * is free, its answer taken when it came. -EAGAIN while neither is over. */
static int client_rkey_async(struct smcr_client *cl)
{
	struct lgr *lgr = cl->sc->lgr;
	struct llc_msg resp;
	int rc;

	if (!cl->flow) {
		rc = smcr_clc_rkey_start(lgr, cl->sc, &cl->flow);
		if (rc == -EBUSY && clock_now_ms() < cl->due_ms)
			return -EAGAIN;
		if (rc || !cl->flow)
			return rc;
		cl->due_ms = clock_now_ms() + SMCR_LLC_FLOW_DUE_MS;
	}
	rc = smcr_llc_flow_result(lgr, cl->flow, cl->due_ms, &resp);
	if (rc == -EAGAIN)
		return rc;
	cl->flow = 0;
	return smcr_clc_rkey_answered(cl->sc, rc, &resp);
}

/* Reuse: CONFIRM_RKEY for our RMB unless the server holds its rkey, then
 * the CONFIRM. */
static int client_rkey_step(struct smcr_hs *hs, struct smcr_client *cl, bool wait)
{
	struct clc_accept_confirm m;
	int rc = wait ? smcr_clc_confirm_rkey(cl->sc->lgr, cl->sc) : client_rkey_async(cl);

	if (rc == -EAGAIN)
		return SMCR_HS_AWAIT_LGR;
	if (rc)
		return smcr_hs_decline(hs, SMC_CLC_DECL_ERR_REGBUF, false);
	smcr_clc_fill_ac(&m, CLC_CONFIRM, cl->sc->lgr, cl->sc, false);
	memcpy(m.eid, cl->accept.eid, CLC_EID_LEN);
	rc = smcr_clc_send_ac(hs->fd, &m);
	return rc ? rc : smcr_hs_established(hs, client_take_conn(cl));
}

/* Reuse @lgr (from lgr_find_wait(), NULL if none: out of sync). */
static int client_reuse(struct smcr_hs *hs, struct smcr_client *cl, bool wait, struct lgr *lgr)
{
	int rc, slot;

	if (!lgr)
		return smcr_hs_decline(hs, SMC_CLC_DECL_SYNCERR, true);
	slot = lgr_link_of_peer(lgr, cl->accept.qpn, cl->accept.gid);
	rc = slot < 0 ? 0 : smcr_hs_conn_new(hs, lgr, &cl->sc);
	lgr_put(lgr);
	if (slot < 0) /* the link it named went down since it was found */
		return smcr_hs_decline(hs, SMC_CLC_DECL_SYNCERR, true);
	if (rc)
		return smcr_hs_decline(hs, SMC_CLC_DECL_MEM, false);
	smcr_conn_use_link(cl->sc, slot);
	/* Linux: smc_connect_rdma() -> smc_rmb_rtoken_handling() */
	if (smcr_clc_set_peer_rmb(cl->sc, &cl->accept))
		return smcr_hs_decline(hs, SMC_CLC_DECL_ERR_RTOK, false);
	/* Linux waits up to 20 s for a running flow (SMC_LLC_WAIT_FIRST_TIME) */
	phase_begin(cl, CL_RKEY, SMCR_FLOW_WAIT_MS);
	return client_rkey_step(hs, cl, wait);
}

/* The phase after the ACCEPT that was not over. */
static int client_phase_step(struct smcr_hs *hs, struct smcr_client *cl, bool wait)
{
	if (!client_thread_done(cl))
		return SMCR_HS_AWAIT_LGR; /* its set-up or teardown still runs */
	switch (cl->phase) {
	case CL_SETUP:
		return client_fc_setup_step(hs, cl, wait);
	case CL_RKEY:
		return client_rkey_step(hs, cl, wait);
	case CL_CONFIRM_LINK:
		return client_link_step(hs, cl, wait);
	case CL_SERVER_DECLINE:
		return client_decline_step(hs, cl, wait);
	case CL_LGR:
		break;
	}
	return -EINVAL;
}

/* After the ACCEPT: a new link group (within the caps), or the one it
 * names. SMCR_HS_AWAIT_LGR (without @wait only): a first contact of ours
 * with that server is still setting up the link group named, or an LLC
 * step is not over. */
static int client_after_accept(struct smcr_hs *hs, struct smcr_client *cl, bool wait)
{
	const struct clc_accept_confirm *a = &cl->accept;
	struct lgr_key key = {.role = SMCR_ROLE_CLIENT,
			      .peer_id = a->peer_id,
			      .peer_gid = a->gid,
			      .peer_addr = cl->server,
			      .peer_qpn = a->qpn,
			      .match_qpn = true};
	struct lgr *lgr;
	bool busy;

	if (cl->due_ms && cl->phase != CL_LGR) /* a phase that was not over */
		return client_phase_step(hs, cl, wait);
	if (a->first_contact)
		return client_first_contact(hs, cl, wait, &key);
	if (!cl->due_ms)
		phase_begin(cl, CL_LGR, CLIENT_REUSE_WAIT_MS);
	/* waits (or asks again) only while a first contact with that server
	 * is in progress: only it can still publish the link group; else it
	 * is out of sync at once */
	lgr = lgr_find_wait(hs->sctx, &key, wait ? cl->due_ms : 0, &busy);
	if (!lgr && busy && !wait && clock_now_ms() < cl->due_ms)
		return SMCR_HS_AWAIT_LGR;
	return client_reuse(hs, cl, wait, lgr);
}

void smcr_clc_client_abort(struct smcr_client *cl)
{
	if (cl->setup_running) /* closed while its link group is set up or freed */
		pthread_join(cl->setup_th, NULL);
	cl->setup_running = false;
	if (cl->flow)
		smcr_llc_flow_abandon(cl->sc->lgr, cl->flow);
	cl->flow = 0;
	client_release_link(cl);
	if (cl->reserved)
		lgr_unclaim(cl->sctx, &cl->pending);
	cl->reserved = false;
}

int smcr_clc_propose(struct smcr_hs *hs, struct smcr_client *cl)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_proposal p;
	int len;

	memset(cl, 0, sizeof(*cl));
	cl->sctx = hs->sctx;
	/* no device: not a byte of CLC, the server sees a TCP client */
	if (smcr_hs_find_dev(hs, &cl->dev) || smcr_hs_peer_ipv4(hs, &cl->server)) {
		hs->reason = USMC_REASON_NOSMCRDEV;
		return SMCR_HS_NODEV;
	}
	build_proposal(hs->sctx, hs->opts, &cl->dev, &p);
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
	smcr_clc_client_abort(cl); /* what the connection did not take */
	return usmc_err_of_wire(smcr_hs_declined_or(hs, rc));
}

int smcr_clc_connect(struct smcr_hs *hs)
{
	struct smcr_client cl;
	int rc = smcr_clc_propose(hs, &cl);

	return rc ? rc : smcr_clc_answer(hs, &cl, true);
}
