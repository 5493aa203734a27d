// SPDX-License-Identifier: MIT
/*
 * The SMC-Rv2 CLC handshake, what both roles use (smcr_clc.h; message
 * layouts net/smc/smc_clc.h): the local device and the peer's address, the
 * ACCEPT/CONFIRM both sides fill in, CONFIRM_RKEY on a reused link group,
 * reading the next CLC message or the peer's DECLINE, and declining.
 * Positive reasons decline and fall back to TCP on the same socket;
 * timeouts and malformed messages fail the connection. The client is in
 * smcr_clc_client.c, the server in smcr_clc_server.c.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bufpool.h"
#include "clc_io.h"
#include "clock.h"
#include "lgr.h"
#include "log.h"
#include "reason.h"
#include "smcr_clc.h"
#include "smcr_conn.h"

#define SMCR_RMBE_IDX 1 /* one RMBE per RMB, as Linux */

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
int smcr_hs_peer_ipv4(const struct smcr_hs *hs, struct in_addr *addr)
{
	return hs->peer ? smcr_addr_ipv4(hs->peer, addr) : sock_ipv4(hs->fd, true, addr);
}

int smcr_hs_find_dev(const struct smcr_hs *hs, struct smcr_dev *dev)
{
	struct in_addr a;

	return sock_ipv4(hs->fd, false, &a) ? -ENODEV : smcr_dev_lookup(hs->sctx, &a, dev);
}

/*
 * SMC-Rv2 direct (the only kind libusmc speaks, docs/smcr.md): the peer's
 * RoCE GID is its IPv4 address, mapped. A GID that is not the TCP peer's
 * would point our QP at a third host.
 */
bool smcr_clc_gid_is_addr(const uint8_t gid[SMCR_GID_LEN], struct in_addr addr)
{
	return smcr_gid_is_v4mapped(gid) && !memcmp(gid + 12, &addr.s_addr, 4);
}

struct lgr_config smcr_clc_lgr_config(const struct usmc_opts *o)
{
	return (struct lgr_config){.busy_poll = o->v[USMC_OPT_BUSY_POLL] != 0,
				   .spin = o->v[USMC_OPT_SPIN] != 0,
				   .testlink_ms = o->v[USMC_OPT_TESTLINK_MS],
				   .idle_ms = o->v[USMC_OPT_LGR_IDLE_MS],
				   .max_bufs = (uint32_t)o->v[USMC_OPT_MAX_BUFS],
				   .max_lgrs = (int)o->v[USMC_OPT_MAX_LGRS],
				   .max_per_peer = (int)o->v[USMC_OPT_MAX_LGRS_PER_PEER]};
}

int smcr_hs_conn_new(const struct smcr_hs *hs, struct lgr *lgr, struct smcr_conn **sc)
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

uint8_t smcr_clc_max_links(const struct usmc_opts *opts)
{
	long want = opts->v[USMC_OPT_MAX_LINKS];

	return want > SMCR_MAX_LINKS ? SMCR_MAX_LINKS : (uint8_t)want;
}

void smcr_clc_fill_fce(struct clc_fce *f, uint8_t release, uint8_t max_conns, uint8_t max_links)
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
void smcr_clc_fill_ac(struct clc_accept_confirm *m, uint8_t type, struct lgr *lgr,
		      struct smcr_conn *sc, bool fc)
{
	int slot = smcr_conn_link_slot(sc);
	const struct smcr_link *lnk = &lgr->lnk[slot];

	memset(m, 0, sizeof(*m));
	m->type = type;
	m->version = CLC_V2;
	m->first_contact = fc;
	memcpy(m->peer_id, lgr->sctx->system_id, CLC_PEER_ID_LEN);
	memcpy(m->gid, lnk->dev.gid, CLC_GID_LEN);
	memcpy(m->mac, lnk->dev.mac, CLC_MAC_LEN);
	m->qpn = lnk->qp->qp_num;
	m->rmb_rkey = bufpool_buf_rkey(sc->rmb, slot); /* the rkey for its link */
	m->rmbe_idx = SMCR_RMBE_IDX;
	m->rmbe_alert_token = sc->token;
	m->rmbe_size = sc->rmb->class;
	m->qp_mtu = (uint8_t)lnk->dev.active_mtu;
	m->rmb_dma_addr = (uintptr_t)sc->rmb->addr;
	m->psn = lnk->psn;
}

int smcr_clc_send_ac(int fd, const struct clc_accept_confirm *m)
{
	uint8_t buf[CLC_ACCEPT_MAX_LEN];
	int len = clc_accept_confirm_encode(m, buf, sizeof(buf));

	return len < 0 ? len : clc_io_send(fd, buf, (size_t)len);
}

/* The peer's RMB as its ACCEPT or CONFIRM describes it. */
int smcr_clc_set_peer_rmb(struct smcr_conn *sc, const struct clc_accept_confirm *m)
{
	struct smcr_peer_rmb peer = {.token = m->rmbe_alert_token,
				     .rkey = m->rmb_rkey,
				     .dma_addr = m->rmb_dma_addr,
				     .rmbe_idx = m->rmbe_idx,
				     .size_class = m->rmbe_size};

	return smcr_conn_set_peer(sc, &peer);
}

void smcr_clc_rkey_request(const struct smcr_conn *sc, struct llc_msg *req)
{
	struct lgr *lgr = sc->lgr;
	const struct bufpool_buf *rmb = sc->rmb;
	int fslot = smcr_llc_link_slot(lgr); /* the link the flow goes over */
	struct llc_confirm_rkey *c = &req->confirm_rkey;

	memset(req, 0, sizeof(*req));
	req->version = LLC_V2;
	req->type = LLC_CONFIRM_RKEY;
	c->rkey = lgr_rmb_rkey(lgr, rmb, fslot);
	c->vaddr = (uintptr_t)rmb->addr;
	/* every other link's rkey of it (net/smc/smc_llc.c
	 * smc_llc_send_confirm_rkey()), the address the same on each: the
	 * active ones, and one being added once the RMB has its registration
	 * there (the add-link's rkey list may have been built before this
	 * RMB was in use; a link number the peer does not know yet it skips) */
	for (int i = 0; i < SMCR_LINKS_MAX && c->num_extra < LLC_CONFIRM_RKEY_EXTRA; i++) {
		const struct smcr_link *lnk = &lgr->lnk[i];
		int state = atomic_load(&lnk->state);

		if (i == fslot ||
		    !(state == SMCR_LNK_ACTIVE || (state == SMCR_LNK_ACTIVATING &&
						   (bufpool_regs_active(lgr->rmbs) & (1u << i)))))
			continue;
		c->extra[c->num_extra++] = (struct llc_rtoken){.link_id = lnk->link_num,
							       .rkey = lgr_rmb_rkey(lgr, rmb, i),
							       .vaddr = (uintptr_t)rmb->addr};
	}
}

/*
 * CONFIRM_RKEY for an RMB on a reused link group (both roles), unless the
 * peer holds its rkey already: an RMB that comes back from the pool with
 * the rkey it had needs no LLC flow (smcr_conn.c sc_keep_rkey()); a new or
 * re-keyed one does (net/smc/af_smc.c smcr_lgr_reg_rmbs()).
 */
/*
 * The peer holds our RMB's rkey already: it came back from the pool with
 * the rkey the peer confirmed. With more than one link up (or coming up)
 * the RMB may have sat in the pool when a link was added, which the peer
 * never learnt its rkey for (ADD_LINK names the RMBs in use): then it is
 * confirmed again, on every link, as Linux does each time. Not when no
 * link was made since the peer was last told its rkeys on every link
 * (its CONFIRM_RKEY, whose additional entries name the other links'; or
 * the first contact, with one link): the link group's links_made is
 * counted before a new link's slot goes live, so a link added since
 * shows, and a CONFIRM_RKEY built before it, or while it came up
 * (rkey_links_now()), counts as before it.
 */
static bool rkey_known(struct lgr *lgr, const struct smcr_conn *sc)
{
	return sc->rmb->rkey_confirmed &&
	       (lgr_links_live(lgr) < 2 || sc->rmb->rkey_links == atomic_load(&lgr->links_made));
}

/*
 * What a CONFIRM_RKEY built now tells the peer: every link's rkey of the
 * RMB, unless a link is still coming up. The peer may not know that one's
 * number yet (it skips the entry), and the ADD_LINK's rkey list names
 * only the RMBs in use when it was built: counted as not told, so the
 * next reuse confirms it again.
 */
static unsigned int rkey_links_now(struct lgr *lgr)
{
	unsigned int n = atomic_load(&lgr->links_made);

	return lgr_links_live(lgr) != lgr_links_active(lgr) ? n - 1 : n;
}

int smcr_clc_confirm_rkey(struct lgr *lgr, struct smcr_conn *sc)
{
	struct llc_msg req, resp;

	if (rkey_known(lgr, sc))
		return 0;
	sc->rkey_links = rkey_links_now(lgr);
	smcr_clc_rkey_request(sc, &req);
	return smcr_clc_rkey_answered(sc, smcr_llc_flow(lgr, &req, &resp), &resp);
}

int smcr_clc_rkey_start(struct lgr *lgr, struct smcr_conn *sc, uint32_t *flow)
{
	struct llc_msg req;

	*flow = 0;
	if (rkey_known(lgr, sc))
		return 0;
	sc->rkey_links = rkey_links_now(lgr);
	smcr_clc_rkey_request(sc, &req);
	return smcr_llc_flow_start(lgr, &req, flow);
}

int smcr_clc_rkey_answered(struct smcr_conn *sc, int rc, const struct llc_msg *resp)
{
	if (!rc && (resp->flags & LLC_FLAG_RKEY_NEG))
		rc = -EIO;
	if (!rc) {
		sc->rmb->rkey_confirmed = true;
		sc->rmb->rkey_links = sc->rkey_links;
	}
	return rc;
}

int smcr_hs_tcp(struct smcr_hs *hs, uint32_t reason, bool peer_declined)
{
	hs->reason = reason;
	hs->peer_declined = peer_declined;
	return SMCR_HS_TCP;
}

/*
 * What the next CLC message (@len bytes in @buf, or @len the error of
 * reading it) is: the @want type decoded into @ac, or a DECLINE (recorded
 * in @hs). A negative value for anything else. smcr_hs_recv() receives
 * it first, waiting; the asynchronous client reads it without waiting
 * (smcr_clc_answer()).
 */
int smcr_hs_classify(struct smcr_hs *hs, const uint8_t *buf, int len, const struct clc_hdr *hdr,
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
		smcr_hs_tcp(hs, d.diagnosis, true);
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

int smcr_hs_recv(struct smcr_hs *hs, uint8_t *buf, size_t cap, uint8_t want,
		 struct clc_accept_confirm *ac, int timeout_ms)
{
	struct clc_hdr hdr;
	int len = clc_io_recv(hs->fd, buf, cap, timeout_ms, hs->waiting, &hdr);

	hs->waiting = 0; /* taken, or the handshake failed */
	return smcr_hs_classify(hs, buf, len, &hdr, want, ac);
}

/* @ms from now, or the handshake's deadline if that comes first. */
long smcr_hs_deadline(const struct smcr_hs *hs, long ms)
{
	long t = clock_now_ms() + ms;

	return hs->deadline_ms && hs->deadline_ms < t ? hs->deadline_ms : t;
}

/* How long the next CLC message may take: USMC_OPT_CLC_TIMEOUT_MS, and
 * never past the handshake's deadline. */
int smcr_hs_wait_ms(const struct smcr_hs *hs)
{
	long left = smcr_hs_deadline(hs, hs->opts->v[USMC_OPT_CLC_TIMEOUT_MS]) - clock_now_ms();

	return left > 0 ? (int)left : 0;
}

/* Decline with @reason and continue over TCP. */
int smcr_hs_decline(struct smcr_hs *hs, uint32_t reason, bool out_of_sync)
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
	return rc ? rc : smcr_hs_tcp(hs, reason, false);
}

int smcr_hs_await_decline(struct smcr_hs *hs, int timeout_ms)
{
	uint8_t buf[CLC_DECLINE_V2_LEN];
	long left = smcr_hs_deadline(hs, timeout_ms) - clock_now_ms();
	struct clc_hdr hdr;
	int len = clc_io_await_decline(hs->fd, buf, sizeof(buf), left > 0 ? (int)left : 0, &hdr);

	return len > 0 ? smcr_hs_classify(hs, buf, len, &hdr, CLC_DECLINE, NULL) : len;
}

/*
 * The client's first-contact CONFIRM_LINK did not come. The server cannot
 * have had our answer, so it declines: Linux's after SMC_LLC_WAIT_TIME,
 * CLC_WAIT_TIME_SHORT and its link's teardown
 * (smcr_serv_conf_first_link(), smc_listen_decline()), ours after the same
 * two waits. A DECLINE of ours would cross it and land in the server's
 * fallen-back stream as 44 bytes of data, so none is sent: wait for the
 * server's up to @window_ms and take it; at that bound, or on the first
 * bytes that are not a DECLINE (the server is on TCP already), go on over
 * TCP with @reason. Linux's client declines itself after its wait
 * (smc_connect_decline_fallback()): where we deviate, docs/smcr.md.
 */
int smcr_hs_server_declined(struct smcr_hs *hs, uint32_t reason, int rc)
{
	if (smcr_hs_rx_declined(rc))
		return SMCR_HS_TCP;
	if (rc < 0 && rc != -ETIMEDOUT)
		return rc;
	usmc_log(hs->sctx->log, USMC_LOG_INFO, "CLC: no DECLINE from %s %s: TCP without one",
		 log_peer(hs->fd).s, rc ? "in time" : "before other bytes");
	return smcr_hs_tcp(hs, reason, false);
}

int smcr_hs_await_server_decline(struct smcr_hs *hs, uint32_t reason, int window_ms)
{
	return smcr_hs_server_declined(hs, reason, smcr_hs_await_decline(hs, window_ms));
}

/* After a handshake step: a DECLINE received means TCP, else the error. */
int smcr_hs_declined_or(struct smcr_hs *hs, int rc)
{
	(void)hs;
	return smcr_hs_rx_declined(rc) ? SMCR_HS_TCP : rc;
}

int smcr_hs_established(struct smcr_hs *hs, struct smcr_conn *sc)
{
	/* a first contact's CLC confirmed the RMB's rkey implicitly (Linux:
	 * smc_connect_rdma() and smc_listen_rdma_reg() set is_conf_rkey) */
	sc->rmb->rkey_confirmed = true;
	smcr_conn_establish(sc, hs->fd);
	hs->sc = sc;
	return SMCR_HS_SMCR;
}
