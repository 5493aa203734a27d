/* SPDX-License-Identifier: MIT */
/*
 * Registration ops for a libusmc buffer pool without an RDMA device: the
 * "memory region" is the buffer's address and nothing is registered, so a
 * pool's claim/release logic can be run (benchmarked, stressed) alone.
 */
#ifndef USMC_TOOLS_BUFPOOL_NOOP_H
#define USMC_TOOLS_BUFPOOL_NOOP_H

#include "bufpool.h"

static inline int bufpool_noop_reg(void *ctx, void *addr, size_t len, unsigned int access,
				   struct bufpool_mr *mr)
{
	mr->handle = addr;
	return 0;
}

static inline int bufpool_noop_dereg(void *ctx, struct bufpool_mr *mr)
{
	return 0;
}

static const struct bufpool_reg_ops bufpool_noop_ops = {.reg = bufpool_noop_reg,
							.dereg = bufpool_noop_dereg};

#endif
