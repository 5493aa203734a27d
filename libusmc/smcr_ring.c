// SPDX-License-Identifier: MIT
/*
 * Copies between a connection's ring (the send buffer, the RMB) and the
 * user's iovec (smcr_ring.h): what smcr_sendv() and smcr_recvv() move,
 * in the pieces that copy fastest.
 */
#include <string.h>

#include "smcr_ring.h"

size_t smcr_iov_total(const struct iovec *iov, int iovcnt)
{
	size_t t = 0;

	for (int i = 0; i < iovcnt; i++)
		t += iov[i].iov_len;
	return t;
}

/*
 * memcpy() in pieces below glibc's rep_movsb_threshold (2 KiB with SSE2,
 * 4 KiB with AVX2), so every piece takes its vector loop. From the
 * threshold up glibc uses rep movsb, which an emulated CPU runs several
 * times slower (qemu TCG, where the rxe tests and benchmarks run: 410
 * MB/s against 3 GB/s, docs/smcr.md "The stream's cycle"); on hardware
 * the two are about even, and a piece costs one call per 2 KiB.
 */
#define RING_COPY_PIECE 2048

static void copy_pieces(uint8_t *dst, const uint8_t *src, size_t n)
{
	for (size_t off = 0; off < n; off += RING_COPY_PIECE)
		memcpy(dst + off, src + off, n - off < RING_COPY_PIECE ? n - off : RING_COPY_PIECE);
}

/* Copy up to @len bytes between a ring and the iovec at stream offset @pos. */
void smcr_ring_copy(uint8_t *ring, uint32_t size, uint64_t pos, const struct iovec *iov, int iovcnt,
		    size_t skip, size_t len, bool to_ring)
{
	int i = 0;

	while (i < iovcnt && skip >= iov[i].iov_len)
		skip -= iov[i++].iov_len;
	while (len && i < iovcnt) {
		uint32_t off = (uint32_t)(pos % size);
		size_t n = iov[i].iov_len - skip;
		uint8_t *u = (uint8_t *)iov[i].iov_base + skip;

		if (n > len)
			n = len;
		if (n > size - off)
			n = size - off;
		if (to_ring)
			copy_pieces(ring + off, u, n);
		else
			copy_pieces(u, ring + off, n);
		pos += n;
		len -= n;
		skip += n;
		if (skip == iov[i].iov_len) {
			skip = 0;
			i++;
		}
	}
}
