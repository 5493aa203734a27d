// SPDX-License-Identifier: MIT
/*
 * Adding a link to a link group (smcr_llc.h), as net/smc/smc_llc.c
 * smc_llc_srv_add_link() and smc_llc_cli_add_link() do on an SMC-Rv2 link
 * group:
 *
 *   server                                     client
 *   new link on another port (QP in INIT)
 *   ADD_LINK (its QP, GID, MAC, PSN, MTU;
 *     v2: our RMBs' rkeys on the new link) -->
 *                                              new link on another port,
 *                                              QP to RTR and RTS
 *                                          <-- ADD_LINK response (its QP ...,
 *                                              its RMBs' rkeys)
 *   QP to RTR and RTS
 *   CONFIRM_LINK on the new link            ==>
 *                                          <== CONFIRM_LINK response
 *   both: the link ACTIVE
 *
 * The server starts it once a first contact's link group is up, when
 * both ends allow two links (USMC_OPT_MAX_LINKS, the CLC v2.1 max_links).
 * Each end runs its part on a thread of its own (the link's verbs set-up
 * takes milliseconds in a guest; a handshake worker or the progress
 * thread must not wait for it) and each wait has the LLC deadline,
 * SMCR_LLC_WAIT_MS. A link that does not come up is dropped, and the
 * link group goes on with the links it has.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lgr.h"
#include "lgr_int.h"
#include "log.h"
#include "smcr_clc.h"
#include "smcr_conn.h"
#include "smcr_llc.h"
#include "thread_name.h"

/* The peer's part of a link: from its ADD_LINK or its response. */
static int link_ready(struct smcr_link *lnk, const struct llc_add_link *peer)
{
	int rc;

	memcpy(lnk->peer_mac, peer->mac, SMCR_MAC_LEN);
	rc = smcr_link_qp_rtr(lnk, peer->qpn, peer->psn, peer->gid,
			      mtu_min(lnk->dev.active_mtu, peer->qp_mtu));
	return rc ? rc : smcr_link_qp_rts(lnk);
}

/*
 * Our half of an ADD_LINK (request or accepting response) for @lnk: the
 * new QP, and the rkey of each of our RMBs the peer may write into on
 * the new link, each named by its rkey on the link the message goes over,
 * in slot @via (v2 extension; Linux: smc_llc_fill_ext_v2()).
 */
static void add_link_fill(struct lgr *lgr, struct smcr_link *lnk, int via, struct llc_msg *m)
{
	struct smcr_conn *list[SMCR_MAX_CONNS];
	int slot = lgr_link_slot(lgr, lnk);
	int n = lgr_conns_get(lgr, list);
	struct llc_add_link *a = &m->add_link;

	m->version = LLC_V2;
	m->type = LLC_ADD_LINK;
	memcpy(a->mac, lnk->dev.mac, SMCR_MAC_LEN);
	memcpy(a->gid, lnk->dev.gid, SMCR_GID_LEN);
	a->qpn = lnk->qp->qp_num;
	a->link_num = lnk->link_num;
	a->qp_mtu = (uint8_t)lnk->dev.active_mtu;
	a->psn = lnk->psn;
	a->has_ext = true;
	memcpy(a->client_target_gid, lnk->dev.gid, SMCR_GID_LEN);
	a->num_rkeys = 0;
	for (int i = 0; i < n; i++) {
		const struct bufpool_buf *rmb = list[i]->rmb;

		if (a->num_rkeys < LLC_V2_MAX_RKEYS)
			a->rkeys[a->num_rkeys++] =
				(struct llc_add_link_rkey){.rkey = bufpool_buf_rkey(rmb, via),
							   .rkey_new = bufpool_buf_rkey(rmb, slot),
							   .vaddr_new = (uintptr_t)rmb->addr};
		lgr->ops->put(list[i]);
	}
}

/*
 * The peer's RMBs on the new link, from its ADD_LINK's rkey list: each
 * entry names an RMB by its rkey on the link the message came over (@via)
 * and gives its rkey and address on the new one (Linux:
 * smc_llc_save_add_link_rkeys() -> smc_rtoken_set()). An rkey we do not
 * know is skipped, as Linux does: a connection of that RMB cannot move to
 * the new link then (sc_switch_link() fails it).
 */
static void peer_rkeys(struct lgr *lgr, int via, struct smcr_link *lnk,
		       const struct llc_add_link *a)
{
	int slot = lgr_link_slot(lgr, lnk);

	for (int i = 0; i < a->num_rkeys && i < LLC_V2_MAX_RKEYS; i++)
		lgr_rtoken_set_known(&lgr->rtok, via, a->rkeys[i].rkey, slot, a->rkeys[i].rkey_new,
				     a->rkeys[i].vaddr_new);
}

/* The link is confirmed: ACTIVE, said once. */
static int link_up(struct lgr *lgr, struct smcr_link *lnk)
{
	if (!smcr_link_activate(lnk))
		return -ECONNABORTED;
	smcr_ctx_count_link_event(lgr->sctx, SMCR_LINK_ADDED, 1);
	usmc_log(lgr->sctx->log, USMC_LOG_INFO,
		 "link group %x: link %u up: %s:%u, qp %u <-> peer qp %u (%d links)", lgr->id,
		 lnk->link_num, lnk->dev.name, lnk->dev.port, lnk->qp->qp_num, lnk->peer_qpn,
		 lgr_links_active(lgr));
	return 0;
}

/* Our CONFIRM_LINK on the new link and its answer (Linux:
 * smc_llc_srv_conf_link()). */
static int srv_confirm_link(struct lgr *lgr, struct smcr_link *lnk)
{
	struct llc_msg req = {.version = LLC_V2,
			      .type = LLC_CONFIRM_LINK,
			      .flags = LLC_FLAG_NO_RMBE_EYEC},
		       resp;
	struct llc_confirm_link *c = &req.confirm_link;

	memcpy(c->mac, lnk->dev.mac, SMCR_MAC_LEN);
	memcpy(c->gid, lnk->dev.gid, SMCR_GID_LEN);
	c->qpn = lnk->qp->qp_num;
	c->link_num = lnk->link_num;
	c->link_uid = lgr->id + lnk->link_num;
	c->max_links = lgr->max_links;
	c->max_conns = lgr->max_conns;
	return smcr_llc_flow_on(lgr, lnk, &req, &resp);
}

/* The port the server offers a new link on, beside the link in @via:
 * another of its ports, or without one the port @via uses, for the
 * client's second port (asymmetric, as Linux's SMC_LGR_ASYMMETRIC_LOCAL in
 * smc_llc_srv_add_link()); a client without one rejects it. */
static void srv_pick_port(struct lgr *lgr, int via, struct smcr_dev *alt)
{
	const struct smcr_link *cur = &lgr->lnk[via];
	struct smcr_dev_set devs;

	smcr_ctx_devices(lgr->sctx, &devs);
	if (smcr_dev_find_alt(&cur->dev, &devs, &cur->peer_gid, 1, alt))
		*alt = cur->dev;
}

/* The server's part; 0 once the new link is up. */
static int srv_add_link(struct lgr *lgr, struct llc_msg *m)
{
	int via = smcr_llc_link_slot(lgr); /* where the LLC goes: a link that is up */
	struct smcr_dev alt;
	struct smcr_link *lnk;
	int rc;

	srv_pick_port(lgr, via, &alt);
	rc = lgr_link_new(lgr, &alt, lgr_next_link_num(lgr), &lnk);
	if (rc)
		return rc;
	add_link_fill(lgr, lnk, via, m);
	rc = smcr_llc_flow_on(lgr, &lgr->lnk[via], m, m);
	if (!rc && (m->flags & LLC_FLAG_ADD_LNK_REJ)) {
		rc = -ECONNREFUSED; /* the client has no port to spare */
		memcpy(lgr->al_refused_gid, alt.gid, SMCR_GID_LEN);
		atomic_store(&lgr->al_refused, true); /* not the same again, unasked */
	}
	if (!rc && !m->add_link.has_ext)
		rc = -EPROTO; /* an accepting v2 response carries its rkeys */
	if (!rc) {
		peer_rkeys(lgr, via, lnk, &m->add_link);
		rc = link_ready(lnk, &m->add_link);
	}
	if (!rc)
		rc = srv_confirm_link(lgr, lnk);
	if (!rc)
		rc = link_up(lgr, lnk);
	if (rc)
		lgr_link_drop(lgr, lnk);
	return rc;
}

/* Our ADD_LINK response on @lnk, then the server's CONFIRM_LINK on it,
 * answered there (Linux: smc_llc_cli_conf_link()). */
static int cli_confirm(struct lgr *lgr, struct smcr_link *lnk, int via, struct llc_msg *m)
{
	int rc;

	add_link_fill(lgr, lnk, via, m);
	m->flags = LLC_FLAG_RESP;
	rc = smcr_llc_send_on(lgr, &lgr->lnk[via], m);
	if (!rc)
		rc = smcr_llc_wait_confirm_link(lgr, SMCR_LLC_WAIT_MS, m);
	if (!rc && m->confirm_link.link_num != lnk->link_num)
		rc = -EPROTO;
	if (rc)
		return rc;
	llc_make_response(m);
	memcpy(m->confirm_link.mac, lnk->dev.mac, SMCR_MAC_LEN);
	memcpy(m->confirm_link.gid, lnk->dev.gid, SMCR_GID_LEN);
	m->confirm_link.qpn = lnk->qp->qp_num;
	return smcr_llc_send_on(lgr, lnk, m);
}

/* The client's part, the server's request in @m; 0 once the new link is
 * up. A request it cannot take is rejected as Linux words it. */
static int cli_add_link(struct lgr *lgr, struct llc_msg *m)
{
	uint8_t peer[2][SMCR_GID_LEN];	   /* the current link's peer, the offered one */
	int via = smcr_llc_link_slot(lgr); /* the link the request came over */
	struct smcr_dev_set devs;
	struct smcr_dev alt;
	struct smcr_link *lnk = NULL;
	int rc = smcr_llc_flow_own(lgr);

	if (rc)
		return rc; /* our own flow hung: the server's times out */
	memcpy(peer[0], lgr->lnk[via].peer_gid, SMCR_GID_LEN);
	memcpy(peer[1], m->add_link.gid, SMCR_GID_LEN);
	smcr_ctx_devices(lgr->sctx, &devs);
	rc = smcr_dev_find_alt(&lgr->lnk[via].dev, &devs, peer, 2, &alt);
	if (rc == -ENODEV && memcmp(peer[0], peer[1], SMCR_GID_LEN)) {
		/* no port to spare, but the server offers another of its own:
		 * the new link on our one port (asymmetric, Linux's
		 * SMC_LGR_ASYMMETRIC_LOCAL in smc_llc_cli_add_link()); an offer
		 * on the server's port already in use needs a port of ours */
		alt = lgr->lnk[via].dev;
		rc = 0;
	}
	if (!rc)
		rc = lgr_link_new(lgr, &alt, m->add_link.link_num, &lnk);
	if (rc) {
		llc_add_link_reject(m);
		smcr_llc_send(lgr, m);
		smcr_llc_flow_disown(lgr);
		return rc;
	}
	peer_rkeys(lgr, via, lnk, &m->add_link);
	rc = link_ready(lnk, &m->add_link);
	if (!rc)
		rc = cli_confirm(lgr, lnk, via, m);
	if (!rc)
		rc = link_up(lgr, lnk);
	if (rc)
		lgr_link_drop(lgr, lnk);
	smcr_llc_flow_disown(lgr);
	return rc;
}

struct add_link_job {
	struct lgr *lgr;
	struct llc_msg m; /* the client's: the server's request */
};

static void *add_link_thread(void *arg)
{
	struct add_link_job *job = arg;
	struct lgr *lgr = job->lgr;
	int rc;

	thread_name_set(pthread_self(), "usmc-link/%x", lgr->id);
	rc = lgr->is_server ? srv_add_link(lgr, &job->m) : cli_add_link(lgr, &job->m);
	if (rc)
		usmc_log(lgr->sctx->log, rc == -ENODEV ? USMC_LOG_DEBUG : USMC_LOG_INFO,
			 "link group %x: no second link: %s", lgr->id, log_errname(rc));
	free(job);
	atomic_store(&lgr->al_running, false);
	lgr_put(lgr);
	return NULL;
}

/* Run the add-link on its thread, with @req the server's request (client);
 * false if it could not start (one runs, or no memory, no thread). */
static bool add_link_spawn(struct lgr *lgr, const struct llc_msg *req)
{
	struct add_link_job *job;

	if (atomic_exchange(&lgr->al_running, true))
		return false; /* one at a time */
	lgr_links_join(lgr);  /* the last one, done */
	job = calloc(1, sizeof(*job));
	if (!job) {
		atomic_store(&lgr->al_running, false);
		return false;
	}
	job->lgr = lgr;
	if (req)
		job->m = *req;
	lgr_get(lgr);
	atomic_store(&lgr->al_started, true);
	if (pthread_create(&lgr->al_thread, NULL, add_link_thread, job)) {
		atomic_store(&lgr->al_started, false);
		atomic_store(&lgr->al_running, false);
		lgr_put(lgr);
		free(job);
		return false;
	}
	return true;
}

/* The server may add a link to @lgr: both ends allow more than it has. */
static bool may_add(struct lgr *lgr)
{
	return lgr->is_server && lgr->max_links > 1 && atomic_load(&lgr->state) == LGR_ACTIVE &&
	       lgr_links_active(lgr) < lgr->max_links;
}

/* Server tick: the client rejected an offer and the next would be the
 * same (our port of the same GID): it asks when it has a port for it, and
 * a link that fails clears it. Another port of ours up again clears it. */
static bool offer_refused(struct lgr *lgr)
{
	struct smcr_dev alt;

	if (!atomic_load(&lgr->al_refused))
		return false;
	srv_pick_port(lgr, smcr_llc_link_slot(lgr), &alt);
	if (!memcmp(alt.gid, lgr->al_refused_gid, SMCR_GID_LEN))
		return true;
	atomic_store(&lgr->al_refused, false);
	return false;
}

void smcr_llc_add_link_start(struct lgr *lgr)
{
	if (may_add(lgr))
		add_link_spawn(lgr, NULL);
}

/* The client may ask the server for a link: both ends allow more than
 * @lgr has, and no add-link runs. */
static bool may_ask(struct lgr *lgr)
{
	return !lgr->is_server && lgr->max_links > 1 && atomic_load(&lgr->state) == LGR_ACTIVE &&
	       !atomic_load(&lgr->al_running) && lgr_links_active(lgr) < lgr->max_links;
}

/*
 * The client's REQ_ADD_LINK (v2: the GID of a port it would take first),
 * as Linux's client sends when a port comes up
 * (net/smc/smc_llc.c smc_llc_cli_add_link_invite()). A Linux server adds
 * a link only then or at its own port's up event (smc_core.c
 * smcr_port_add()): a path that came back from a silent loss brings no
 * event, so the client asks every SMCR_READD_MS while it has fewer links
 * than both ends allow. Nothing to offer (no other port): no request.
 */
static void cli_ask(struct lgr *lgr)
{
	struct llc_msg m = {.version = LLC_V2, .type = LLC_REQ_ADD_LINK};
	int via = smcr_llc_link_slot(lgr);
	struct smcr_dev_set devs;
	struct smcr_dev alt;
	int rc;

	smcr_ctx_devices(lgr->sctx, &devs);
	if (smcr_dev_find_alt(&lgr->lnk[via].dev, &devs, &lgr->lnk[via].peer_gid, 1, &alt))
		return;
	m.req_add_link.gid_count = 1;
	memcpy(m.req_add_link.gids[0], alt.gid, LLC_GID_LEN);
	rc = smcr_llc_send(lgr, &m);
	usmc_log(lgr->sctx->log, USMC_LOG_DEBUG,
		 "link group %x: asked the server for a link (REQ_ADD_LINK, %s:%u): %s", lgr->id,
		 alt.name, alt.port, rc ? log_errname(rc) : "sent");
}

void smcr_llc_add_link_tick(struct lgr *lgr, long now)
{
	bool server = may_add(lgr), client = may_ask(lgr);

	if (!server && !client) {
		lgr->al_next_ms = 0; /* whole: the next loss waits a full period */
		return;
	}
	if (!lgr->al_next_ms && client) /* the server adds the first one unasked */
		lgr->al_next_ms = now + SMCR_READD_MS;
	if (now < lgr->al_next_ms)
		return;
	lgr->al_next_ms = now + SMCR_READD_MS;
	if (server && !offer_refused(lgr))
		add_link_spawn(lgr, NULL);
	else if (!server)
		cli_ask(lgr);
}

bool smcr_llc_req_add_link_rx(struct lgr *lgr)
{
	/* as Linux's server: a client's suggestion starts the server's own
	 * add-link (smc_llc_event_handler() -> smc_llc_srv_add_link()) */
	atomic_store(&lgr->al_refused, false); /* it has a port for one now */
	return may_add(lgr) && (add_link_spawn(lgr, NULL) || atomic_load(&lgr->al_running));
}

void smcr_llc_add_link_rx(struct lgr *lgr, int slot, struct llc_msg *m)
{
	/* a v2 request with its rkeys, on a link group that allows a second
	 * link, and a port for it (the thread looks): taken; else rejected at
	 * once, as Linux's client does (smc_llc_cli_add_link()) */
	if (atomic_load(&lgr->state) != LGR_ACTIVE || lgr->is_server || lgr->max_links < 2 ||
	    !m->add_link.has_ext || !m->add_link.qp_mtu ||
	    lgr_links_active(lgr) >= lgr->max_links || lgr_link_by_num(lgr, m->add_link.link_num) ||
	    !add_link_spawn(lgr, m)) {
		llc_add_link_reject(m);
		smcr_llc_answer(lgr, slot, m);
	}
}
