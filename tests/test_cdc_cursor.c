// SPDX-License-Identifier: MIT
/* CDC cursor arithmetic: wrap, distance, comparisons, full vs empty. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "cdc_cursor.h"

#define RING 65536u

static struct cdc_cursor C(uint16_t wrap, uint32_t count) {
	struct cdc_cursor c = {.wrap = wrap, .count = count};
	return c;
}

static void
test_curs_valid(void **state)
{
	assert_true(cdc_curs_valid(C(0, 0), RING));
	assert_true(cdc_curs_valid(C(7, RING - 1), RING));
	assert_false(cdc_curs_valid(C(0, RING), RING));
	assert_false(cdc_curs_valid(C(0, 0), 0));
	assert_false(cdc_curs_valid(C(0, 0), CDC_CURS_MAX_RING + 1));
	assert_true(cdc_curs_valid(C(0, CDC_CURS_MAX_RING - 1), CDC_CURS_MAX_RING));
}

static void test_curs_add(void **state)
{
	struct cdc_cursor c;

	c = cdc_curs_add(C(0, 0), 4096, RING);
	assert_true(cdc_curs_equal(c, C(0, 4096)));
	c = cdc_curs_add(C(0, RING - 1), 1, RING);
	assert_true(cdc_curs_equal(c, C(1, 0)));
	c = cdc_curs_add(C(3, 100), RING, RING); /* a full ring */
	assert_true(cdc_curs_equal(c, C(4, 100)));
	c = cdc_curs_add(C(0xFFFF, RING - 10), 20, RING); /* wrap rolls over */
	assert_true(cdc_curs_equal(c, C(0, 10)));
	c = cdc_curs_add(C(1, 5), 3ull * RING + 7, RING); /* several rounds */
	assert_true(cdc_curs_equal(c, C(4, 12)));
	c = cdc_curs_add(C(0, 0), 0, RING);
	assert_true(cdc_curs_equal(c, C(0, 0)));
}

static void test_curs_diff(void **state)
{
	assert_int_equal(cdc_curs_diff(C(0, 0), C(0, 4096), RING), 4096);
	assert_int_equal(cdc_curs_diff(C(0, 60000), C(1, 1000), RING), RING - 60000 + 1000);
	assert_int_equal(cdc_curs_diff(C(0, 100), C(1, 100), RING), RING);
	/* backwards yields 0 */
	assert_int_equal(cdc_curs_diff(C(0, 4096), C(0, 0), RING), 0);
	assert_int_equal(cdc_curs_diff(C(1, 0), C(0, 65535), RING), 0);
	/* across the 16-bit wrap rollover */
	assert_int_equal(cdc_curs_diff(C(0xFFFF, 65000), C(0, 500), RING), 536 + 500);
	assert_int_equal(cdc_curs_sdiff(C(0, 500), C(0xFFFF, 65000), RING), -1036);
}

static void test_curs_cmp(void **state)
{
	assert_int_equal(cdc_curs_cmp(C(0, 1), C(0, 2), RING), -1);
	assert_int_equal(cdc_curs_cmp(C(0, 2), C(0, 1), RING), 1);
	assert_int_equal(cdc_curs_cmp(C(5, 9), C(5, 9), RING), 0);
	assert_int_equal(cdc_curs_cmp(C(1, 0), C(0, RING - 1), RING), 1);
	assert_int_equal(cdc_curs_cmp(C(0, 0), C(0xFFFF, RING - 1), RING), 1);
	assert_int_equal(cdc_curs_cmp(C(0xFFFF, 0), C(0, 0), RING), -1);
}

static void test_ring_full_empty(void **state)
{
	struct cdc_cursor cons = C(0, 100);
	struct cdc_cursor prod = cdc_curs_add(cons, RING, RING);

	assert_true(cdc_ring_empty(cons, cons));
	assert_false(cdc_ring_full(cons, cons));
	assert_int_equal(cdc_ring_used(cons, cons, RING), 0);
	assert_int_equal(cdc_ring_free(cons, cons, RING), RING);

	assert_true(cdc_ring_full(prod, cons));
	assert_false(cdc_ring_empty(prod, cons));
	assert_int_equal(cdc_ring_used(prod, cons, RING), RING);
	assert_int_equal(cdc_ring_free(prod, cons, RING), 0);

	/* full across the wrap rollover */
	assert_true(cdc_ring_full(C(0, 5), C(0xFFFF, 5)));

	prod = cdc_curs_add(cons, 10, RING);
	assert_int_equal(cdc_ring_used(prod, cons, RING), 10);
	assert_int_equal(cdc_ring_free(prod, cons, RING), RING - 10);

	/* impossible pairs: cons ahead of prod, prod over a ring ahead */
	assert_int_equal(cdc_ring_used(C(0, 0), C(0, 1), RING), -1);
	assert_int_equal(cdc_ring_used(C(1, 101), C(0, 100), RING), -1);
	assert_int_equal(cdc_ring_free(C(2, 0), C(0, 0), RING), -1);
}

static void test_seq_before(void **state)
{
	assert_true(cdc_seq_before(1, 2));
	assert_false(cdc_seq_before(2, 1));
	assert_false(cdc_seq_before(5, 5));
	assert_true(cdc_seq_before(0xFFFF, 0));
	assert_false(cdc_seq_before(0, 0xFFFF));
	assert_true(cdc_seq_before(0xFFF0, 0x0010));
}

static void test_small_ring(void **state)
{
	struct cdc_cursor c = C(0, 0);

	c = cdc_curs_add(c, 1, 1);
	assert_true(cdc_curs_equal(c, C(1, 0)));
	assert_true(cdc_ring_full(c, C(0, 0)));
	assert_int_equal(cdc_curs_diff(C(0, 0), c, 1), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_curs_valid),	cmocka_unit_test(test_curs_add),
		cmocka_unit_test(test_curs_diff),	cmocka_unit_test(test_curs_cmp),
		cmocka_unit_test(test_ring_full_empty), cmocka_unit_test(test_seq_before),
		cmocka_unit_test(test_small_ring),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
