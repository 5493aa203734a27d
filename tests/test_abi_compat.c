// SPDX-License-Identifier: MIT
/*
 * The shared library keeps the 0.1 ABI: binaries built against 0.1 call
 * usmc_conn_info@USMC_0.1, usmc_ctx_stats@USMC_0.1 and
 * usmc_listener_stats@USMC_0.1, which take no size and fill exactly the
 * 0.1 layout; the *_sized functions are USMC_0.2, usmc_ctx_create_env()
 * and usmc_env_check_env() USMC_0.3, usmc_ctx_set_devices() USMC_0.4, the
 * event API (usmc_conn_watch(), usmc_listener_watch(), usmc_ctx_event_fd(),
 * usmc_ctx_poll()) USMC_0.5, usmc_listen_prepare() USMC_0.6. Loads
 * libusmc.so (the path is the argument) and calls the old versions as an
 * old binary would.
 */
#include <dlfcn.h> /* dlvsym: _GNU_SOURCE comes from the build */
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/check.h"

/* Not usmc.h: an old binary knows only what 0.1 had, and this test needs
 * nothing but the opaque context. */
struct usmc_ctx;

/* The 0.1 struct ends at lgrs_open: 8 counters. */
#define CTX_STATS_V0_1 (8 * sizeof(uint64_t))

static void *sym(void *h, const char *name, const char *ver)
{
	void *f = dlvsym(h, name, ver);

	CHECK(f, "%s@%s missing: %s", name, ver, dlerror());
	return f;
}

int main(int argc, char **argv)
{
	int (*ctx_create)(struct usmc_ctx **);
	int (*ctx_destroy)(struct usmc_ctx *);
	void (*ctx_stats_v01)(const struct usmc_ctx *, void *);
	unsigned char buf[CTX_STATS_V0_1 + 32];
	struct usmc_ctx *ctx;
	void *h;

	CHECK(argc == 2, "usage: %s libusmc.so", argv[0]);
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	CHECK(h, "dlopen: %s", dlerror());
	ctx_create = (int (*)(struct usmc_ctx **))sym(h, "usmc_ctx_create", "USMC_0.1");
	ctx_destroy = (int (*)(struct usmc_ctx *))sym(h, "usmc_ctx_destroy", "USMC_0.1");
	ctx_stats_v01 =
		(void (*)(const struct usmc_ctx *, void *))sym(h, "usmc_ctx_stats", "USMC_0.1");
	sym(h, "usmc_conn_info", "USMC_0.1");
	sym(h, "usmc_listener_stats", "USMC_0.1");
	sym(h, "usmc_conn_info_sized", "USMC_0.2");
	sym(h, "usmc_ctx_stats_sized", "USMC_0.2");
	sym(h, "usmc_listener_stats_sized", "USMC_0.2");
	sym(h, "usmc_ctx_create_env", "USMC_0.3");
	sym(h, "usmc_env_check_env", "USMC_0.3");
	sym(h, "usmc_ctx_set_devices", "USMC_0.4");
	sym(h, "usmc_conn_watch", "USMC_0.5");
	sym(h, "usmc_listener_watch", "USMC_0.5");
	sym(h, "usmc_ctx_event_fd", "USMC_0.5");
	sym(h, "usmc_ctx_poll", "USMC_0.5");
	sym(h, "usmc_listen_prepare", "USMC_0.6");
	/* no default (unversioned-link) definition of the old names remains */
	CHECK(!dlvsym(h, "usmc_ctx_stats", "USMC_0.2"), "usmc_ctx_stats@USMC_0.2 exists");

	CHECK(ctx_create(&ctx) == 0, "usmc_ctx_create");
	memset(buf, 0xab, sizeof(buf));
	ctx_stats_v01(ctx, buf);
	for (size_t i = 0; i < CTX_STATS_V0_1; i++)
		CHECK(buf[i] == 0, "0.1 stats byte %zu: %#x (a fresh context counts 0)", i, buf[i]);
	for (size_t i = CTX_STATS_V0_1; i < sizeof(buf); i++)
		CHECK(buf[i] == 0xab,
		      "usmc_ctx_stats@USMC_0.1 wrote past the 0.1 struct (byte %zu)", i);
	CHECK(ctx_destroy(ctx) == 0, "usmc_ctx_destroy");
	dlclose(h);
	printf("test_abi_compat: 0.1 symbols present and bounded\n");
	return 0;
}
