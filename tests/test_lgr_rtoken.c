// SPDX-License-Identifier: MIT
/*
 * The peer's RMBs of a link group (lgr_rtoken.h), as Linux's rtokens
 * table: rows added with dedup, other links' columns set by row or by a
 * known rkey, rows deleted by rkey, a column cleared, the full table, stale
 * handles after a row's index is reused, and adds and deletes racing from
 * several threads (run under TSan in that build).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lgr_rtoken.h"

static struct lgr_rtokens t;

static int setup(void **state)
{
	(void)state;
	lgr_rtoken_init(&t);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	lgr_rtoken_fini(&t);
	return 0;
}

static struct lgr_rtoken get(int h, int slot)
{
	struct lgr_rtoken r;

	assert_int_equal(lgr_rtoken_get(&t, h, slot, &r), 0);
	return r;
}

/* A row from one link, read back; its other columns unset. */
static void test_add_get(void **state)
{
	struct lgr_rtoken r = {0};
	int h;

	(void)state;
	h = lgr_rtoken_add(&t, 1, 0x1234, 0x7f0000100000ull);
	assert_true(h > 0);
	assert_int_equal(get(h, 1).rkey, 0x1234);
	assert_int_equal(get(h, 1).addr, 0x7f0000100000ull);
	assert_int_equal(lgr_rtoken_get(&t, h, 0, &r), -ENODATA);
	assert_int_equal(lgr_rtoken_get(&t, h, 2, &r), -ENODATA);
	assert_int_equal(lgr_rtoken_count(&t), 1);
}

/* The same rkey and address on the same link is the same row (the CLC
 * naming an RMB the peer's CONFIRM_RKEY brought, a kept rkey); the same
 * rkey on another link or at another address is another row. */
static void test_add_dedup(void **state)
{
	int h, h2;

	(void)state;
	h = lgr_rtoken_add(&t, 0, 0x10, 0x1000);
	assert_int_equal(lgr_rtoken_add(&t, 0, 0x10, 0x1000), h);
	assert_int_equal(lgr_rtoken_count(&t), 1);
	h2 = lgr_rtoken_add(&t, 1, 0x10, 0x1000);
	assert_true(h2 > 0 && h2 != h);
	assert_int_not_equal(lgr_rtoken_add(&t, 0, 0x10, 0x2000), h);
	assert_int_equal(lgr_rtoken_count(&t), 3);
	/* a column set by lgr_rtoken_set() is found as well */
	assert_int_equal(lgr_rtoken_set(&t, h, 2, 0x77, 0x3000), 0);
	assert_int_equal(lgr_rtoken_add(&t, 2, 0x77, 0x3000), h);
}

/* Slots out of range and handles that never were: refused, nothing written. */
static void test_bad_args(void **state)
{
	struct lgr_rtoken r;

	(void)state;
	assert_int_equal(lgr_rtoken_add(&t, -1, 1, 1), -EINVAL);
	assert_int_equal(lgr_rtoken_add(&t, LGR_RTOKEN_LINKS, 1, 1), -EINVAL);
	assert_int_equal(lgr_rtoken_count(&t), 0);
	assert_int_equal(lgr_rtoken_set(&t, 0, 0, 1, 1), -ENOENT);
	assert_int_equal(lgr_rtoken_set(&t, -5, 0, 1, 1), -ENOENT);
	assert_int_equal(lgr_rtoken_set(&t, 1 << 8 | 255, 0, 1, 1), -ENOENT); /* index 255 */
	assert_int_equal(lgr_rtoken_get(&t, 1 << 8, 0, &r), -ENOENT);
	assert_int_equal(lgr_rtoken_get(&t, 1 << 8, 3, &r), -EINVAL);
	assert_int_equal(lgr_rtoken_set_known(&t, 0, 1, 7, 1, 1), -EINVAL);
	assert_false(lgr_rtoken_del(&t, 9, 1));
	lgr_rtoken_clear_link(&t, -1);
}

/* CONFIRM_RKEY's additional entries (by row) and ADD_LINK's rkey list (by
 * the rkey on the existing link). */
static void test_set(void **state)
{
	int h, other;

	(void)state;
	h = lgr_rtoken_add(&t, 0, 0xa0, 0x1000);
	other = lgr_rtoken_add(&t, 0, 0xb0, 0x2000);
	assert_int_equal(lgr_rtoken_set(&t, h, 1, 0xa1, 0x1000), 0);
	assert_int_equal(get(h, 1).rkey, 0xa1);
	assert_int_equal(lgr_rtoken_set_known(&t, 0, 0xb0, 2, 0xb2, 0x2200), other);
	assert_int_equal(get(other, 2).rkey, 0xb2);
	assert_int_equal(get(other, 2).addr, 0x2200);
	assert_int_equal(lgr_rtoken_set_known(&t, 0, 0xc0, 2, 1, 1), -ENOENT);
	/* an unset column is not a known rkey of 0 */
	assert_int_equal(lgr_rtoken_set_known(&t, 2, 0, 1, 1, 1), -ENOENT);
	assert_int_equal(lgr_rtoken_count(&t), 2);
}

/* DELETE_RKEY names the rkey on the link it came over: the whole row goes,
 * an unknown rkey (or one known on another link only) is reported. */
static void test_del(void **state)
{
	struct lgr_rtoken r;
	int h, keep;

	(void)state;
	h = lgr_rtoken_add(&t, 0, 0xa0, 0x1000);
	keep = lgr_rtoken_add(&t, 0, 0xb0, 0x2000);
	assert_int_equal(lgr_rtoken_set(&t, h, 1, 0xa1, 0x1000), 0);
	assert_false(lgr_rtoken_del(&t, 0, 0xa1)); /* that is its rkey on link 1 */
	assert_false(lgr_rtoken_del(&t, 0, 0xdead));
	assert_true(lgr_rtoken_del(&t, 0, 0xa0));
	assert_int_equal(lgr_rtoken_get(&t, h, 0, &r), -ENOENT);
	assert_int_equal(lgr_rtoken_get(&t, h, 1, &r), -ENOENT);
	assert_false(lgr_rtoken_del(&t, 1, 0xa1)); /* its other column went with it */
	assert_false(lgr_rtoken_del(&t, 0, 0xa0));
	assert_int_equal(get(keep, 0).rkey, 0xb0);
	assert_int_equal(lgr_rtoken_count(&t), 1);
}

/* A row deleted and its index given to another RMB: the old handle finds
 * nothing, not the new row (a connection whose peer RMB is gone never
 * reads another's). */
static void test_stale_handle(void **state)
{
	struct lgr_rtoken r;
	int h, h2;

	(void)state;
	h = lgr_rtoken_add(&t, 0, 0xa0, 0x1000);
	assert_true(lgr_rtoken_del(&t, 0, 0xa0));
	h2 = lgr_rtoken_add(&t, 0, 0xb0, 0x2000);
	assert_int_equal(h2 & 0xff, h & 0xff); /* the same index */
	assert_int_not_equal(h2, h);
	assert_int_equal(lgr_rtoken_get(&t, h, 0, &r), -ENOENT);
	assert_int_equal(lgr_rtoken_set(&t, h, 1, 1, 1), -ENOENT);
	assert_int_equal(get(h2, 0).rkey, 0xb0);
	assert_int_equal(lgr_rtoken_get(&t, h2, 1, &r), -ENODATA);
	/* the same RMB confirmed again is a new row too: new generation */
	assert_true(lgr_rtoken_del(&t, 0, 0xb0));
	assert_int_not_equal(lgr_rtoken_add(&t, 0, 0xb0, 0x2000), h2);
}

/* 255 rows, then -ENOSPC; an RMB already known is still found; a delete
 * makes room. */
static void test_full(void **state)
{
	int h[LGR_RTOKEN_ROWS];

	(void)state;
	for (int i = 0; i < LGR_RTOKEN_ROWS; i++) {
		h[i] = lgr_rtoken_add(&t, 0, 0x100 + (uint32_t)i, 0x10000 * (uint64_t)i);
		assert_true(h[i] > 0);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(h[i] & 0xff, h[j] & 0xff);
	}
	assert_int_equal(lgr_rtoken_count(&t), LGR_RTOKEN_ROWS);
	assert_int_equal(lgr_rtoken_add(&t, 0, 0x999, 0), -ENOSPC);
	assert_int_equal(lgr_rtoken_add(&t, 1, 0x100, 0), -ENOSPC);
	assert_int_equal(lgr_rtoken_add(&t, 0, 0x100 + 17, 0x10000 * 17ull), h[17]);
	assert_int_equal(lgr_rtoken_count(&t), LGR_RTOKEN_ROWS);
	assert_true(lgr_rtoken_del(&t, 0, 0x100 + 200));
	assert_true(lgr_rtoken_add(&t, 0, 0x999, 0) > 0);
	assert_int_equal(lgr_rtoken_add(&t, 0, 0x998, 0), -ENOSPC);
	for (int i = 0; i < LGR_RTOKEN_ROWS; i++)
		if (i != 200)
			assert_int_equal(get(h[i], 0).rkey, 0x100 + (uint32_t)i);
}

/* A link goes: its column is cleared in every row, the rows and their
 * other columns stay, and its rkeys are no longer found. */
static void test_clear_link(void **state)
{
	struct lgr_rtoken r;
	int a, b;

	(void)state;
	a = lgr_rtoken_add(&t, 0, 0xa0, 0x1000);
	b = lgr_rtoken_add(&t, 1, 0xb1, 0x2000);
	assert_int_equal(lgr_rtoken_set(&t, a, 1, 0xa1, 0x1000), 0);
	lgr_rtoken_clear_link(&t, 1);
	assert_int_equal(lgr_rtoken_get(&t, a, 1, &r), -ENODATA);
	assert_int_equal(lgr_rtoken_get(&t, b, 1, &r), -ENODATA);
	assert_int_equal(get(a, 0).rkey, 0xa0);
	assert_false(lgr_rtoken_del(&t, 1, 0xa1));
	assert_int_equal(lgr_rtoken_count(&t), 2);
	/* the slot's next link fills it again */
	assert_int_equal(lgr_rtoken_set(&t, a, 1, 0xa2, 0x1000), 0);
	assert_int_equal(get(a, 1).rkey, 0xa2);
}

/* The rows in use, by index, with their columns; more than @max counted. */
static void test_list(void **state)
{
	struct lgr_rtoken_entry e[4];
	int a, b, c;

	(void)state;
	assert_int_equal(lgr_rtoken_list(&t, e, 4), 0);
	a = lgr_rtoken_add(&t, 0, 0xa0, 0x1000);
	b = lgr_rtoken_add(&t, 0, 0xb0, 0x2000);
	c = lgr_rtoken_add(&t, 0, 0xc0, 0x3000);
	assert_int_equal(lgr_rtoken_set(&t, c, 2, 0xc2, 0x3000), 0);
	assert_true(lgr_rtoken_del(&t, 0, 0xb0));
	assert_int_equal(lgr_rtoken_list(&t, e, 4), 2);
	assert_int_equal(e[0].handle, a);
	assert_int_equal(e[0].cols, 1);
	assert_int_equal(e[1].handle, c);
	assert_int_equal(e[1].cols, 1 | 4);
	assert_int_equal(e[1].col[2].rkey, 0xc2);
	assert_int_equal(lgr_rtoken_list(&t, e, 1), 2);
	(void)b;
}

#define RACE_THREADS 4
#define RACE_ROUNDS  2000

/* Each thread adds and deletes rkeys of its own, reading back each row as
 * it goes, while others do the same: no row is ever another's. */
static void *race(void *arg)
{
	uint32_t base = (uint32_t)(uintptr_t)arg << 16;
	struct lgr_rtoken r;

	for (uint32_t i = 0; i < RACE_ROUNDS; i++) {
		uint32_t rkey = base | (i % 64);
		int h = lgr_rtoken_add(&t, 0, rkey, rkey);

		if (h == -ENOSPC)
			continue;
		if (h <= 0 || lgr_rtoken_set(&t, h, 1, rkey + 1, rkey) ||
		    lgr_rtoken_get(&t, h, 0, &r) || r.rkey != rkey)
			return (void *)1;
		if (!lgr_rtoken_del(&t, 0, rkey) || lgr_rtoken_get(&t, h, 0, &r) != -ENOENT)
			return (void *)1;
	}
	return NULL;
}

static void test_concurrent(void **state)
{
	pthread_t th[RACE_THREADS];
	void *rc;

	(void)state;
	for (uintptr_t i = 0; i < RACE_THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, race, (void *)(i + 1)), 0);
	for (int i = 0; i < RACE_THREADS; i++) {
		assert_int_equal(pthread_join(th[i], &rc), 0);
		assert_null(rc);
	}
	assert_int_equal(lgr_rtoken_count(&t), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_add_get, setup, teardown),
		cmocka_unit_test_setup_teardown(test_add_dedup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_args, setup, teardown),
		cmocka_unit_test_setup_teardown(test_set, setup, teardown),
		cmocka_unit_test_setup_teardown(test_del, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_handle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clear_link, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
