/* SPDX-License-Identifier: MIT */
/*
 * A connection's rings (its send buffer, its RMB) against the user's
 * iovec: the copies of smcr_sendv() and smcr_recvv() (smcr_ring.c).
 * A ring holds the stream at its offset modulo the ring's size.
 */
#ifndef USMC_SMCR_RING_H
#define USMC_SMCR_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* The bytes of @iovcnt buffers at @iov. */
size_t smcr_iov_total(const struct iovec *iov, int iovcnt);

/*
 * smcr_ring_copy() - copy up to @len bytes between the ring @ring of @size
 * bytes, at stream offset @pos, and the iovec past its first @skip bytes:
 * into the ring if @to_ring, out of it otherwise. Split at the ring's wrap.
 */
void smcr_ring_copy(uint8_t *ring, uint32_t size, uint64_t pos, const struct iovec *iov, int iovcnt,
		    size_t skip, size_t len, bool to_ring);

#endif
