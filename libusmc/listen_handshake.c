// SPDX-License-Identifier: MIT
#include <errno.h>

#include "clc.h"
#include "clc_io.h"
#include "conn.h"
#include "ctx.h"
#include "listen_handshake.h"
#include "smcr_clc.h"
#include "wire_err.h"

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

int listen_handshake(struct usmc_conn *c)
{
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct clc_proposal prop;
	struct clc_hdr hdr;
	int len, rc;

	len = clc_io_recv(c->fd, buf, sizeof(buf), (int)c->opts.v[USMC_OPT_CLC_TIMEOUT_MS], &hdr);
	rc = proposal_of(buf, len, &hdr, &prop);
	if (rc)
		return wire_is_err(rc) ? USMC_EPROTO_CLC : rc;
	if (c->opts.v[USMC_OPT_SMC] && prop.version >= CLC_V2) {
		struct smcr_hs hs;

		conn_hs_init(c, &hs);
		hs.have_device = ctx_has_smcr_device(c->ctx);
		return conn_apply_handshake(c, smcr_clc_serve(&hs, &prop), &hs);
	}
	/* SMC-R v1 (RoCE v1 GIDs) is not offered: decline in the proposal's
	 * version, both ends continue over TCP */
	usmc_log(&c->ctx->log, USMC_LOG_INFO, "CLC: DECLINE to %s: %s (0x%08x), SMC-R v%u%s",
		 log_peer(c->fd).s, log_reason(SMC_CLC_DECL_NOSMCRDEV), SMC_CLC_DECL_NOSMCRDEV,
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
	int len = clc_io_take(c->fd, buf, sizeof(buf), &hdr);
	int rc = proposal_of(buf, len, &hdr, &prop);

	if (rc)
		return rc;
	/* a DECLINE (<= 44 bytes) always fits a new socket's send buffer */
	return clc_io_send_decline(c->fd, prop.version, NULL, reason);
}
