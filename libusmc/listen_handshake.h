/* SPDX-License-Identifier: MIT */
/*
 * The server side of the CLC handshake, as a listener runs it: in full on a
 * handshake worker (listen_handshake()), or, for the congestion DECLINE, at
 * once on the accept thread (listen_decline_now()). The client side and the
 * SMC-R part of the server (ACCEPT, CONFIRM, link setup) are in smcr_clc.c.
 */
#ifndef USMC_LISTEN_HANDSHAKE_H
#define USMC_LISTEN_HANDSHAKE_H

#include <stdint.h>

struct usmc_conn;

/*
 * listen_handshake() - the client's first bytes were a CLC PROPOSAL
 * header: read the PROPOSAL, then accept (SMC-R) or decline (TCP).
 * Returns 0 when @c reached its final mode (USMC_MODE_SMCR or TCP), or a
 * negative error when the connection must be dropped (malformed CLC,
 * timeout, peer gone), as Linux drops it without a fallback.
 */
int listen_handshake(struct usmc_conn *c);

/*
 * listen_decline_now() - without blocking, read the complete PROPOSAL that
 * is waiting on @c's socket and answer it with a DECLINE of @reason; @c is
 * then TCP. Returns 0, -EAGAIN if the PROPOSAL is not complete yet (nothing
 * consumed), or a negative error (malformed: drop the connection).
 */
int listen_decline_now(struct usmc_conn *c, uint32_t reason);

#endif
