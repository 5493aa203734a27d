/* SPDX-License-Identifier: MIT */
/*
 * The SMC-Rv2 CLC handshake over a connection's TCP socket, both roles
 * (net/smc/af_smc.c smc_connect_rdma() and smc_listen_work()): PROPOSAL,
 * ACCEPT, CONFIRM, then LLC CONFIRM_LINK on a new link group or
 * CONFIRM_RKEY on a reused one. It answers through struct smcr_hs; the
 * caller (the API object) records the mode.
 */
#ifndef USMC_SMCR_CLC_H
#define USMC_SMCR_CLC_H

#include <stdbool.h>
#include <stdint.h>

#include "clc.h"
#include "opts.h"
#include "smcr_ctx.h"

struct smcr_conn;

/* How a handshake ended, when it did not fail (negative errno). */
enum smcr_hs_result {
	SMCR_HS_SMCR = 1, /* on SMC-R: hs->sc is the connection */
	SMCR_HS_TCP,	  /* on TCP: a DECLINE went or came, hs->reason says why */
	SMCR_HS_NODEV,	  /* client: no SMC-R device for the local address, no CLC sent */
};

struct smcr_hs {
	/* in */
	int fd;			      /* the connected TCP socket, blocking */
	struct smcr_ctx *sctx;	      /* the context's SMC-R state */
	const struct usmc_opts *opts; /* CLC timeout, buffer sizes */
	bool have_device;	      /* server: some port can carry SMC-R at all */
	/* out */
	struct smcr_conn *sc; /* SMCR_HS_SMCR */
	uint32_t reason;      /* SMCR_HS_TCP: USMC_REASON_* / CLC decline code */
	bool peer_declined;   /* SMCR_HS_TCP: the peer sent the DECLINE */
};

/*
 * smcr_clc_connect() - client, right after the TCP connect.
 * smcr_clc_serve() - server, with the client's decoded PROPOSAL.
 * Return an enum smcr_hs_result, or a negative errno / USMC_EPROTO_CLC
 * (a malformed or unexpected CLC message): then the connection is unusable.
 */
int smcr_clc_connect(struct smcr_hs *hs);
int smcr_clc_serve(struct smcr_hs *hs, const struct clc_proposal *prop);

#endif
