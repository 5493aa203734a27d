// SPDX-License-Identifier: MIT
/*
 * CLC decoders under libFuzzer. Oracle: whatever decodes must re-encode,
 * the re-encoding must decode to the same message (offsets aside: the
 * encoder writes Linux's canonical layout) and be a fixed point of
 * encode(decode()).
 */
#include <errno.h>
#include <string.h>

#include "clc.h"
#include "wire_err.h"
#include "fuzz_common.h"

static uint8_t out1[CLC_MAX_LEN], out2[CLC_MAX_LEN];

static void fuzz_hdr(const uint8_t *data, size_t size)
{
	struct clc_hdr h;
	int rc = clc_hdr_decode(data, size, &h);

	FUZZ_ASSERT(rc == 0 || wire_is_err(rc));
	if (rc)
		return;
	FUZZ_ASSERT(h.type >= CLC_PROPOSAL && h.type <= CLC_DECLINE);
	FUZZ_ASSERT(h.version >= CLC_V1 && h.length <= CLC_MAX_LEN);
}

static void fuzz_proposal(const uint8_t *data, size_t size)
{
	struct clc_proposal a, b;
	int n1, n2, rc;

	rc = clc_proposal_decode(data, size, &a);
	FUZZ_ASSERT(rc == 0 || wire_is_err(rc));
	if (rc)
		return;
	n1 = clc_proposal_encode(&a, out1, sizeof(out1));
	FUZZ_ASSERT(n1 > 0 && (size_t)n1 == clc_proposal_len(&a));
	memset(&b, 0xA5, sizeof(b));
	FUZZ_ASSERT(clc_proposal_decode(out1, (size_t)n1, &b) == 0);
	/* offsets are layout, not content: take the canonical ones */
	a.iparea_offset = b.iparea_offset;
	a.v2_ext_offset = b.v2_ext_offset;
	a.smcd_v2_ext_offset = b.smcd_v2_ext_offset;
	FUZZ_ASSERT(!memcmp(&a, &b, sizeof(a)));
	n2 = clc_proposal_encode(&b, out2, sizeof(out2));
	FUZZ_ASSERT(n2 == n1 && !memcmp(out1, out2, (size_t)n1));
	/* the encoder must stay inside a buffer one byte too small */
	FUZZ_ASSERT(clc_proposal_encode(&b, out2, (size_t)n1 - 1) == -ENOSPC);
}

static void fuzz_accept_confirm(const uint8_t *data, size_t size)
{
	struct clc_accept_confirm a, b;
	int n1, rc;

	rc = clc_accept_confirm_decode(data, size, &a);
	FUZZ_ASSERT(rc == 0 || wire_is_err(rc));
	if (rc)
		return;
	n1 = clc_accept_confirm_encode(&a, out1, sizeof(out1));
	FUZZ_ASSERT(n1 > 0 && (size_t)n1 == clc_accept_confirm_len(&a));
	memset(&b, 0xA5, sizeof(b));
	FUZZ_ASSERT(clc_accept_confirm_decode(out1, (size_t)n1, &b) == 0);
	FUZZ_ASSERT(!memcmp(&a, &b, sizeof(a)));
	FUZZ_ASSERT(clc_accept_confirm_encode(&b, out2, sizeof(out2)) == n1);
	FUZZ_ASSERT(!memcmp(out1, out2, (size_t)n1));
	FUZZ_ASSERT(clc_accept_confirm_encode(&b, out2, (size_t)n1 - 1) == -ENOSPC);
}

static void fuzz_decline(const uint8_t *data, size_t size)
{
	struct clc_decline a, b;
	int n1, rc;

	rc = clc_decline_decode(data, size, &a);
	FUZZ_ASSERT(rc == 0 || wire_is_err(rc));
	if (rc)
		return;
	n1 = clc_decline_encode(&a, out1, sizeof(out1));
	FUZZ_ASSERT(n1 > 0 && (size_t)n1 == clc_decline_len(&a));
	memset(&b, 0xA5, sizeof(b));
	FUZZ_ASSERT(clc_decline_decode(out1, (size_t)n1, &b) == 0);
	FUZZ_ASSERT(!memcmp(&a, &b, sizeof(a)));
	FUZZ_ASSERT(clc_decline_encode(&b, out2, sizeof(out2)) == n1);
	FUZZ_ASSERT(!memcmp(out1, out2, (size_t)n1));
	FUZZ_ASSERT(clc_decline_encode(&b, out2, (size_t)n1 - 1) == -ENOSPC);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* every decoder sees every input: wrong types must be rejected too */
	fuzz_hdr(data, size);
	fuzz_proposal(data, size);
	fuzz_accept_confirm(data, size);
	fuzz_decline(data, size);
	return 0;
}
