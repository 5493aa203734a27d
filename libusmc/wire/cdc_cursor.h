/* SPDX-License-Identifier: MIT */
/*
 * CDC cursor arithmetic (Linux net/smc/smc_cdc.h union smc_host_cursor,
 * smc_curs_diff(), smc_curs_comp()).
 *
 * A cursor is (wrap, count): count is a byte offset in [0, ring size) of an
 * RMBE or send ring, wrap counts how often count went round (16 bits, wraps
 * to 0). Two cursors with equal count and wraps one apart describe a full
 * ring, equal cursors an empty one, so the whole ring can be used.
 *
 * wrap is compared with serial-number arithmetic (RFC 1982 style): b is
 * newer than a if (int16_t)(b.wrap - a.wrap) > 0. That keeps comparisons
 * right when wrap itself rolls over from 65535 to 0. As with any serial
 * numbers, two cursors exactly 32768 wraps apart are incomparable (each
 * reads as behind the other); real cursors are at most one wrap apart.
 *
 * All functions take the ring size explicitly; it must be > 0 and at most
 * CDC_CURS_MAX_RING (2^31, far above the 512 MiB largest RMBE class) so that
 * distances fit in the return types.
 */
#ifndef USMC_CDC_CURSOR_H
#define USMC_CDC_CURSOR_H

#include <stdbool.h>
#include <stdint.h>

#define CDC_CURS_MAX_RING 0x80000000u

struct cdc_cursor {
	uint16_t wrap;
	uint32_t count;
};

static inline bool cdc_curs_valid(struct cdc_cursor c, uint32_t size)
{
	return size && size <= CDC_CURS_MAX_RING && c.count < size;
}

static inline bool cdc_curs_equal(struct cdc_cursor a, struct cdc_cursor b)
{
	return a.wrap == b.wrap && a.count == b.count;
}

/* Advance c by n bytes (any n, also several ring sizes). c must be valid. */
static inline struct cdc_cursor cdc_curs_add(struct cdc_cursor c, uint64_t n, uint32_t size)
{
	uint64_t pos = (uint64_t)c.count + n;

	c.wrap = (uint16_t)(c.wrap + pos / size);
	c.count = (uint32_t)(pos % size);
	return c;
}

/*
 * Signed distance from a to b in bytes: > 0 if b is ahead of a. The wrap
 * difference is taken as a signed 16-bit value, so the result is exact for
 * cursors less than 32768 ring rounds apart.
 */
static inline int64_t cdc_curs_sdiff(struct cdc_cursor a, struct cdc_cursor b, uint32_t size)
{
	int16_t dwrap = (int16_t)(uint16_t)(b.wrap - a.wrap);

	return (int64_t)dwrap * size + (int64_t)b.count - (int64_t)a.count;
}

/* <0: a older than b, 0: equal, >0: a newer than b. */
static inline int cdc_curs_cmp(struct cdc_cursor a, struct cdc_cursor b, uint32_t size)
{
	int64_t d = cdc_curs_sdiff(b, a, size);

	return (d > 0) - (d < 0);
}

/*
 * Bytes from old to new, 0 if new is not ahead of old (a cursor that moved
 * backwards yields nothing, as Linux's smc_curs_diff()).
 */
static inline uint64_t cdc_curs_diff(struct cdc_cursor old, struct cdc_cursor new_, uint32_t size)
{
	int64_t d = cdc_curs_sdiff(old, new_, size);

	return d > 0 ? (uint64_t)d : 0;
}

/*
 * Bytes in use in a ring written up to prod and read up to cons, or -1 if
 * the pair is impossible (cons ahead of prod, or prod more than one ring
 * ahead): a peer sending such cursors is broken.
 */
static inline int64_t cdc_ring_used(struct cdc_cursor prod, struct cdc_cursor cons, uint32_t size)
{
	int64_t d = cdc_curs_sdiff(cons, prod, size);

	return d < 0 || d > (int64_t)size ? -1 : d;
}

static inline bool cdc_ring_empty(struct cdc_cursor prod, struct cdc_cursor cons)
{
	return cdc_curs_equal(prod, cons);
}

/* Full: same count, prod exactly one wrap ahead of cons. */
static inline bool cdc_ring_full(struct cdc_cursor prod, struct cdc_cursor cons)
{
	return prod.count == cons.count && (uint16_t)(prod.wrap - cons.wrap) == 1;
}

/* Free bytes for the writer, or -1 for an impossible pair (see above). */
static inline int64_t cdc_ring_free(struct cdc_cursor prod, struct cdc_cursor cons, uint32_t size)
{
	int64_t used = cdc_ring_used(prod, cons, size);

	return used < 0 ? -1 : (int64_t)size - used;
}

/* CDC sequence numbers (16 bits): true if a was sent before b. */
static inline bool cdc_seq_before(uint16_t a, uint16_t b)
{
	return (int16_t)(uint16_t)(a - b) < 0;
}

#endif
