// SPDX-License-Identifier: MIT
/*
 * The RDMA ports a context may use (smcr_dev.h smcr_dev_set, env
 * USMC_DEVICES, usmc_ctx_set_devices()): the list's grammar, what it lets
 * through, and its errors through the public API and usmc_env_check().
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "smcr_dev.h"

static void test_parse_names_and_ports(void **state)
{
	struct smcr_dev_set set;

	(void)state;
	assert_int_equal(smcr_dev_set_parse("mlx5_0,rxe3:2", &set), 0);
	assert_int_equal(set.n, 2);
	assert_string_equal(set.e[0].name, "mlx5_0");
	assert_int_equal(set.e[0].port, 0);
	assert_string_equal(set.e[1].name, "rxe3");
	assert_int_equal(set.e[1].port, 2);
	assert_true(smcr_dev_set_has(&set, "mlx5_0", 1));
	assert_true(smcr_dev_set_has(&set, "mlx5_0", 2)); /* every port of it */
	assert_true(smcr_dev_set_has(&set, "rxe3", 2));
	assert_false(smcr_dev_set_has(&set, "rxe3", 1)); /* only port 2 of it */
	assert_false(smcr_dev_set_has(&set, "rxe", 1));	 /* a prefix is not the name */
	assert_false(smcr_dev_set_has(&set, "mlx5_01", 1));
}

static void test_empty_is_every_port(void **state)
{
	struct smcr_dev_set set;

	(void)state;
	assert_int_equal(smcr_dev_set_parse(NULL, &set), 0);
	assert_int_equal(set.n, 0);
	assert_true(smcr_dev_set_has(&set, "anything", 7));
	assert_int_equal(smcr_dev_set_parse("", &set), 0);
	assert_int_equal(set.n, 0);
	assert_true(smcr_dev_set_has(NULL, "anything", 1));
}

static void test_parse_rejects(void **state)
{
	char longname[80], full[SMCR_DEV_SET_MAX * 4 + 8] = "";
	const char *bad[] = {",",    "a,",   ",a",     "a,,b", "a:",	"a:0",	  "a:256",
			     "a:-1", "a:1x", "a:1234", ":1",   "a:1:2", longname, full};
	struct smcr_dev_set set = {.n = 5};

	(void)state;
	memset(longname, 'x', 64); /* one more than a name can hold */
	longname[64] = '\0';
	for (int i = 0; i <= SMCR_DEV_SET_MAX; i++)
		strcat(full, i ? ",d" : "d"); /* one entry too many */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(smcr_dev_set_parse(bad[i], &set), -EINVAL);
		assert_int_equal(set.n, 5); /* untouched */
	}
	full[strlen(full) - 2] = '\0'; /* exactly SMCR_DEV_SET_MAX */
	assert_int_equal(smcr_dev_set_parse(full, &set), 0);
	assert_int_equal(set.n, SMCR_DEV_SET_MAX);
	longname[63] = '\0';
	assert_int_equal(smcr_dev_set_parse(longname, &set), 0);
}

static void test_public_api(void **state)
{
	const char *bad[] = {"USMC_KERNEL_COMPAT=0", "USMC_DEVICES=rxe0:0", NULL};
	const char *good[] = {"USMC_KERNEL_COMPAT=0", "USMC_DEVICES=rxe0,rxe2:1", NULL};
	struct usmc_ctx *ctx;
	char msg[128];

	(void)state;
	assert_int_equal(usmc_ctx_set_devices(NULL, "rxe0"), -EINVAL);
	assert_int_equal(usmc_env_check_env(bad, msg, sizeof(msg)), -EINVAL);
	assert_string_equal(msg, "USMC_DEVICES=rxe0:0: not a list of device[:port] (at most 16)");
	assert_int_equal(usmc_ctx_create_env(&ctx, bad), -EINVAL);
	assert_int_equal(usmc_env_check_env(good, msg, sizeof(msg)), 0);
	assert_int_equal(usmc_ctx_create_env(&ctx, good), 0);
	assert_int_equal(usmc_ctx_set_devices(ctx, "rxe1,,rxe3"), -EINVAL);
	assert_int_equal(usmc_ctx_set_devices(ctx, "rxe1,rxe3"), 0);
	assert_int_equal(usmc_ctx_set_devices(ctx, NULL), 0);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_names_and_ports),
		cmocka_unit_test(test_empty_is_every_port),
		cmocka_unit_test(test_parse_rejects),
		cmocka_unit_test(test_public_api),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
