/* SPDX-License-Identifier: MIT */
/*
 * The server side of the CLC handshake, as a listener runs it: in full on a
 * handshake worker (listen_handshake()), or, for the congestion DECLINE, at
 * once on the accept thread (listen_decline_now()). The client side and the
 * SMC-R part of the server (ACCEPT, CONFIRM, link setup) are in smcr_clc.c.
 */
#ifndef USMC_LISTEN_HANDSHAKE_H
#define USMC_LISTEN_HANDSHAKE_H

#include <stdbool.h>
#include <stdint.h>

struct usmc_conn;
struct usmc_ctx;
struct smcr_claim_watch;

/* How long a worker waits for the client's CONFIRM before it parks the
 * handshake: an honest client answers within a round trip or two, a slow
 * one must not hold the worker. */
#define LISTEN_HS_PARK_MS 20

/* listen_handshake(): @c waits for the client's next CLC message without
 * a worker; the listener calls listen_handshake() again once it is there
 * (or the handshake's deadline passed). */
#define LISTEN_HS_PARKED 1

/*
 * listen_handshake() - one worker step of @c's handshake. First: the
 * client's whole PROPOSAL is waiting (the probe saw to it): read it, then
 * decline (TCP) or send the ACCEPT. Next, if it was parked: the CONFIRM.
 * Returns 0 when @c reached its final mode (USMC_MODE_SMCR or TCP),
 * LISTEN_HS_PARKED, or a negative error when the connection must be
 * dropped (malformed CLC, timeout, peer gone), as Linux drops it without
 * a fallback. No step waits past USMC_OPT_HS_TIMEOUT_MS from the accept.
 */
int listen_handshake(struct usmc_conn *c);

/* listen_hs_waits_claim() - @c is parked until another handshake's first
 * contact with its peer ends (retried then, not watched for bytes). */
bool listen_hs_waits_claim(const struct usmc_conn *c);

/* listen_hs_claim_ended() - a first contact of @c's context ended since
 * @c's handshake found its peer's in progress: worth asking again. */
bool listen_hs_claim_ended(const struct usmc_conn *c);

/* listen_hs_watch_claims() - from @on until called with !@on, @w->ended
 * is called (with no lock of the listener's held, and it may take none)
 * each time a first contact of @ctx ends. */
void listen_hs_watch_claims(struct usmc_ctx *ctx, struct smcr_claim_watch *w, bool on);

/* listen_hs_deadline_ms() - when @c's whole handshake must have ended
 * (clock_now_ms() time). */
long listen_hs_deadline_ms(const struct usmc_conn *c);

/*
 * listen_decline_now() - without blocking, read the complete PROPOSAL that
 * is waiting on @c's socket and answer it with a DECLINE of @reason; @c is
 * then TCP. Returns 0, -EAGAIN if the PROPOSAL is not complete yet (nothing
 * consumed), or a negative error (malformed: drop the connection).
 */
int listen_decline_now(struct usmc_conn *c, uint32_t reason);

#endif
