/* SPDX-License-Identifier: MIT */
/* Server side of the CLC handshake, run by a listener's handshake worker. */
#ifndef USMC_SRV_CLC_H
#define USMC_SRV_CLC_H

#include <stdint.h>

struct usmc_conn;

/*
 * srv_clc_handshake() - the client's first bytes were a CLC PROPOSAL
 * header: read the PROPOSAL, then accept (SMC-R) or decline (TCP).
 * Returns 0 when @c reached its final mode (USMC_MODE_SMCR or TCP), or a
 * negative error when the connection must be dropped (malformed CLC,
 * timeout, peer gone), as Linux drops it without a fallback.
 */
int srv_clc_handshake(struct usmc_conn *c);

/*
 * srv_clc_decline_now() - without blocking, read the complete PROPOSAL that
 * is waiting on @c's socket and answer it with a DECLINE of @reason; @c is
 * then TCP. Returns 0, -EAGAIN if the PROPOSAL is not complete yet (nothing
 * consumed), or a negative error (malformed: drop the connection).
 */
int srv_clc_decline_now(struct usmc_conn *c, uint32_t reason);

#endif
