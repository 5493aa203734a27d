/* SPDX-License-Identifier: MIT */
/*
 * Telling an SMC client from a plain TCP client without the kernel's SYN
 * option (the rule, and why, is in docs/tcp-path.md): a usmc listener sends
 * nothing first and classifies each new connection by the client's first
 * bytes, peeked so that nothing is consumed. A CLC PROPOSAL header means an
 * SMC client; any other byte, EOF, or silence for USMC_OPT_PROBE_MS (a
 * protocol where the server speaks first) means a plain TCP client.
 */
#ifndef USMC_PROBE_H
#define USMC_PROBE_H

#include <stddef.h>
#include <stdint.h>

enum probe_verdict {
	PROBE_NEED_MORE, /* a prefix of a CLC PROPOSAL header: wait for more */
	PROBE_SMC,	 /* a CLC PROPOSAL header */
	PROBE_TCP,	 /* anything else */
};

/* Classify a client's first @len bytes (peeked; @len may be 0). */
enum probe_verdict probe_classify(const uint8_t *buf, size_t len);

#endif
