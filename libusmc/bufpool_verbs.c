// SPDX-License-Identifier: MIT
/*
 * The rdma-core registration hook for buffer pools: one ibv_reg_mr() per
 * buffer for its whole life. ctx is the protection domain (struct ibv_pd *).
 */
#include <errno.h>

#include "bufpool.h"

static int bufpool_verbs_reg(void *ctx, void *addr, size_t len, unsigned int access,
			     struct bufpool_mr *mr)
{
	struct ibv_mr *ibmr = ibv_reg_mr(ctx, addr, len, (int)access);

	if (!ibmr)
		return errno ? -errno : -EIO;
	mr->handle = ibmr;
	mr->lkey = ibmr->lkey;
	mr->rkey = ibmr->rkey;
	return 0;
}

static int bufpool_verbs_dereg(void *ctx, struct bufpool_mr *mr)
{
	/* ibv_dereg_mr() returns 0 or a positive errno. */
	int rc = ibv_dereg_mr(mr->handle);

	mr->handle = NULL;
	return -rc;
}

const struct bufpool_reg_ops bufpool_verbs_hooks = {
	.reg = bufpool_verbs_reg,
	.dereg = bufpool_verbs_dereg,
};
