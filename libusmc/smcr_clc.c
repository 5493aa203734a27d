// SPDX-License-Identifier: MIT
/*
 * SMC-Rv2 CLC handshake over the TCP socket, both roles (smcr_clc.h;
 * net/smc/af_smc.c smc_connect_rdma(), smc_listen_rdma_*(); message
 * layouts net/smc/smc_clc.h): PROPOSAL, ACCEPT, CONFIRM, then LLC
 * CONFIRM_LINK on a new link group, or CONFIRM_RKEY on a reused one.
 * Positive reasons decline and fall back to TCP on the same socket;
 * timeouts and malformed messages fail the connection.
 */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bufpool.h"
#include "clc_io.h"
#include "clock.h"
#include "error.h"
#include "lgr.h"
#include "log.h"
#include "reason.h"
#include "smcr_clc.h"
#include "smcr_conn.h"

#define SMCR_RELEASE	  CLC_RELEASE_1
#define SMCR_MIN_CONNS	  16 /* v2.1: fewer is MAXCONNERR */
#define SMCR_MAX_LINKS	  1  /* one link per LGR: no ADD_LINK */
#define SMCR_FEATURE_MASK 0x0001
#define SMCR_RMBE_IDX	  1    /* one RMBE per RMB, as Linux */
#define SMCR_CL_WAIT_MS	  4000 /* client: 2 x SMC_LLC_WAIT_TIME for CONFIRM_LINK */
/* CLC_WAIT_TIME_SHORT: how long to look for the peer's DECLINE after a
 * failed LLC step */
#define CLC_WAIT_SHORT_MS 1000
/* A non-first-contact ACCEPT names a link group that a concurrent connect
 * of ours may still be confirming: wait for it, boundedly. */
#define CLIENT_REUSE_WAIT_MS 2000

/* What the next CLC message turned out to be (values apart from enum
 * smcr_hs_result, so that neither is taken for the other). */
enum clc_rx {
	CLC_RX_MSG = 0,		    /* the expected ACCEPT or CONFIRM, decoded */
	CLC_RX_DECLINED = 100,	    /* a DECLINE: hs says why, TCP from here */
	CLC_RX_DECLINED_SYNC = 101, /* a DECLINE with the out-of-sync bit: the
				       peer lost our link group */
};

int smcr_addr_ipv4(const struct sockaddr_storage *ss, struct in_addr *addr)
{
	if (ss->ss_family == AF_INET) {
		*addr = ((const struct sockaddr_in *)ss)->sin_addr;
		return 0;
	}
	if (ss->ss_family == AF_INET6 &&
	    IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)ss)->sin6_addr)) {
		memcpy(addr, ((const struct sockaddr_in6 *)ss)->sin6_addr.s6_addr + 12, 4);
		return 0;
	}
	return -EAFNOSUPPORT;
}

/* The IPv4 address of @fd's own end, or of its peer's (@peer). */
static int sock_ipv4(int fd, bool peer, struct in_addr *addr)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if ((peer ? getpeername : getsockname)(fd, (struct sockaddr *)&ss, &len))
		return -errno;
	return smcr_addr_ipv4(&ss, addr);
}

/* The peer's IPv4 address: as the connection kept it, without a system
 * call, else as the socket says. */
static int peer_ipv4(const struct smcr_hs *hs, struct in_addr *addr)
{
	return hs->peer ? smcr_addr_ipv4(hs->peer, addr) : sock_ipv4(hs->fd, true, addr);
}

static int find_dev(const struct smcr_hs *hs, struct smcr_dev *dev)
{
	struct in_addr a;

	return sock_ipv4(hs->fd, false, &a) ? -ENODEV : smcr_dev_lookup(hs->sctx, &a, dev);
}

/*
 * SMC-Rv2 direct (the only kind libusmc speaks, docs/smcr.md): the peer's
 * RoCE GID is its IPv4 address, mapped. A GID that is not the TCP peer's
 * would point our QP at a third host.
 */
static bool gid_is_addr(const uint8_t gid[SMCR_GID_LEN], struct in_addr addr)
{
	return smcr_gid_is_v4mapped(gid) && !memcmp(gid + 12, &addr.s_addr, 4);
}

static struct lgr_config lgr_config_of(const struct usmc_opts *o)
{
	return (struct lgr_config){.busy_poll = o->v[USMC_OPT_BUSY_POLL] != 0,
				   .spin = o->v[USMC_OPT_SPIN] != 0,
				   .testlink_ms = o->v[USMC_OPT_TESTLINK_MS],
				   .idle_ms = o->v[USMC_OPT_LGR_IDLE_MS],
				   .max_bufs = (uint32_t)o->v[USMC_OPT_MAX_BUFS],
				   .max_lgrs = (int)o->v[USMC_OPT_MAX_LGRS],
				   .max_per_peer = (int)o->v[USMC_OPT_MAX_LGRS_PER_PEER]};
}

static int conn_new(const struct smcr_hs *hs, struct lgr *lgr, struct smcr_conn **sc)
{
	int rc = smcr_conn_new(lgr, (size_t)hs->opts->v[USMC_OPT_RMB_SIZE],
			       (size_t)hs->opts->v[USMC_OPT_SNDBUF_SIZE], sc);

	if (rc == -ENOBUFS || rc == -ENOSPC)
		usmc_log(hs->sctx->log, USMC_LOG_WARN,
			 "link group %x: %s: %s, connection from %s falls back to TCP", lgr->id,
			 rc == -ENOBUFS ? "buffer pool exhausted" : "connection table full",
			 log_errname(rc), log_peer(hs->fd).s);
	return rc;
}

static void fill_fce(struct clc_fce *f, uint8_t release, uint8_t max_conns, uint8_t max_links)
{
	char host[CLC_HOSTNAME_LEN + 1] = "";

	memset(f, 0, sizeof(*f));
	f->v2_direct = true; /* see docs/smcr.md: both hosts on one subnet */
	f->os_type = CLC_OS_LINUX;
	f->release = release;
	gethostname(host, sizeof(host) - 1);
	memset(f->hostname, ' ', sizeof(f->hostname));
	memcpy(f->hostname, host, strnlen(host, CLC_HOSTNAME_LEN));
	if (release >= CLC_RELEASE_1) {
		f->max_conns = max_conns;
		f->max_links = max_links;
		f->feature_mask = SMCR_FEATURE_MASK;
	}
}

/* Our half of ACCEPT/CONFIRM: link, RMB, token. */
static void fill_ac(struct clc_accept_confirm *m, uint8_t type, struct lgr *lgr,
		    struct smcr_conn *sc, bool fc)
{
	const struct smcr_link *lnk = lgr_conn_link(lgr);

	memset(m, 0, sizeof(*m));
	m->type = type;
	m->version = CLC_V2;
	m->first_contact = fc;
	memcpy(m->peer_id, lgr->sctx->system_id, CLC_PEER_ID_LEN);
	memcpy(m->gid, lnk->dev.gid, CLC_GID_LEN);
	memcpy(m->mac, lnk->dev.mac, CLC_MAC_LEN);
	m->qpn = lnk->qp->qp_num;
	m->rmb_rkey = sc->rmb->rkey;
	m->rmbe_idx = SMCR_RMBE_IDX;
	m->rmbe_alert_token = sc->token;
	m->rmbe_size = sc->rmb->class;
	m->qp_mtu = (uint8_t)lnk->dev.active_mtu;
	m->rmb_dma_addr = (uintptr_t)sc->rmb->addr;
	m->psn = lnk->psn;
}

static int send_ac(int fd, const struct clc_accept_confirm *m)
{
	uint8_t buf[CLC_ACCEPT_MAX_LEN];
	int len = clc_accept_confirm_encode(m, buf, sizeof(buf));

	return len < 0 ? len : clc_io_send(fd, buf, (size_t)len);
}

/* The peer's RMB as its ACCEPT or CONFIRM describes it. */
static void set_peer_rmb(struct smcr_conn *sc, const struct clc_accept_confirm *m)
{
	struct smcr_peer_rmb peer = {.token = m->rmbe_alert_token,
				     .rkey = m->rmb_rkey,
				     .dma_addr = m->rmb_dma_addr,
				     .rmbe_idx = m->rmbe_idx,
				     .size_class = m->rmbe_size};

	smcr_conn_set_peer(sc, &peer);
}

/*
 * CONFIRM_RKEY for an RMB on a reused link group (both roles), unless the
 * peer holds its rkey already: an RMB that comes back from the pool with
 * the rkey it had needs no LLC flow (smcr_conn.c sc_keep_rkey()); a new or
 * re-keyed one does (net/smc/af_smc.c smcr_lgr_reg_rmbs()).
 */
static int confirm_rkey(struct lgr *lgr, struct smcr_conn *sc)
{
	struct llc_msg req = {.version = LLC_V2, .type = LLC_CONFIRM_RKEY}, resp;
	int rc;

	if (sc->rmb->rkey_confirmed)
		return 0;
	req.confirm_rkey.rkey = sc->rmb->rkey;
	req.confirm_rkey.vaddr = (uintptr_t)sc->rmb->addr;
	rc = smcr_llc_flow(lgr, &req, &resp);
	if (!rc && (resp.flags & LLC_FLAG_RKEY_NEG))
		rc = -EIO;
	if (!rc)
		sc->rmb->rkey_confirmed = true;
	return rc;
}

static enum ibv_mtu mtu_min(enum ibv_mtu a, uint8_t b)
{
	return b && (enum ibv_mtu)b < a ? (enum ibv_mtu)b : a;
}

/* The handshake ends on TCP for @reason. */
static int hs_tcp(struct smcr_hs *hs, uint32_t reason, bool peer_declined)
{
	hs->reason = reason;
	hs->peer_declined = peer_declined;
	return SMCR_HS_TCP;
}

/*
 * What the next CLC message (@len bytes in @buf, or @len the error of
 * reading it) is: the @want type decoded into @ac, or a DECLINE (recorded
 * in @hs). A negative value for anything else. recv_or_decline() receives
 * it first, waiting; the asynchronous client reads it without waiting
 * (smcr_clc_answer()).
 */
static int rx_classify(struct smcr_hs *hs, const uint8_t *buf, int len, const struct clc_hdr *hdr,
		       uint8_t want, struct clc_accept_confirm *ac)
{
	int rc;

	if (len < 0)
		return len;
	if (hdr->type == CLC_DECLINE) {
		struct clc_decline d;

		rc = clc_decline_decode(buf, (size_t)len, &d);
		if (rc)
			return USMC_EPROTO_CLC;
		hs_tcp(hs, d.diagnosis, true);
		usmc_log(hs->sctx->log, USMC_LOG_INFO, "CLC: DECLINE from %s: %s (0x%08x)%s",
			 log_peer(hs->fd).s, log_reason(d.diagnosis), d.diagnosis,
			 d.out_of_sync ? ", out of sync" : "");
		return d.out_of_sync ? CLC_RX_DECLINED_SYNC : CLC_RX_DECLINED;
	}
	if (hdr->type != want)
		return USMC_EPROTO_CLC;
	rc = clc_accept_confirm_decode(buf, (size_t)len, ac);
	if (rc || ac->version < CLC_V2 || ac->smcd)
		return USMC_EPROTO_CLC;
	return CLC_RX_MSG;
}

static int recv_or_decline(struct smcr_hs *hs, uint8_t *buf, size_t cap, uint8_t want,
			   struct clc_accept_confirm *ac, int timeout_ms)
{
	struct clc_hdr hdr;
	int len = clc_io_recv(hs->fd, buf, cap, timeout_ms, hs->waiting, &hdr);

	hs->waiting = 0; /* taken, or the handshake failed */
	return rx_classify(hs, buf, len, &hdr, want, ac);
}

/* @ms from now, or the handshake's deadline if that comes first. */
static long hs_deadline(const struct smcr_hs *hs, long ms)
{
	long t = clock_now_ms() + ms;

	return hs->deadline_ms && hs->deadline_ms < t ? hs->deadline_ms : t;
}

/* How long the next CLC message may take: USMC_OPT_CLC_TIMEOUT_MS, and
 * never past the handshake's deadline. */
static int clc_wait_ms(const struct smcr_hs *hs)
{
	long left = hs_deadline(hs, hs->opts->v[USMC_OPT_CLC_TIMEOUT_MS]) - clock_now_ms();

	return left > 0 ? (int)left : 0;
}

/* Decline with @reason and continue over TCP. */
static int decline_fallback(struct smcr_hs *hs, uint32_t reason, bool out_of_sync)
{
	uint8_t buf[CLC_DECLINE_V2_LEN];
	int len = clc_decline_build(buf, sizeof(buf), CLC_V2, hs->sctx->system_id, reason,
				    out_of_sync);
	int rc;

	/* before it leaves: the peer may close (and reset) as soon as it has it */
	usmc_log(hs->sctx->log, USMC_LOG_INFO, "CLC: DECLINE to %s: %s (0x%08x)%s",
		 log_peer(hs->fd).s, log_reason(reason), reason,
		 out_of_sync ? ", out of sync" : "");
	rc = len < 0 ? len : clc_io_send(hs->fd, buf, (size_t)len);
	return rc ? rc : hs_tcp(hs, reason, false);
}

/*
 * A first contact's LLC step failed: the peer may have given up first and
 * sent its DECLINE. Take it if it comes within CLC_WAIT_SHORT_MS and fall
 * back without one of ours; else decline with @reason. Both ends declining
 * would leave each one's DECLINE in the other's TCP stream as data
 * (net/smc/af_smc.c smc_clnt_conf_first_link() and
 * smc_serv_conf_first_link() wait CLC_WAIT_TIME_SHORT the same way).
 */
static int decline_unless_declined(struct smcr_hs *hs, uint32_t reason)
{
	uint8_t buf[CLC_DECLINE_V2_LEN];
	int rc = recv_or_decline(hs, buf, sizeof(buf), CLC_DECLINE, NULL, CLC_WAIT_SHORT_MS);

	if (rc == CLC_RX_DECLINED || rc == CLC_RX_DECLINED_SYNC)
		return SMCR_HS_TCP;
	return rc == -ETIMEDOUT ? decline_fallback(hs, reason, false) : rc;
}

/* After a handshake step: a DECLINE received means TCP, else the error. */
static int hs_declined_or(struct smcr_hs *hs, int rc)
{
	return rc == CLC_RX_DECLINED || rc == CLC_RX_DECLINED_SYNC ? SMCR_HS_TCP : rc;
}

/* The server's connection, handed from @st to the handshake's answer. */
static struct smcr_conn *serve_take_conn(struct smcr_serve *st)
{
	struct smcr_conn *sc = st->sc;

	st->sc = NULL;
	return sc;
}

static int hs_established(struct smcr_hs *hs, struct smcr_conn *sc)
{
	/* a first contact's CLC confirmed the RMB's rkey implicitly (Linux:
	 * smc_connect_rdma() and smc_listen_rdma_reg() set is_conf_rkey) */
	sc->rmb->rkey_confirmed = true;
	smcr_conn_establish(sc, hs->fd);
	hs->sc = sc;
	return SMCR_HS_SMCR;
}

/* ==== client ==== */

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
	if (!gid_is_addr(a->gid, server))
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

	fill_ac(&m, CLC_CONFIRM, lgr, sc, true);
	m.qp_mtu = (uint8_t)mtu_min(lnk->dev.active_mtu, a->qp_mtu);
	memcpy(m.eid, a->eid, CLC_EID_LEN);
	fill_fce(&m.fce, release, a->fce.max_conns, a->fce.max_links);
	m.fce.feature_mask = a->fce.feature_mask & SMCR_FEATURE_MASK;
	m.gid_count = 1;
	memcpy(m.gids[0], lnk->dev.gid, CLC_GID_LEN);
	return send_ac(hs->fd, &m);
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
	if (conn_new(hs, lgr, sc) ||
	    smcr_link_qp_rtr(lnk, a->qpn, a->psn, a->gid,
			     mtu_min(lnk->dev.active_mtu, a->qp_mtu)) ||
	    lgr_start(lgr))
		return SMC_CLC_DECL_MEM;
	set_peer_rmb(*sc, a);
	return 0;
}

static int client_first_contact(struct smcr_hs *hs, const struct smcr_dev *dev,
				const struct clc_accept_confirm *a, struct in_addr server)
{
	struct lgr_config cfg = lgr_config_of(hs->opts);
	uint8_t release = a->fce.release > SMCR_RELEASE ? SMCR_RELEASE : a->fce.release;
	uint32_t reason = client_check_fc(a, server);
	struct smcr_conn *sc = NULL;
	struct llc_msg req;
	struct lgr *lgr;
	int rc;

	if (reason)
		return decline_fallback(hs, reason, false);
	if (lgr_create(hs->sctx, &smcr_conn_lgr_ops, &cfg, false, dev, &lgr))
		return decline_fallback(hs, SMC_CLC_DECL_MEM, false);
	reason = client_link_up(lgr, a, server, &sc, hs);
	if (reason)
		goto decline;
	rc = client_send_confirm(hs, lgr, sc, a, release);
	if (rc)
		goto fail;
	if (smcr_llc_wait_confirm_link(lgr, SMCR_CL_WAIT_MS, &req)) {
		rc = decline_unless_declined(hs, SMC_CLC_DECL_TIMEOUT_CL);
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
	return hs_established(hs, sc);
decline:
	rc = decline_fallback(hs, reason, false);
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
		return decline_fallback(hs, SMC_CLC_DECL_SYNCERR, true);
	rc = conn_new(hs, lgr, &sc);
	lgr_put(lgr);
	if (rc)
		return decline_fallback(hs, SMC_CLC_DECL_MEM, false);
	set_peer_rmb(sc, a);
	if (confirm_rkey(lgr, sc)) {
		smcr_conn_discard(sc);
		return decline_fallback(hs, SMC_CLC_DECL_ERR_REGBUF, false);
	}
	fill_ac(&m, CLC_CONFIRM, lgr, sc, false);
	memcpy(m.eid, a->eid, CLC_EID_LEN);
	rc = send_ac(hs->fd, &m);
	if (rc) {
		smcr_conn_discard(sc);
		return rc;
	}
	return hs_established(hs, sc);
}

/* After the ACCEPT: a new link group (within the caps), or the one it
 * names. SMCR_HS_AWAIT_LGR (without @wait only): a first contact of ours
 * with that server is still setting up the link group named. */
static int client_after_accept(struct smcr_hs *hs, struct smcr_client *cl, bool wait)
{
	const struct clc_accept_confirm *a = &cl->accept;
	struct lgr_config cfg = lgr_config_of(hs->opts);
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
		return decline_fallback(hs, SMC_CLC_DECL_MEM, false);
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
	if (find_dev(hs, &cl->dev) || peer_ipv4(hs, &cl->server)) {
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
	return rx_classify(hs, cl->rx, len, &hdr, CLC_ACCEPT, &cl->accept);
}

int smcr_clc_answer(struct smcr_hs *hs, struct smcr_client *cl, bool wait)
{
	int rc = CLC_RX_MSG;

	if (!cl->accepted) {
		rc = wait ? recv_or_decline(hs, cl->rx, sizeof(cl->rx), CLC_ACCEPT, &cl->accept,
					    clc_wait_ms(hs))
			  : client_read_answer(hs, cl);
		if (rc == SMCR_HS_AWAIT_ANSWER)
			return rc;
		cl->accepted = rc == CLC_RX_MSG;
	}
	if (rc == CLC_RX_MSG)
		rc = client_after_accept(hs, cl, wait);
	if (rc == SMCR_HS_AWAIT_LGR)
		return rc;
	return usmc_err_of_wire(hs_declined_or(hs, rc));
}

int smcr_clc_connect(struct smcr_hs *hs)
{
	struct smcr_client cl;
	int rc = smcr_clc_propose(hs, &cl);

	return rc ? rc : smcr_clc_answer(hs, &cl, true);
}

/* ==== server ==== */

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

	if (confirm_rkey(lgr, st->sc))
		return decline_fallback(hs, SMC_CLC_DECL_ERR_REGBUF, false);
	fill_ac(&m, CLC_ACCEPT, lgr, st->sc, false);
	memcpy(m.eid, st->neg.eid, CLC_EID_LEN);
	rc = send_ac(hs->fd, &m);
	return rc ? rc : SMCR_HS_AWAIT_CONFIRM;
}

/* The client's answer to a reuse ACCEPT. */
static int reuse_confirm(struct smcr_hs *hs, struct smcr_serve *st)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_accept_confirm conf;
	int rc = recv_or_decline(hs, buf, sizeof(buf), CLC_CONFIRM, &conf, clc_wait_ms(hs));

	/* the client has no such link group: ours is useless (net/smc/af_smc.c
	 * smc_listen_decline() -> smc_lgr_terminate_sched() on out-of-sync) */
	if (rc == CLC_RX_DECLINED_SYNC)
		lgr_terminate(st->sc->lgr, -ECONNABORTED, true);
	if (rc != CLC_RX_MSG)
		return hs_declined_or(hs, rc);
	set_peer_rmb(st->sc, &conf);
	return hs_established(hs, serve_take_conn(st));
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
	struct lgr_config cfg = lgr_config_of(hs->opts);
	struct clc_accept_confirm m;
	int rc;

	if (lgr_create(hs->sctx, &smcr_conn_lgr_ops, &cfg, true, &st->dev, &st->lgr))
		return decline_fallback(hs, SMC_CLC_DECL_MEM, false);
	lgr_set_peer(st->lgr, st->prop.peer_id, st->prop.mac, st->neg.peer_addr);
	if (conn_new(hs, st->lgr, &st->sc))
		return decline_fallback(hs, SMC_CLC_DECL_MEM, false);
	fill_ac(&m, CLC_ACCEPT, st->lgr, st->sc, true);
	memcpy(m.eid, st->neg.eid, CLC_EID_LEN);
	fill_fce(&m.fce, st->neg.release, st->neg.max_conns, st->neg.max_links);
	rc = send_ac(hs->fd, &m);
	return rc ? rc : SMCR_HS_AWAIT_CONFIRM;
}

/* The client's CONFIRM to a first-contact ACCEPT: bring the link up. */
static int first_contact_confirm(struct smcr_hs *hs, struct smcr_serve *st)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_accept_confirm conf;
	uint32_t reason;
	int rc = recv_or_decline(hs, buf, sizeof(buf), CLC_CONFIRM, &conf, clc_wait_ms(hs));

	if (rc != CLC_RX_MSG)
		return hs_declined_or(hs, rc);
	reason = serve_check_confirm(&conf, &st->neg);
	if (reason)
		return hs_declined_or(hs, decline_fallback(hs, reason, false));
	set_peer_rmb(st->sc, &conf);
	reason = serve_link_up(st->lgr, &st->prop, &conf, &st->neg);
	if (reason == SMC_CLC_DECL_TIMEOUT_CL)
		return hs_declined_or(hs, decline_unless_declined(hs, reason));
	if (reason)
		return hs_declined_or(hs, decline_fallback(hs, reason, false));
	lgr_publish(st->lgr);
	st->lgr = NULL; /* published: the connection holds it now */
	return hs_established(hs, serve_take_conn(st));
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
	if (peer_ipv4(hs, &n->peer_addr))
		return SMC_CLC_DECL_NOSMCRDEV; /* an IPv6 client: no SMC-Rv2 GID */
	if (!gid_is_addr(p->roce_gid, n->peer_addr))
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
	struct lgr_config cfg = lgr_config_of(hs->opts);
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
	int rc = lgr_claim(hs->sctx, &key, &cfg, retry ? 0 : hs_deadline(hs, claim_wait_ms(hs)),
			   &st->pending, &reuse);

	if (rc == -ETIMEDOUT && retry)
		return SMCR_HS_AWAIT_CLAIM;
	if (rc)
		return decline_fallback(
			hs, rc == -EUSERS ? SMC_CLC_DECL_MEM : SMC_CLC_DECL_TIMEOUT_CL, false);
	if (!reuse) {
		st->claimed = true;
		return 0;
	}
	rc = conn_new(hs, reuse, &st->sc);
	lgr_put(reuse); /* the connection holds its own reference */
	return rc ? decline_fallback(hs, SMC_CLC_DECL_MEM, false) : 0;
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
	if (!reason && find_dev(hs, &st->dev))
		reason = SMC_CLC_DECL_NOSMCRDEV;
	if (reason)
		return usmc_err_of_wire(decline_fallback(hs, reason, false));
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
