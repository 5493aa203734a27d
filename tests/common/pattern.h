/* SPDX-License-Identifier: MIT */
/*
 * Test data: a reproducible byte stream per (seed, offset), so a receiver
 * check every byte it gets, at its offset, against what the sender must
 * have sent: stronger than a checksum (a lost, repeated or reordered
 * chunk is caught where it happens) and as cheap as generating the data.
 */
#ifndef USMC_TEST_PATTERN_H
#define USMC_TEST_PATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t pattern_word(uint64_t seed, uint64_t index)
{
	uint64_t z = seed * 0x9E3779B97F4A7C15ull + index * 0xBF58476D1CE4E5B9ull + 1;

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline uint8_t pattern_byte(uint64_t seed, uint64_t off)
{
	return (uint8_t)(pattern_word(seed, off >> 3) >> ((off & 7) * 8));
}

/* Fill @buf with the stream of @seed from offset @off. */
static inline void pattern_fill(uint64_t seed, uint64_t off, uint8_t *buf, size_t len)
{
	size_t i = 0;

	while (i < len && ((off + i) & 7))
		buf[i] = pattern_byte(seed, off + i), i++;
	for (; i + 8 <= len; i += 8) {
		uint64_t w = pattern_word(seed, (off + i) >> 3);

		memcpy(buf + i, &w, 8); /* little-endian host: same as pattern_byte */
	}
	for (; i < len; i++)
		buf[i] = pattern_byte(seed, off + i);
}

/* Offset of the first byte of @buf that differs from the stream, or -1. */
static inline long long pattern_check(uint64_t seed, uint64_t off, const uint8_t *buf, size_t len)
{
	uint8_t tmp[4096];

	for (size_t done = 0; done < len;) {
		size_t n = len - done < sizeof(tmp) ? len - done : sizeof(tmp);

		pattern_fill(seed, off + done, tmp, n);
		if (memcmp(tmp, buf + done, n)) {
			for (size_t i = 0; i < n; i++)
				if (tmp[i] != buf[done + i])
					return (long long)(off + done + i);
		}
		done += n;
	}
	return -1;
}

#endif
