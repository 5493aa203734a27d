// SPDX-License-Identifier: MIT
/*
 * SMC-Rv2 CLC handshake over the TCP socket, both roles (smc-r-protocol.md
 * §1.2, §8.1-§8.5): PROPOSAL, ACCEPT, CONFIRM, then LLC CONFIRM_LINK on a
 * new link group, or CONFIRM_RKEY on a reused one. Positive reasons decline
 * and fall back to TCP on the same socket; timeouts and malformed messages
 * fail the connection.
 */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clc_io.h"
#include "conn.h"
#include "ctx.h"
#include "kcompat.h"
#include "reason.h"
#include "smcr.h"

enum { ROLE_CLIENT = 0, ROLE_SERVER = 1 };

static int local_ipv4(int fd, struct in_addr *addr)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len))
		return -errno;
	if (ss.ss_family == AF_INET) {
		*addr = ((struct sockaddr_in *)&ss)->sin_addr;
		return 0;
	}
	if (ss.ss_family == AF_INET6 &&
	    IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&ss)->sin6_addr)) {
		memcpy(addr, ((struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr + 12, 4);
		return 0;
	}
	return -EAFNOSUPPORT;
}

static int find_dev(struct usmc_conn *c, struct smcr_dev *dev)
{
	struct in_addr a;

	return local_ipv4(c->fd, &a) ? -ENODEV : smcr_dev_lookup(&c->ctx->rdma, &a, dev);
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
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->version = CLC_V2;
	m->first_contact = fc;
	memcpy(m->peer_id, lgr->ctx->rdma.system_id, CLC_PEER_ID_LEN);
	memcpy(m->gid, lgr->dev.gid, CLC_GID_LEN);
	memcpy(m->mac, lgr->dev.mac, CLC_MAC_LEN);
	m->qpn = lgr->qp->qp_num;
	m->rmb_rkey = sc->rmb->rkey;
	m->rmbe_idx = SMCR_RMBE_IDX;
	m->rmbe_alert_token = sc->token;
	m->rmbe_size = sc->rmb->class;
	m->qp_mtu = (uint8_t)lgr->dev.active_mtu;
	m->rmb_dma_addr = (uintptr_t)sc->rmb->addr;
	m->psn = lgr->psn;
}

static int send_ac(int fd, const struct clc_accept_confirm *m)
{
	uint8_t buf[CLC_ACCEPT_MAX_LEN];
	int len = clc_accept_confirm_encode(m, buf, sizeof(buf));

	return len < 0 ? len : clc_io_send(fd, buf, (size_t)len);
}

/* CONFIRM_RKEY for a new RMB on a reused link group (both roles). */
static int confirm_rkey(struct lgr *lgr, struct smcr_conn *sc)
{
	struct llc_msg req = {.version = LLC_V2, .type = LLC_CONFIRM_RKEY}, resp;
	int rc;

	req.confirm_rkey.rkey = sc->rmb->rkey;
	req.confirm_rkey.vaddr = (uintptr_t)sc->rmb->addr;
	rc = lgr_llc_flow(lgr, &req, &resp);
	if (!rc && (resp.flags & LLC_FLAG_RKEY_NEG))
		rc = -EIO;
	return rc;
}

static enum ibv_mtu mtu_min(enum ibv_mtu a, uint8_t b)
{
	return b && (enum ibv_mtu)b < a ? (enum ibv_mtu)b : a;
}

/*
 * Receive the next CLC message. A DECLINE ends in TCP mode and returns 1,
 * or 2 if it has the out-of-sync bit (the peer lost our link group).
 */
static int recv_or_decline(struct usmc_conn *c, uint8_t *buf, size_t cap, uint8_t want,
			   struct clc_accept_confirm *ac)
{
	struct clc_hdr hdr;
	int len = clc_io_recv(c->fd, buf, cap, (int)c->opts.v[USMC_OPT_CLC_TIMEOUT_MS], &hdr);
	int rc;

	if (len < 0)
		return len;
	if (hdr.type == CLC_DECLINE) {
		struct clc_decline d;

		rc = clc_decline_decode(buf, (size_t)len, &d);
		if (rc)
			return USMC_EPROTO_CLC;
		conn_set_mode(c, USMC_MODE_TCP, d.diagnosis, true);
		return d.out_of_sync ? 2 : 1;
	}
	if (hdr.type != want)
		return USMC_EPROTO_CLC;
	rc = clc_accept_confirm_decode(buf, (size_t)len, ac);
	if (rc || ac->version < CLC_V2 || ac->smcd)
		return USMC_EPROTO_CLC;
	return 0;
}

/* Decline with @reason and continue over TCP. */
static int decline_fallback(struct usmc_conn *c, uint32_t reason, bool out_of_sync)
{
	struct clc_decline d = {.version = CLC_V2,
				.typev1 = CLC_TYPE_R,
				.diagnosis = reason,
				.os_type = CLC_OS_LINUX,
				.out_of_sync = out_of_sync};
	uint8_t buf[CLC_DECLINE_V2_LEN];
	int len, rc;

	memcpy(d.peer_id, c->ctx->rdma.system_id, CLC_PEER_ID_LEN);
	len = clc_decline_encode(&d, buf, sizeof(buf));
	rc = len < 0 ? len : clc_io_send(c->fd, buf, (size_t)len);
	if (rc)
		return rc;
	conn_set_mode(c, USMC_MODE_TCP, reason, false);
	return 0;
}

static void smcr_established(struct usmc_conn *c, struct smcr_conn *sc)
{
	c->smcr = sc;
	lgr_watch_tcp(sc->lgr, sc, c->fd);
	conn_set_mode(c, USMC_MODE_SMCR, USMC_REASON_NONE, false);
	/* publish the initial readiness (data may already have arrived) */
	smcr_conn_fail(sc, 0);
}

/* ==== client ==== */

static void build_proposal(struct usmc_ctx *ctx, const struct smcr_dev *dev, struct clc_proposal *p)
{
	memset(p, 0, sizeof(*p));
	p->version = CLC_V2;
	p->typev1 = CLC_TYPE_N;
	p->typev2 = CLC_TYPE_R;
	/* §8.2 advice: fill the local fields though Linux leaves them zero */
	memcpy(p->peer_id, ctx->rdma.system_id, CLC_PEER_ID_LEN);
	memcpy(p->gid, dev->gid, CLC_GID_LEN);
	memcpy(p->mac, dev->mac, CLC_MAC_LEN);
	p->has_smcd_info = true;
	p->has_v2_ext = true;
	p->eid_count = 1;
	smcr_ctx_ueid(ctx, p->eid[0]);
	p->release = SMCR_RELEASE;
	memcpy(p->roce_gid, dev->gid, CLC_GID_LEN);
	p->max_conns = SMCR_MAX_CONNS;
	p->max_links = SMCR_MAX_LINKS;
	p->feature_mask = SMCR_FEATURE_MASK;
}

/* Checks of a first-contact ACCEPT (§8.1); 0 or the decline reason. */
static uint32_t client_check_fc(const struct clc_accept_confirm *a)
{
	if (a->fce.release >= CLC_RELEASE_1) {
		if (a->fce.max_conns < SMCR_MIN_CONNS)
			return SMC_CLC_DECL_MAXCONNERR;
		if (a->fce.max_links < 1 || a->fce.max_links > 2)
			return SMC_CLC_DECL_MAXLINKERR;
	}
	return 0;
}

static int client_first_contact(struct usmc_conn *c, const struct smcr_dev *dev,
				const struct clc_accept_confirm *a)
{
	struct clc_accept_confirm m;
	struct llc_msg req;
	struct smcr_conn *sc = NULL;
	struct lgr *lgr;
	uint8_t release = a->fce.release > SMCR_RELEASE ? SMCR_RELEASE : a->fce.release;
	uint32_t reason = client_check_fc(a);
	int rc;

	if (reason)
		return decline_fallback(c, reason, false);
	rc = lgr_create(c->ctx, false, dev, &lgr);
	if (rc)
		return decline_fallback(c, SMC_CLC_DECL_MEM, false);
	memcpy(lgr->peer_id, a->peer_id, SMCR_SYSTEM_ID_LEN);
	memcpy(lgr->peer_mac, a->mac, 6);
	rc = smcr_conn_new(lgr, &c->opts, &sc);
	if (!rc)
		rc = lgr_qp_rtr(lgr, a->qpn, a->psn, a->gid, mtu_min(dev->active_mtu, a->qp_mtu));
	if (!rc)
		rc = lgr_start(lgr);
	if (rc) {
		reason = SMC_CLC_DECL_MEM;
		goto decline;
	}
	smcr_conn_set_peer(sc, a);
	fill_ac(&m, CLC_CONFIRM, lgr, sc, true);
	m.qp_mtu = (uint8_t)mtu_min(dev->active_mtu, a->qp_mtu);
	memcpy(m.eid, a->eid, CLC_EID_LEN);
	fill_fce(&m.fce, release, a->fce.max_conns, a->fce.max_links);
	m.fce.feature_mask = a->fce.feature_mask & SMCR_FEATURE_MASK;
	m.gid_count = 1;
	memcpy(m.gids[0], dev->gid, CLC_GID_LEN);
	rc = send_ac(c->fd, &m);
	if (rc)
		goto fail;
	rc = lgr_wait_confirm_link(lgr, SMCR_CL_WAIT_MS, &req);
	if (!rc && !(req.flags & LLC_FLAG_NO_RMBE_EYEC)) {
		reason = SMC_CLC_DECL_RMBE_EC;
		goto decline;
	}
	if (!rc)
		rc = lgr_qp_rts(lgr);
	if (rc) {
		reason = SMC_CLC_DECL_TIMEOUT_CL;
		goto decline;
	}
	lgr->link_num = req.confirm_link.link_num;
	lgr->max_conns = release >= CLC_RELEASE_1 ? a->fce.max_conns : SMCR_MAX_CONNS;
	llc_make_response(&req);
	memcpy(req.confirm_link.mac, dev->mac, 6);
	memcpy(req.confirm_link.gid, dev->gid, 16);
	req.confirm_link.qpn = lgr->qp->qp_num;
	rc = lgr_llc_send(lgr, &req);
	if (rc)
		goto fail;
	atomic_store(&lgr->state, LGR_ACTIVE);
	lgr_publish(lgr);
	smcr_established(c, sc);
	return 0;
decline:
	if (sc)
		lgr_conn_del(lgr, sc), smcr_conn_put(sc);
	lgr_free(lgr);
	return decline_fallback(c, reason, false);
fail:
	if (sc)
		lgr_conn_del(lgr, sc), smcr_conn_put(sc);
	lgr_free(lgr);
	return rc;
}

/* Reuse @lgr (from lgr_find(), NULL if none: out of sync). */
static int client_reuse(struct usmc_conn *c, const struct clc_accept_confirm *a, struct lgr *lgr)
{
	struct clc_accept_confirm m;
	struct smcr_conn *sc;
	int rc;

	if (!lgr)
		return decline_fallback(c, SMC_CLC_DECL_SYNCERR, true);
	rc = smcr_conn_new(lgr, &c->opts, &sc);
	lgr_unuse(lgr);
	if (rc)
		return decline_fallback(c, SMC_CLC_DECL_MEM, false);
	smcr_conn_set_peer(sc, a);
	if (confirm_rkey(lgr, sc)) {
		lgr_conn_del(lgr, sc);
		smcr_conn_put(sc);
		return decline_fallback(c, SMC_CLC_DECL_ERR_REGBUF, false);
	}
	fill_ac(&m, CLC_CONFIRM, lgr, sc, false);
	memcpy(m.eid, a->eid, CLC_EID_LEN);
	rc = send_ac(c->fd, &m);
	if (rc) {
		lgr_conn_del(lgr, sc);
		smcr_conn_put(sc);
		return rc;
	}
	smcr_established(c, sc);
	return 0;
}

/* A non-first-contact ACCEPT names a link group that a concurrent connect
 * of ours may still be confirming (§6): wait for it, boundedly. */
#define CLIENT_REUSE_WAIT_MS 2000

int smcr_clc_connect(struct usmc_conn *c)
{
	struct smcr_ctx *s = &c->ctx->rdma;
	uint8_t buf[CLC_ACCEPT_MAX_LEN];
	struct clc_accept_confirm a;
	struct clc_proposal p;
	struct smcr_dev dev;
	struct lgr *lgr;
	long deadline;
	int len, rc;

	if (find_dev(c, &dev)) {
		/* no device: not a byte of CLC, the server sees a TCP client;
		 * a kernel-compat server that expects CLC gets a DECLINE */
		rc = kcompat_client_decline(c->kc_peer, c->fd, USMC_REASON_NOSMCRDEV);
		if (rc)
			return rc;
		conn_set_mode(c, USMC_MODE_TCP, USMC_REASON_NOSMCRDEV, false);
		return 0;
	}
	build_proposal(c->ctx, &dev, &p);
	len = clc_proposal_encode(&p, buf, sizeof(buf));
	if (len < 0)
		return len;
	/* THE RULE: the proposal goes right after the connect, never later */
	rc = clc_io_send(c->fd, buf, (size_t)len);
	if (!rc)
		rc = recv_or_decline(c, buf, sizeof(buf), CLC_ACCEPT, &a);
	if (rc)
		return rc > 0 ? 0 : rc;
	/* LGR creation is serialised per role (§6) */
	deadline = smcr_now_ms() + CLIENT_REUSE_WAIT_MS;
	for (;;) {
		pthread_mutex_lock(&s->create_lock[ROLE_CLIENT]);
		if (a.first_contact) {
			rc = client_first_contact(c, &dev, &a);
			break;
		}
		/* the lock only makes a first contact in progress finish */
		lgr = lgr_find(c->ctx, false, a.peer_id, a.gid, a.qpn, true);
		pthread_mutex_unlock(&s->create_lock[ROLE_CLIENT]);
		if (lgr || smcr_now_ms() >= deadline)
			return client_reuse(c, &a, lgr);
		usleep(10000);
	}
	pthread_mutex_unlock(&s->create_lock[ROLE_CLIENT]);
	return rc > 0 ? 0 : rc;
}

/* ==== server ==== */

/* §8.1 server checks before any device work: 0 or the decline reason. */
static uint32_t serve_check(struct usmc_ctx *ctx, const struct clc_proposal *p, uint8_t *eid_idx)
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
	smcr_ctx_ueid(ctx, ueid);
	for (uint8_t i = 0; i < p->eid_count; i++)
		if (!memcmp(p->eid[i], ueid, CLC_EID_LEN)) {
			*eid_idx = i;
			return 0;
		}
	return SMC_CLC_DECL_NOSMCDEV; /* as Linux: no common UEID */
}

struct serve_neg {
	uint8_t release, max_conns, max_links;
	const uint8_t *eid;
};

static int serve_reuse(struct usmc_conn *c, struct lgr *lgr, const struct serve_neg *n)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_accept_confirm m, conf;
	struct smcr_conn *sc;
	int rc;

	rc = smcr_conn_new(lgr, &c->opts, &sc);
	lgr_unuse(lgr);
	pthread_mutex_unlock(&c->ctx->rdma.create_lock[ROLE_SERVER]);
	if (rc)
		return decline_fallback(c, SMC_CLC_DECL_MEM, false);
	if (confirm_rkey(lgr, sc)) {
		rc = decline_fallback(c, SMC_CLC_DECL_ERR_REGBUF, false);
		goto drop;
	}
	fill_ac(&m, CLC_ACCEPT, lgr, sc, false);
	memcpy(m.eid, n->eid, CLC_EID_LEN);
	rc = send_ac(c->fd, &m);
	if (!rc)
		rc = recv_or_decline(c, buf, sizeof(buf), CLC_CONFIRM, &conf);
	if (rc == 2) /* §1.4: the client has no such LGR: ours is useless */
		lgr_terminate(lgr, -ECONNABORTED, true);
	if (rc)
		goto drop;
	smcr_conn_set_peer(sc, &conf);
	smcr_established(c, sc);
	return 0;
drop:
	lgr_conn_del(lgr, sc);
	smcr_conn_put(sc);
	return rc > 0 ? 0 : rc;
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

	memcpy(req.confirm_link.mac, lgr->dev.mac, 6);
	memcpy(req.confirm_link.gid, lgr->dev.gid, 16);
	req.confirm_link.qpn = lgr->qp->qp_num;
	req.confirm_link.link_num = lgr->link_num;
	req.confirm_link.link_uid = lgr->id + lgr->link_num;
	req.confirm_link.max_links = n->release >= CLC_RELEASE_1 ? n->max_links : 2;
	req.confirm_link.max_conns = n->release >= CLC_RELEASE_1 ? n->max_conns : 0;
	return lgr_llc_flow(lgr, &req, &resp);
}

static int serve_first_contact(struct usmc_conn *c, const struct smcr_dev *dev,
			       const struct clc_proposal *p, const struct serve_neg *n)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_accept_confirm m, conf;
	struct smcr_conn *sc = NULL;
	struct lgr *lgr;
	uint32_t reason = SMC_CLC_DECL_MEM;
	int rc;

	rc = lgr_create(c->ctx, true, dev, &lgr);
	if (rc)
		return decline_fallback(c, SMC_CLC_DECL_MEM, false);
	memcpy(lgr->peer_id, p->peer_id, SMCR_SYSTEM_ID_LEN);
	memcpy(lgr->peer_gid, p->roce_gid, 16);
	memcpy(lgr->peer_mac, p->mac, 6);
	lgr->max_conns = n->max_conns;
	if (smcr_conn_new(lgr, &c->opts, &sc))
		goto decline;
	fill_ac(&m, CLC_ACCEPT, lgr, sc, true);
	memcpy(m.eid, n->eid, CLC_EID_LEN);
	fill_fce(&m.fce, n->release, n->max_conns, n->max_links);
	rc = send_ac(c->fd, &m);
	if (!rc)
		rc = recv_or_decline(c, buf, sizeof(buf), CLC_CONFIRM, &conf);
	if (rc)
		goto out;
	reason = serve_check_confirm(&conf, n);
	if (reason)
		goto decline;
	smcr_conn_set_peer(sc, &conf);
	reason = SMC_CLC_DECL_ERR_RDYLNK;
	if (lgr_qp_rtr(lgr, conf.qpn, conf.psn, p->roce_gid,
		       mtu_min(dev->active_mtu, conf.qp_mtu)) ||
	    lgr_qp_rts(lgr) || lgr_start(lgr))
		goto decline;
	reason = SMC_CLC_DECL_TIMEOUT_CL;
	if (serve_confirm_link(lgr, n))
		goto decline;
	atomic_store(&lgr->state, LGR_ACTIVE);
	lgr_publish(lgr);
	smcr_established(c, sc);
	return 0;
decline:
	rc = decline_fallback(c, reason, false);
out:
	if (sc) {
		lgr_conn_del(lgr, sc);
		smcr_conn_put(sc);
	}
	lgr_free(lgr);
	return rc > 0 ? 0 : rc;
}

int smcr_clc_serve(struct usmc_conn *c, const struct clc_proposal *p)
{
	struct smcr_ctx *s = &c->ctx->rdma;
	struct serve_neg n;
	struct smcr_dev dev;
	struct lgr *lgr;
	uint8_t eid_idx = 0;
	uint32_t reason = serve_check(c->ctx, p, &eid_idx);
	int rc;

	/* a host without any SMC-R device says so first (Linux would name
	 * a UEID mismatch first; the device is the more useful answer) */
	if (!ctx_has_smcr_device(c->ctx))
		return decline_fallback(c, SMC_CLC_DECL_NOSMCRDEV, false);
	if (reason)
		return decline_fallback(c, reason, false);
	if (find_dev(c, &dev))
		return decline_fallback(c, SMC_CLC_DECL_NOSMCRDEV, false);
	n.release = p->release > SMCR_RELEASE ? SMCR_RELEASE : p->release;
	n.max_conns = p->max_conns < SMCR_MAX_CONNS ? p->max_conns : SMCR_MAX_CONNS;
	n.max_links = p->max_links < SMCR_MAX_LINKS ? p->max_links : SMCR_MAX_LINKS;
	n.eid = p->eid[eid_idx];
	pthread_mutex_lock(&s->create_lock[ROLE_SERVER]);
	lgr = lgr_find(c->ctx, true, p->peer_id, p->roce_gid, 0, false);
	if (lgr)
		return serve_reuse(c, lgr, &n); /* unlocks */
	rc = serve_first_contact(c, &dev, p, &n);
	pthread_mutex_unlock(&s->create_lock[ROLE_SERVER]);
	return rc;
}
