/* SPDX-License-Identifier: MIT */
/*
 * Telling an SMC client from a plain TCP client without the kernel's SYN
 * option (the rule, and why, is in docs/tcp-path.md): a usmc listener sends
 * nothing first and classifies each new connection by the client's first
 * bytes, peeked so that nothing is consumed. A CLC PROPOSAL header means an
 * SMC client; any other byte, EOF, or silence for USMC_OPT_PROBE_MS (a
 * protocol where the server speaks first) means a plain TCP client.
 *
 * The accept thread also waits, for the handshake pool, for every CLC
 * message of an SMC client that is not whole yet (the PROPOSAL, and the
 * CONFIRM of a parked handshake), so no worker waits on a slow client.
 */
#ifndef USMC_PROBE_H
#define USMC_PROBE_H

#include <stddef.h>
#include <stdint.h>

struct usmc_listener;
struct usmc_conn;
struct probing;

enum probe_verdict {
	PROBE_NEED_MORE, /* a prefix of a CLC PROPOSAL header: wait for more */
	PROBE_SMC,	 /* a CLC PROPOSAL header */
	PROBE_TCP,	 /* anything else */
};

/* Classify a client's first @len bytes (peeked; @len may be 0). */
enum probe_verdict probe_classify(const uint8_t *buf, size_t len);

/* ---- the probe set: accept thread only --------------------------------- */

/*
 * probe_new() - @c was just accepted (and counted in in_handshake): settle
 * it from the bytes already there (to the handshake pool, the accept queue,
 * an at-once DECLINE), or watch it for @wait_ms. Returns 0, or -errno when
 * it could not be watched; @c is then untouched and still the caller's.
 */
int probe_new(struct usmc_listener *l, struct usmc_conn *c, long wait_ms);

/*
 * probe_park() - a worker parked @c's handshake (LISTEN_HS_PARKED): it
 * waits here, without a worker, for the client's next CLC message (the
 * CONFIRM, or a DECLINE) or for a handshake event of the context
 * (listen_hs_waits_event()), then goes back to the pool
 * (listen_handshake() resumes), at listen_hs_park_until_ms() at the latest.
 */
void probe_park(struct usmc_listener *l, struct usmc_conn *c);

/* Retry the handshakes parked for a handshake event whose event may have
 * come (listen_hs_event_ready()), if the context had one since the last
 * call. */
void probes_hs_events(struct usmc_listener *l);

/* The epoll entry of probe @p fired. */
void probe_event(struct usmc_listener *l, struct probing *p);

/* Settle every probe whose deadline passed. */
void probes_expire(struct usmc_listener *l);

/* Milliseconds to the next probe deadline (rounded up), -1 if none. */
int probe_next_timeout(struct usmc_listener *l);

/* Listener close, after the accept thread ended: drop every probed conn. */
void probes_free(struct usmc_listener *l);

#endif
