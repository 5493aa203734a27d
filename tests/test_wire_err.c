// SPDX-License-Identifier: MIT
/* wire_strerror(): every WIRE_E_* code has its own text, errnos fall through. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "wire_err.h"

static void test_wire_err_texts(void **state)
{
	for (int e = WIRE_E_BASE; e >= WIRE_E_LAST; e--) {
		assert_true(wire_is_err(e));
		assert_non_null(strstr(wire_strerror(e), "WIRE_E_"));
		for (int f = e - 1; f >= WIRE_E_LAST; f--)
			assert_string_not_equal(wire_strerror(e), wire_strerror(f));
	}
	assert_string_equal(wire_strerror(WIRE_E_TRAILER),
			    "WIRE_E_TRAILER: bad CLC trailer eyecatcher");
}

static void test_wire_err_range(void **state)
{
	assert_false(wire_is_err(0));
	assert_false(wire_is_err(-EPROTO));
	assert_false(wire_is_err(WIRE_E_LAST - 1));
	assert_true(WIRE_E_LAST > -1100);
	assert_string_equal(wire_strerror(-ENOSPC), strerror(ENOSPC));
	assert_string_equal(wire_strerror(0), "success");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wire_err_texts),
		cmocka_unit_test(test_wire_err_range),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
