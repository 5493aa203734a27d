// SPDX-License-Identifier: MIT
#include <string.h>

#include "clc.h"
#include "probe.h"

/* Offsets in the 8-byte CLC header (smc-r-protocol.md §2.1). */
#define CLC_HDR_TYPE_OFF    4
#define CLC_HDR_VERSION_OFF 7

static const uint8_t smcr_eyecatcher[] = {0xE2, 0xD4, 0xC3, 0xD9};

enum probe_verdict probe_classify(const uint8_t *buf, size_t len)
{
	size_t n = len < sizeof(smcr_eyecatcher) ? len : sizeof(smcr_eyecatcher);

	if (memcmp(buf, smcr_eyecatcher, n))
		return PROBE_TCP;
	if (len <= CLC_HDR_TYPE_OFF)
		return PROBE_NEED_MORE;
	if (buf[CLC_HDR_TYPE_OFF] != CLC_PROPOSAL)
		return PROBE_TCP;
	if (len <= CLC_HDR_VERSION_OFF)
		return PROBE_NEED_MORE;
	/* version 0 does not exist; Linux rejects it too */
	return (buf[CLC_HDR_VERSION_OFF] >> 4) ? PROBE_SMC : PROBE_TCP;
}
