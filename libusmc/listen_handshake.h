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
struct smcr_hs_watch;

/* How long a worker waits for the client's CONFIRM before it parks the
 * handshake: an honest client answers within a round trip or two, a slow
 * one must not hold the worker. */
#define LISTEN_HS_PARK_MS 20

/* listen_handshake(): @c waits without a worker for the client's next
 * bytes, or for a handshake event (listen_hs_waits_event()); the listener
 * calls listen_handshake() again once that came, or at
 * listen_hs_park_until_ms(). */
#define LISTEN_HS_PARKED 1

/*
 * listen_handshake() - one worker step of @c's handshake. First: the
 * client's whole PROPOSAL is waiting (the probe saw to it): read it, then
 * decline (TCP) or send the ACCEPT. Next, each time it was parked: the
 * step it parked at (smcr_clc_serve()).
 * Returns 0 when @c reached its final mode (USMC_MODE_SMCR or TCP),
 * LISTEN_HS_PARKED, or a negative error when the connection must be
 * dropped (malformed CLC, timeout, peer gone), as Linux drops it without
 * a fallback. No step waits past USMC_OPT_HS_TIMEOUT_MS from the accept.
 */
int listen_handshake(struct usmc_conn *c);

/*
 * A parked handshake of @c:
 * listen_hs_waits_event() - it waits for a handshake event of the context
 * (another handshake's first contact with its peer, an LLC flow's answer
 * or end), not for bytes: its client has none to send before our next
 * message.
 * listen_hs_event_ready() - what it waits for may have come since it
 * parked: worth a step.
 * listen_hs_park_until_ms() - its step is due by then at the latest
 * (clock_now_ms() time), whatever came.
 */
bool listen_hs_waits_event(const struct usmc_conn *c);
bool listen_hs_event_ready(const struct usmc_conn *c);
long listen_hs_park_until_ms(const struct usmc_conn *c);

/* listen_hs_watch() - from @on until called with !@on, @w->moved is called
 * (with no lock of the listener's held, and it may take none) after each
 * handshake event of @ctx. */
void listen_hs_watch(struct usmc_ctx *ctx, struct smcr_hs_watch *w, bool on);

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
