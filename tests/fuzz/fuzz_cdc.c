// SPDX-License-Identifier: MIT
/*
 * CDC decoder and cursor arithmetic under libFuzzer. Oracle for the codec:
 * decode -> encode -> decode round trip. For the cursors, the decoded
 * producer/consumer cursors and a ring size taken from the token must obey
 * the algebra of cdc_cursor.h (add/diff inverse, cmp antisymmetric, full
 * and empty exclusive).
 */
#include <string.h>

#include "cdc.h"
#include "wire_err.h"
#include "fuzz_common.h"

/* up to 1 MiB + 1: small enough that wraps happen, any size possible */
#define FUZZ_RING_MASK 0xFFFFFu

static void fuzz_cursors(const struct cdc_msg *m)
{
	uint32_t size = (m->token & FUZZ_RING_MASK) + 1;
	struct cdc_cursor p = m->prod, c = m->cons, q;
	uint64_t n = m->seqno & INT16_MAX; /* < 32768 ring rounds for any size */
	int64_t used;

	p.count %= size;
	c.count %= size;
	FUZZ_ASSERT(cdc_curs_valid(p, size) && cdc_curs_valid(c, size));

	q = cdc_curs_add(p, n, size);
	FUZZ_ASSERT(cdc_curs_valid(q, size));
	FUZZ_ASSERT((uint64_t)cdc_curs_sdiff(p, q, size) == n); /* n < 32768 rings */
	FUZZ_ASSERT(cdc_curs_diff(p, q, size) == n);
	FUZZ_ASSERT(cdc_curs_diff(q, p, size) == 0 || n == 0);
	FUZZ_ASSERT(cdc_curs_cmp(p, q, size) == (n ? -1 : 0));
	/* exactly half the wrap space apart is incomparable (serial numbers) */
	if ((uint16_t)(p.wrap - c.wrap) != 0x8000) {
		FUZZ_ASSERT(cdc_curs_cmp(p, c, size) == -cdc_curs_cmp(c, p, size));
		FUZZ_ASSERT(cdc_curs_sdiff(p, c, size) == -cdc_curs_sdiff(c, p, size));
	}

	used = cdc_ring_used(p, c, size);
	FUZZ_ASSERT(used >= -1 && used <= (int64_t)size);
	FUZZ_ASSERT(!(cdc_ring_full(p, c) && cdc_ring_empty(p, c)));
	if (cdc_ring_empty(p, c))
		FUZZ_ASSERT(used == 0);
	if (cdc_ring_full(p, c))
		FUZZ_ASSERT(used == (int64_t)size);
	if (used >= 0)
		FUZZ_ASSERT(cdc_ring_free(p, c, size) == (int64_t)size - used);
	/* a full ring is exactly one ring ahead */
	FUZZ_ASSERT(cdc_ring_full(cdc_curs_add(c, size, size), c));
	FUZZ_ASSERT(cdc_seq_before(m->seqno, (uint16_t)(m->seqno + 1)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cdc_msg a, b;
	uint8_t out[CDC_MSG_LEN];
	int rc;

	rc = cdc_decode(data, size, &a);
	FUZZ_ASSERT(rc == 0 || wire_is_err(rc));
	if (rc)
		return 0;
	FUZZ_ASSERT(cdc_encode(&a, out, sizeof(out)) == CDC_MSG_LEN);
	memset(&b, 0xA5, sizeof(b));
	FUZZ_ASSERT(cdc_decode(out, sizeof(out), &b) == 0);
	FUZZ_ASSERT(!memcmp(&a, &b, sizeof(a)));
	/* type, length, seqno and token come back byte for byte */
	FUZZ_ASSERT(!memcmp(out, data, 8));
	fuzz_cursors(&a);
	return 0;
}
