// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>

#include "clc.h"
#include "clc_io.h"
#include "clock.h"
#include "conn.h"
#include "ctx.h"
#include "error.h"
#include "listen_handshake.h"
#include "smcr_clc.h"

/*
 * The @len bytes of the CLC message read into @buf (or the error reading
 * it) as a PROPOSAL: the only message a client may open with.
 */
static int proposal_of(const uint8_t *buf, int len, const struct clc_hdr *hdr,
		       struct clc_proposal *prop)
{
	if (len < 0)
		return len;
	if (hdr->type != CLC_PROPOSAL)
		return USMC_EPROTO_CLC;
	return clc_proposal_decode(buf, (size_t)len, prop);
}

long listen_hs_deadline_ms(const struct usmc_conn *c)
{
	return (long)(c->t_accept_ns / CLOCK_NSEC_PER_MSEC) + c->opts.v[USMC_OPT_HS_TIMEOUT_MS];
}

static void serve_hs_init(struct usmc_conn *c, struct smcr_hs *hs)
{
	conn_hs_init(c, hs);
	hs->have_device = ctx_has_smcr_device(c->ctx);
	hs->deadline_ms = listen_hs_deadline_ms(c);
	hs->peer = c->peer_len ? &c->peer : NULL; /* conn_keep_peer() */
	hs->waiting = c->clc_waiting;		  /* a parked CONFIRM the accept thread saw */
	c->clc_waiting = 0;
}

/* Milliseconds left before @c's deadline, at most @ms, at least 0. */
static int hs_left_ms(const struct usmc_conn *c, long ms)
{
	long left = listen_hs_deadline_ms(c) - clock_now_ms();

	return left < 0 ? 0 : left < ms ? (int)left : (int)ms;
}

/* The handshake of @c ended with @rc: release what it held. */
static int serve_done(struct usmc_conn *c, int rc, const struct smcr_hs *hs)
{
	free(c->serve);
	c->serve = NULL;
	return conn_apply_handshake(c, rc, hs);
}

/* The ACCEPT just went: take the CONFIRM if it comes soon, else park. An
 * honest client answers within a round trip or two. */
static int serve_after_accept(struct usmc_conn *c, struct smcr_hs *hs)
{
	int len = clc_io_wait(c->fd, CLC_PROPOSAL_MAX_LEN, hs_left_ms(c, LISTEN_HS_PARK_MS));

	if (len == -ETIMEDOUT && hs_left_ms(c, 1) > 0)
		return SMCR_HS_AWAIT_READ;
	hs->waiting = len > 0 ? (size_t)len : 0; /* whole: no second peek */
	return smcr_clc_serve(hs, c->serve);
}

/*
 * The next step of @c's SMC-R handshake (c->serve). It never waits for
 * the peer: a step that needs the client's next bytes, an LLC answer or
 * another handshake's first contact with the same peer parks the
 * handshake, and the accept thread hands it to a worker again when that
 * came (or at the step's bound), so that no worker waits for what may
 * itself wait for a worker.
 */
static int serve_step(struct usmc_conn *c)
{
	bool accepted = c->serve->phase == SERVE_CONFIRM;
	struct smcr_hs hs;
	int rc;

	serve_hs_init(c, &hs);
	rc = smcr_clc_serve(&hs, c->serve);
	if (rc == SMCR_HS_AWAIT_READ && !accepted && c->serve->phase == SERVE_CONFIRM)
		rc = serve_after_accept(c, &hs);
	if (rc == SMCR_HS_AWAIT_READ || rc == SMCR_HS_AWAIT_EVENT)
		return LISTEN_HS_PARKED;
	return serve_done(c, rc, &hs);
}

/* SMC-Rv2 offered: start serving it with the decoded PROPOSAL @prop. */
static int serve_smcr(struct usmc_conn *c, const struct clc_proposal *prop)
{
	/* a worker's syscall, not the accept thread's: an SMC client may
	 * decline and reset seconds from now (a Linux client whose REG_MR
	 * failed); a plain TCP client is named while it lives */
	conn_keep_peer(c);
	c->serve = calloc(1, sizeof(*c->serve));
	if (!c->serve)
		return -ENOMEM;
	c->serve->prop = *prop;
	return serve_step(c);
}

bool listen_hs_waits_event(const struct usmc_conn *c)
{
	return c->serve && c->serve->waits_event;
}

bool listen_hs_event_ready(const struct usmc_conn *c)
{
	return c->serve && smcr_serve_event_ready(c->serve);
}

long listen_hs_park_until_ms(const struct usmc_conn *c)
{
	return c->serve ? c->serve->wait_until_ms : listen_hs_deadline_ms(c);
}

void listen_hs_watch(struct usmc_ctx *ctx, struct smcr_hs_watch *w, bool on)
{
	if (on)
		smcr_ctx_hs_watch(&ctx->rdma, w);
	else
		smcr_ctx_hs_unwatch(&ctx->rdma, w);
}

int listen_handshake(struct usmc_conn *c)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_proposal prop;
	struct clc_hdr hdr;
	int len, rc;

	if (c->serve)
		return serve_step(c);
	/* normally the accept thread saw it whole (c->clc_waiting): one recv() */
	len = clc_io_recv(c->fd, buf, sizeof(buf),
			  hs_left_ms(c, c->opts.v[USMC_OPT_CLC_TIMEOUT_MS]), c->clc_waiting, &hdr);
	c->clc_waiting = 0;
	rc = proposal_of(buf, len, &hdr, &prop);
	if (rc)
		return usmc_err_of_wire(rc);
	if (c->opts.v[USMC_OPT_SMC] && prop.version >= CLC_V2)
		return serve_smcr(c, &prop);
	/* SMC-R v1 (RoCE v1 GIDs) is not offered: decline in the proposal's
	 * version, both ends continue over TCP */
	usmc_log(&c->ctx->log, USMC_LOG_INFO, "CLC: DECLINE to %s: %s (0x%08x), SMC-R v%u%s",
		 conn_log_peer(c).s, log_reason(SMC_CLC_DECL_NOSMCRDEV), SMC_CLC_DECL_NOSMCRDEV,
		 prop.version, c->opts.v[USMC_OPT_SMC] ? " not offered" : " off");
	rc = clc_io_send_decline(c->fd, prop.version, NULL, SMC_CLC_DECL_NOSMCRDEV);
	if (rc)
		return rc;
	conn_set_mode(c, USMC_MODE_TCP, SMC_CLC_DECL_NOSMCRDEV, false);
	return 0;
}

int listen_decline_now(struct usmc_conn *c, uint32_t reason)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_proposal prop;
	struct clc_hdr hdr;
	size_t waiting = c->clc_waiting;
	int len, rc;

	c->clc_waiting = 0;
	/* seen whole (c->clc_waiting): take it without a second peek */
	len = waiting ? clc_io_recv(c->fd, buf, sizeof(buf), 0, waiting, &hdr)
		      : clc_io_take(c->fd, buf, sizeof(buf), &hdr);
	rc = proposal_of(buf, len, &hdr, &prop);
	if (rc)
		return rc;
	/* a DECLINE (<= 44 bytes) always fits a new socket's send buffer */
	return clc_io_send_decline(c->fd, prop.version, NULL, reason);
}
