/* SPDX-License-Identifier: MIT */
/*
 * Byte-order helpers for the wire codecs: read and write big-endian (and,
 * for the LLC v2 length, little-endian) integers at unaligned offsets, and
 * claim an output buffer. Header-only so every codec inlines them.
 */
#ifndef USMC_WIRE_BYTES_H
#define USMC_WIRE_BYTES_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * Every encoder's contract on its output: -ENOSPC and nothing written if
 * @len bytes do not fit in @cap, else 0 with the message zeroed, so that
 * reserved bytes go out as zero and only the fields need writing.
 */
static inline int wire_out_claim(uint8_t *buf, size_t cap, size_t len)
{
	if (cap < len)
		return -ENOSPC;
	memset(buf, 0, len);
	return 0;
}

static inline uint16_t get_be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t get_be24(const uint8_t *p)
{
	return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

static inline uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t get_be64(const uint8_t *p)
{
	return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

static inline uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[1] << 8 | p[0]);
}

static inline void put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void put_be24(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 16);
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)v;
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline void put_be64(uint8_t *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}

static inline void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

#endif
