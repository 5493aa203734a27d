// SPDX-License-Identifier: MIT
/* SMC-R pieces that need no device: UEID rules, context defaults. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ctx.h"
#include "smcr_ctx.h"

static void test_ueid_pad(void **state)
{
	uint8_t out[SMCR_UEID_LEN], want[SMCR_UEID_LEN];

	(void)state;
	assert_int_equal(smcr_ueid_pad("LIBUSMC", out), 0);
	memset(want, ' ', sizeof(want));
	memcpy(want, "LIBUSMC", 7);
	assert_memory_equal(out, want, sizeof(want));
	assert_int_equal(smcr_ueid_pad("A1.B-2", out), 0);
	assert_int_equal(smcr_ueid_pad("0123456789ABCDEF0123456789ABCDEF", out), 0);
	/* too long, empty, lower case, a non-alphanumeric first, blanks, NULL */
	assert_int_equal(smcr_ueid_pad("0123456789ABCDEF0123456789ABCDEF0", out), -EINVAL);
	assert_int_equal(smcr_ueid_pad("", out), -EINVAL);
	assert_int_equal(smcr_ueid_pad("libusmc", out), -EINVAL);
	assert_int_equal(smcr_ueid_pad(".ABC", out), -EINVAL);
	assert_int_equal(smcr_ueid_pad("A B", out), -EINVAL);
	assert_int_equal(smcr_ueid_pad(NULL, out), -EINVAL);
}

static void test_ctx_ueid_and_ids(void **state)
{
	struct usmc_ctx *a, *b;
	struct usmc_ctx_stats st;
	uint8_t want[SMCR_UEID_LEN];

	(void)state;
	unsetenv("USMC_UEID");
	assert_int_equal(usmc_ctx_create(&a), 0);
	assert_int_equal(usmc_ctx_create(&b), 0);
	smcr_ueid_pad(SMCR_DEFAULT_UEID, want);
	assert_memory_equal(a->rdma.ueid, want, SMCR_UEID_LEN);
	/* independent stacks: distinct system IDs */
	assert_memory_not_equal(a->rdma.system_id, b->rdma.system_id, SMCR_SYSTEM_ID_LEN);
	assert_int_equal(usmc_ctx_set_ueid(a, "bad ueid"), -EINVAL);
	assert_int_equal(usmc_ctx_set_ueid(a, "RXEVM-SMC-TEST"), 0);
	smcr_ueid_pad("RXEVM-SMC-TEST", want);
	assert_memory_equal(a->rdma.ueid, want, SMCR_UEID_LEN);
	usmc_ctx_stats(a, &st);
	assert_int_equal(st.lgrs_created, 0);
	assert_int_equal(st.lgrs_open, 0);
	assert_int_equal(usmc_ctx_destroy(a), 0);
	assert_int_equal(usmc_ctx_destroy(b), 0);
	/* an invalid environment value fails the context */
	setenv("USMC_UEID", "no good", 1);
	assert_int_equal(usmc_ctx_create(&a), -EINVAL);
	setenv("USMC_UEID", "FROM-ENV", 1);
	assert_int_equal(usmc_ctx_create(&a), 0);
	smcr_ueid_pad("FROM-ENV", want);
	assert_memory_equal(a->rdma.ueid, want, SMCR_UEID_LEN);
	assert_int_equal(usmc_ctx_destroy(a), 0);
	unsetenv("USMC_UEID");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ueid_pad),
		cmocka_unit_test(test_ctx_ueid_and_ids),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
