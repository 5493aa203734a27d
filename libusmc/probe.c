// SPDX-License-Identifier: MIT

#include "clc.h"
#include "probe.h"

enum probe_verdict probe_classify(const uint8_t *buf, size_t len)
{
	if (!clc_hdr_starts(buf, len, CLC_PROPOSAL))
		return PROBE_TCP;
	if (len < CLC_HDR_LEN)
		return PROBE_NEED_MORE;
	/* version 0 does not exist; Linux rejects it too */
	return clc_hdr_version(buf) ? PROBE_SMC : PROBE_TCP;
}
