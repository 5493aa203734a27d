// SPDX-License-Identifier: MIT
/*
 * The verbs registration hook on a real device (label rxe: run inside the
 * soft-RoCE guest). Skipped when the machine has no RDMA device.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bufpool.h"

#define KiB 1024u

struct verbs_state {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
};

static int open_first_device(void **state)
{
	static struct verbs_state vs;
	struct ibv_device **list;
	int n = 0;

	memset(&vs, 0, sizeof(vs));
	list = ibv_get_device_list(&n);
	if (list && n > 0)
		vs.ctx = ibv_open_device(list[0]);
	if (list)
		ibv_free_device_list(list);
	if (vs.ctx)
		vs.pd = ibv_alloc_pd(vs.ctx);
	*state = &vs;
	return 0;
}

static int close_device(void **state)
{
	struct verbs_state *vs = *state;

	if (vs->pd)
		ibv_dealloc_pd(vs->pd);
	if (vs->ctx)
		ibv_close_device(vs->ctx);
	return 0;
}

static void check_pool(struct verbs_state *vs, enum bufpool_kind kind)
{
	struct bufpool_config cfg = {.kind = kind, .ops = &bufpool_verbs_hooks, .ops_ctx = vs->pd};
	struct bufpool *pool = bufpool_create(&cfg);
	struct bufpool_buf *buf, *again;
	struct ibv_mr *mr;

	assert_non_null(pool);
	assert_int_equal(bufpool_claim(pool, 64 * KiB, &buf), 0);
	mr = buf->mr.handle;
	assert_non_null(mr);
	assert_ptr_equal(mr->addr, buf->addr);
	assert_int_equal(mr->length, buf->len);
	assert_ptr_equal(mr->pd, vs->pd);
	assert_int_equal(buf->lkey, mr->lkey);
	assert_int_equal(buf->rkey, kind == BUFPOOL_RMB ? mr->rkey : 0);
	memset(buf->addr, 0xa5, buf->len);
	bufpool_release(pool, buf);
	assert_int_equal(bufpool_claim(pool, 64 * KiB, &again), 0);
	assert_ptr_equal(again, buf);
	assert_ptr_equal(again->mr.handle, mr); /* same registration, reused */
	bufpool_release(pool, again);
	assert_int_equal(bufpool_destroy(pool, NULL), 0);
}

static void test_verbs_rmb(void **state)
{
	struct verbs_state *vs = *state;

	if (!vs->pd)
		skip();
	check_pool(vs, BUFPOOL_RMB);
}

static void test_verbs_sndbuf(void **state)
{
	struct verbs_state *vs = *state;

	if (!vs->pd)
		skip();
	check_pool(vs, BUFPOOL_SNDBUF);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_verbs_rmb),
		cmocka_unit_test(test_verbs_sndbuf),
	};

	return cmocka_run_group_tests(tests, open_first_device, close_device);
}
