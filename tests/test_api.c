// SPDX-License-Identifier: MIT
/* API units: errors, reasons, options and environment, bad arguments. */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "probe.h"

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* usmc_version() and the macros of usmc/version.h come from project(VERSION) */
static void test_version(void **state)
{
	char v[32];

	snprintf(v, sizeof(v), "%d.%d.%d", USMC_VERSION_MAJOR, USMC_VERSION_MINOR,
		 USMC_VERSION_PATCH);
	assert_string_equal(USMC_VERSION_STRING, v);
	assert_string_equal(usmc_version(), USMC_VERSION_STRING);
	assert_true(USMC_VERSION_AT_LEAST(0, 0, 0));
	assert_false(USMC_VERSION_AT_LEAST(USMC_VERSION_MAJOR + 1, 0, 0));
}

static void test_strerror(void **state)
{
	assert_string_equal(usmc_strerror(0), "success");
	assert_string_equal(usmc_strerror(-EINVAL), "Invalid argument");
	assert_string_equal(usmc_strerror(USMC_EPROTO_CLC),
			    "malformed or unexpected CLC message from the peer");
	assert_string_equal(usmc_strerror(-123456), "unknown error");
	assert_string_equal(usmc_strerror(42), "unknown error");
}

static void test_reasons(void **state)
{
	assert_string_equal(usmc_reason_name(USMC_REASON_NOSMCRDEV), "NOSMCRDEV");
	assert_string_equal(usmc_reason_text(USMC_REASON_NOSMCRDEV), "no SMC-R device found");
	assert_string_equal(usmc_reason_name(0x03070000), "DIFFPREFIX");
	assert_string_equal(usmc_reason_name(USMC_REASON_HS_CONGESTED), "HS_CONGESTED");
	assert_string_equal(usmc_reason_name(0x12345678), "UNKNOWN");
	assert_string_equal(usmc_reason_text(0x12345678), "unknown reason");
	assert_string_equal(usmc_mode_name(USMC_MODE_SMCR), "SMC-R");
	assert_string_equal(usmc_mode_name(USMC_MODE_TCP), "TCP");
}

static void test_ctx_options(void **state)
{
	struct usmc_ctx *ctx;
	long v;

	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_CLC_TIMEOUT_MS, &v), 0);
	assert_int_equal(v, 6000);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_PROBE_MS, 250), 0);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_PROBE_MS, &v), 0);
	assert_int_equal(v, 250);
	/* out of range, unknown option, NULLs */
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_PROBE_MS, 0), -EINVAL);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_SMC, 2), -EINVAL);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_RMB_SIZE, 1024), -EINVAL);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_COUNT_, 1), -EINVAL);
	assert_int_equal(usmc_ctx_setopt(ctx, (enum usmc_opt) - 1, 1), -EINVAL);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_SMC, NULL), -EINVAL);
	assert_int_equal(usmc_ctx_setopt(NULL, USMC_OPT_SMC, 1), -EINVAL);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
	assert_int_equal(usmc_ctx_destroy(NULL), -EINVAL);
}

static void test_env_defaults(void **state)
{
	struct usmc_ctx *ctx;
	long v;

	setenv("USMC_PROBE_MS", "321", 1);
	setenv("USMC_AUTO_FALLBACK", "1", 1);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_PROBE_MS, &v), 0);
	assert_int_equal(v, 321);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_AUTO_FALLBACK, &v), 0);
	assert_int_equal(v, 1);
	usmc_ctx_destroy(ctx);

	/* not a number, trailing junk, out of range: refused, not ignored */
	setenv("USMC_PROBE_MS", "abc", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);
	setenv("USMC_PROBE_MS", "12x", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);
	setenv("USMC_PROBE_MS", "0", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);
	unsetenv("USMC_PROBE_MS");
	unsetenv("USMC_AUTO_FALLBACK");
	assert_int_equal(usmc_ctx_create(NULL), -EINVAL);
}

static void test_devices_none(void **state)
{
	struct usmc_ctx *ctx;
	struct usmc_device_info d[4];
	int n;

	assert_int_equal(usmc_ctx_create(&ctx), 0);
	n = usmc_ctx_devices(ctx, d, 4);
	assert_true(n >= 0);
	assert_int_equal(usmc_ctx_devices(ctx, NULL, 1), -EINVAL);
	assert_int_equal(usmc_ctx_devices(ctx, NULL, 0), n);
	usmc_ctx_destroy(ctx);
}

static void test_listen_bad_args(void **state)
{
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	struct sockaddr_in a = loopback(0);
	struct sockaddr_un {
		sa_family_t f;
		char p[108];
	} un = {.f = AF_UNIX};

	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_listen(NULL, (struct sockaddr *)&a, sizeof(a), 16, 0, &l), -EINVAL);
	assert_int_equal(usmc_listen(ctx, NULL, sizeof(a), 16, 0, &l), -EINVAL);
	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 16, 0, NULL), -EINVAL);
	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 0, 0, &l), -EINVAL);
	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 70000, 0, &l), -EINVAL);
	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 16, 1u << 30, &l),
			 -EINVAL);
	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&a, 4, 16, 0, &l), -EINVAL);
	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&un, sizeof(un), 16, 0, &l),
			 -EAFNOSUPPORT);

	/* the same port twice without REUSEPORT */
	struct sockaddr_storage ss;
	socklen_t len;
	struct usmc_listener *l2;

	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 16, 0, &l), 0);
	assert_int_equal(usmc_listener_addr(l, &ss, &len), 0);
	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&ss, len, 16, 0, &l2), -EADDRINUSE);
	/* a context with a listener cannot go away */
	assert_int_equal(usmc_ctx_destroy(ctx), -EBUSY);
	assert_int_equal(usmc_listener_close(l), 0);
	assert_int_equal(usmc_listener_close(NULL), -EINVAL);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

static void test_accept_nonblock_empty(void **state)
{
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	struct usmc_conn *c;
	struct sockaddr_in a = loopback(0);
	long v;

	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 16,
				     USMC_LISTEN_NONBLOCK | USMC_LISTEN_AUTO_FALLBACK, &l),
			 0);
	assert_true(usmc_listener_fd(l) >= 0);
	assert_int_equal(usmc_accept(l, 0, &c), -EAGAIN);
	assert_int_equal(usmc_accept(l, 0x80, &c), -EINVAL);
	assert_int_equal(usmc_accept(NULL, 0, &c), -EINVAL);
	/* the flag set the listener option; the option can change later */
	assert_int_equal(usmc_listener_getopt(l, USMC_OPT_AUTO_FALLBACK, &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(usmc_listener_setopt(l, USMC_OPT_AUTO_FALLBACK, 0), 0);
	assert_int_equal(usmc_listener_getopt(l, USMC_OPT_AUTO_FALLBACK, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(usmc_listener_setopt(l, USMC_OPT_HS_CONGESTION, -1), -EINVAL);
	usmc_listener_close(l);
	usmc_ctx_destroy(ctx);
}

static void test_connect_bad_args(void **state)
{
	struct usmc_ctx *ctx;
	struct usmc_conn *c;
	struct sockaddr_in a = loopback(1); /* nobody listens on port 1 */
	char buf[4];

	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_connect(ctx, NULL, sizeof(a), 0, &c), -EINVAL);
	assert_int_equal(usmc_connect(ctx, (struct sockaddr *)&a, 3, 0, &c), -EINVAL);
	assert_int_equal(usmc_connect(ctx, (struct sockaddr *)&a, sizeof(a), 0x10, &c), -EINVAL);
	assert_int_equal(usmc_connect(ctx, (struct sockaddr *)&a, sizeof(a), 0, &c), -ECONNREFUSED);
	assert_int_equal(usmc_send(NULL, buf, 1, 0), -EINVAL);
	assert_int_equal(usmc_recv(NULL, buf, 1, 0), -EINVAL);
	assert_int_equal(usmc_shutdown(NULL, SHUT_WR), -EINVAL);
	assert_int_equal(usmc_close(NULL), -EINVAL);
	assert_int_equal(usmc_conn_fd(NULL), -EINVAL);
	assert_int_equal(usmc_conn_info(NULL, NULL), -EINVAL);
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	assert_int_equal(st.open_conns, 0); /* failed connects leak nothing */
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* probe_classify: the rule that tells a PROPOSAL from anything else */
static void test_probe_classify(void **state)
{
	const uint8_t prop_v1[] = {0xE2, 0xD4, 0xC3, 0xD9, 0x01, 0x00, 0x34, 0x10};
	const uint8_t prop_v2[] = {0xE2, 0xD4, 0xC3, 0xD9, 0x01, 0x00, 0x9C, 0x22};
	const uint8_t accept[] = {0xE2, 0xD4, 0xC3, 0xD9, 0x02, 0x00, 0x44, 0x18};
	const uint8_t v0[] = {0xE2, 0xD4, 0xC3, 0xD9, 0x01, 0x00, 0x34, 0x00};
	const uint8_t http[] = "GET / HTTP/1.1\r\n";

	assert_int_equal(probe_classify(prop_v1, 8), PROBE_SMC);
	assert_int_equal(probe_classify(prop_v2, 8), PROBE_SMC);
	for (size_t n = 1; n < 8; n++)
		assert_int_equal(probe_classify(prop_v1, n), PROBE_NEED_MORE);
	assert_int_equal(probe_classify(prop_v1, 0), PROBE_NEED_MORE);
	assert_int_equal(probe_classify(accept, 8), PROBE_TCP);
	assert_int_equal(probe_classify(v0, 8), PROBE_TCP);
	assert_int_equal(probe_classify(http, 8), PROBE_TCP);
	assert_int_equal(probe_classify(http, 1), PROBE_TCP);
	assert_int_equal(probe_classify((const uint8_t *)"\xE2\xD4X", 3), PROBE_TCP);
}

/* Set @name back to @saved (a strdup()ed value, freed) or unset it. */
static void restore_env(const char *name, char *saved)
{
	if (saved)
		setenv(name, saved, 1);
	else
		unsetenv(name);
	free(saved);
}

/* usmc_env_check() names the variable usmc_ctx_create() refused. */
static void test_env_check(void **state)
{
	struct usmc_ctx *ctx;
	char msg[128], tiny[8], *ueid, *kc;
	long v;

	assert_int_equal(usmc_env_check(msg, sizeof(msg)), 0);
	assert_string_equal(msg, "");
	assert_int_equal(usmc_env_check(NULL, 0), 0);
	assert_int_equal(usmc_env_check(NULL, 8), -EINVAL);

	setenv("USMC_PROBE_MS", "abc", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);
	assert_int_equal(usmc_env_check(msg, sizeof(msg)), -EINVAL);
	assert_string_equal(msg, "USMC_PROBE_MS=abc: not an integer");
	assert_int_equal(usmc_env_check(tiny, sizeof(tiny)), -EINVAL);
	assert_string_equal(tiny, "USMC_PR"); /* truncated, terminated */
	assert_int_equal(usmc_env_check(NULL, 0), -EINVAL);
	unsetenv("USMC_PROBE_MS");

	/* USMC_MAX_BUFS is an option now: checked at creation, 1..255 */
	setenv("USMC_MAX_BUFS", "0", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);
	assert_int_equal(usmc_env_check(msg, sizeof(msg)), -EINVAL);
	assert_string_equal(msg, "USMC_MAX_BUFS=0: out of range 1..255");
	setenv("USMC_MAX_BUFS", "256", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);
	setenv("USMC_MAX_BUFS", "7", 1);
	assert_int_equal(usmc_env_check(msg, sizeof(msg)), 0);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_MAX_BUFS, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_MAX_BUFS, 0), -EINVAL);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_MAX_BUFS, 255), 0);
	usmc_ctx_destroy(ctx);
	unsetenv("USMC_MAX_BUFS");
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_MAX_BUFS, &v), 0);
	assert_int_equal(v, 255);
	usmc_ctx_destroy(ctx);

	/* the variables that are not options (the run's own values come back) */
	ueid = getenv("USMC_UEID") ? strdup(getenv("USMC_UEID")) : NULL;
	kc = getenv("USMC_KERNEL_COMPAT") ? strdup(getenv("USMC_KERNEL_COMPAT")) : NULL;
	setenv("USMC_UEID", "bad ueid", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);
	assert_int_equal(usmc_env_check(msg, sizeof(msg)), -EINVAL);
	assert_string_equal(msg, "USMC_UEID=bad ueid: not a UEID (1-32 of A-Z 0-9 . -, the first "
				 "alphanumeric)");
	restore_env("USMC_UEID", ueid);
	setenv("USMC_KERNEL_COMPAT", "maybe", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);
	assert_int_equal(usmc_env_check(msg, sizeof(msg)), -EINVAL);
	assert_string_equal(msg, "USMC_KERNEL_COMPAT=maybe: not auto, 0 or 1");
	restore_env("USMC_KERNEL_COMPAT", kc);
	assert_int_equal(usmc_env_check(msg, sizeof(msg)), 0);
}

/* usmc_ctx_create_env(): the variables of a list, not of the environment */
static void test_ctx_create_env(void **state)
{
	char log[64], logvar[80], msg[128];
	/* each list that makes a context turns kernel-compatible mode off: a
	 * list replaces the environment, where the valgrind run says so, and
	 * valgrind does not model the bpf() system call */
	const char *list[] = {"USMC_PROBE_MSX=5",
			      "USMC_PROBE_MS",
			      "USMC_PROBE_MS=1234",
			      "USMC_PROBE_MS=99",
			      "USMC_KERNEL_COMPAT=0",
			      logvar,
			      NULL};
	const char *bad_ueid[] = {"USMC_UEID=bad ueid", NULL},
		   *bad_kc[] = {"USMC_KERNEL_COMPAT=maybe", NULL};
	const char *none[] = {"USMC_KERNEL_COMPAT=0", NULL};
	struct usmc_ctx *ctx;
	long v;

	snprintf(log, sizeof(log), "/tmp/test_api_env.%d", (int)getpid());
	snprintf(logvar, sizeof(logvar), "USMC_LOG=err,%s", log);
	unlink(log);
	setenv("USMC_PROBE_MS", "777", 1);
	setenv("USMC_HS_THREADS", "5", 1);
	/* the list's first USMC_PROBE_MS=, as getenv() finds; nothing from the
	 * process's environment (USMC_HS_THREADS keeps its default) */
	assert_int_equal(usmc_ctx_create_env(&ctx, list), 0);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_PROBE_MS, &v), 0);
	assert_int_equal(v, 1234);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_HS_THREADS, &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(access(log, F_OK), 0); /* USMC_LOG's file, from the list */
	usmc_ctx_destroy(ctx);
	unlink(log);
	assert_int_equal(usmc_ctx_create_env(&ctx, none), 0);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_PROBE_MS, &v), 0);
	assert_int_equal(v, 100);
	usmc_ctx_destroy(ctx);
	/* NULL: the process's environment */
	assert_int_equal(usmc_ctx_create_env(&ctx, NULL), 0);
	assert_int_equal(usmc_ctx_getopt(ctx, USMC_OPT_PROBE_MS, &v), 0);
	assert_int_equal(v, 777);
	usmc_ctx_destroy(ctx);
	unsetenv("USMC_HS_THREADS");
	assert_int_equal(usmc_env_check_env(NULL, msg, sizeof(msg)), 0);
	/* bad values in the list, named by usmc_env_check_env() */
	setenv("USMC_PROBE_MS", "abc", 1);
	assert_int_equal(usmc_env_check_env(list, msg, sizeof(msg)), 0);
	assert_string_equal(msg, "");
	assert_int_equal(usmc_env_check_env(NULL, msg, sizeof(msg)), -EINVAL);
	unsetenv("USMC_PROBE_MS");
	assert_int_equal(usmc_ctx_create_env(&ctx, bad_ueid), -EINVAL);
	assert_int_equal(usmc_env_check_env(bad_ueid, msg, sizeof(msg)), -EINVAL);
	assert_string_equal(msg, "USMC_UEID=bad ueid: not a UEID (1-32 of A-Z 0-9 . -, the first "
				 "alphanumeric)");
	assert_int_equal(usmc_ctx_create_env(&ctx, bad_kc), -EINVAL);
	assert_int_equal(usmc_env_check_env(bad_kc, msg, sizeof(msg)), -EINVAL);
	assert_string_equal(msg, "USMC_KERNEL_COMPAT=maybe: not auto, 0 or 1");
	assert_int_equal(usmc_env_check_env(bad_kc, NULL, 8), -EINVAL);
	assert_int_equal(usmc_ctx_create_env(NULL, none), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_strerror),
		cmocka_unit_test(test_reasons),
		cmocka_unit_test(test_ctx_options),
		cmocka_unit_test(test_env_defaults),
		cmocka_unit_test(test_env_check),
		cmocka_unit_test(test_ctx_create_env),
		cmocka_unit_test(test_devices_none),
		cmocka_unit_test(test_listen_bad_args),
		cmocka_unit_test(test_accept_nonblock_empty),
		cmocka_unit_test(test_connect_bad_args),
		cmocka_unit_test(test_probe_classify),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
