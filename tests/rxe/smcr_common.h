/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the SMC-R tests run in the soft-RoCE guest: the two "hosts"
 * come from USMC_TEST_HOST_A/_B (vm-run.sh --setup two). No address or no
 * device is a failure, never a skip.
 */
#ifndef USMC_TEST_SMCR_COMMON_H
#define USMC_TEST_SMCR_COMMON_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <usmc/usmc.h>

#include "../common/check.h"
#include "mono_clock.h"
#include "roce_cut.h"

static inline struct sockaddr_in host_addr(const char *env, uint16_t port)
{
	const char *h = getenv(env);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};

	CHECK(h && inet_pton(AF_INET, h, &sa.sin_addr) == 1, "%s not set (run in the guest)", env);
	return sa;
}

/* Open descriptors of this process, less ., .. and the directory's own. */
static inline int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	CHECK(d, "opendir /proc/self/fd");
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3;
}

static inline long env_long(const char *name, long def)
{
	const char *v = getenv(name);

	return v && *v ? strtol(v, NULL, 0) : def;
}

/* A listener on host B with usmc_listen()'s @flags, port chosen by the
 * kernel; returns its address. */
static inline struct usmc_listener *listen_b_flags(struct usmc_ctx *ctx, int backlog,
						   unsigned int flags, struct sockaddr_in *bound)
{
	struct sockaddr_in sa = host_addr("USMC_TEST_HOST_B", 0);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct usmc_listener *l;
	int rc = usmc_listen(ctx, (struct sockaddr *)&sa, sizeof(sa), backlog, flags, &l);

	CHECK(!rc, "usmc_listen: %s", usmc_strerror(rc));
	rc = usmc_listener_addr(l, &ss, &len);
	CHECK(!rc, "usmc_listener_addr: %s", usmc_strerror(rc));
	memcpy(bound, &ss, sizeof(*bound));
	return l;
}

/* A listener on host B, port chosen by the kernel; returns its address. */
static inline struct usmc_listener *listen_b(struct usmc_ctx *ctx, int backlog,
					     struct sockaddr_in *bound)
{
	return listen_b_flags(ctx, backlog, 0, bound);
}

static inline void expect_smcr(const struct usmc_conn *c, const char *who)
{
	struct usmc_conn_info info;
	int rc = usmc_conn_info(c, &info);

	CHECK(!rc, "usmc_conn_info: %s", usmc_strerror(rc));
	CHECK(info.mode == USMC_MODE_SMCR, "%s runs %s, not SMC-R (reason %s%s)", who,
	      usmc_mode_name(info.mode), usmc_reason_name(info.reason),
	      info.peer_declined ? ", declined by the peer" : "");
	CHECK(info.smc_version == 2 && info.lgr_id, "%s: SMC-Rv2 with a link group expected", who);
}

/* Sends all of @buf on @c (blocking); dies on an error. */
static inline void send_all(struct usmc_conn *c, const void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = usmc_send(c, (const uint8_t *)buf + off, len - off, 0);

		CHECK(n > 0, "send: %s", usmc_strerror((int)n));
		off += (size_t)n;
	}
}

/* Sends back what @c receives (through @buf of @size) until the peer's EOF;
 * returns the bytes echoed. Dies on an error. */
static inline uint64_t echo_until_eof(struct usmc_conn *c, uint8_t *buf, size_t size)
{
	uint64_t echoed = 0;

	for (;;) {
		ssize_t n = usmc_recv(c, buf, size, 0);

		CHECK(n >= 0, "echo recv: %s", usmc_strerror((int)n));
		if (!n)
			return echoed;
		send_all(c, buf, (size_t)n);
		echoed += (uint64_t)n;
	}
}

/* A non-blocking connect to @sa, finished (the mode is final then); dies
 * unless it runs SMC-R. */
static inline struct usmc_conn *connect_nonblock_smcr(struct usmc_ctx *ctx,
						      const struct sockaddr_in *sa)
{
	struct usmc_conn *c;
	int rc = usmc_connect(ctx, (const struct sockaddr *)sa, sizeof(*sa), USMC_NONBLOCK, &c);

	CHECK(!rc, "usmc_connect: %s", usmc_strerror(rc));
	while ((rc = usmc_connect_finish(c)) == -EINPROGRESS)
		usleep(1000);
	CHECK(!rc, "usmc_connect_finish: %s", usmc_strerror(rc));
	expect_smcr(c, "client");
	return c;
}

/* connect_nonblock_smcr(), or with @allow_tcp any mode (a host check of a
 * test's own logic, USMC_TEST_ALLOW_TCP). */
static inline struct usmc_conn *
connect_nonblock_smcr_or_tcp(struct usmc_ctx *ctx, const struct sockaddr_in *sa, bool allow_tcp)
{
	struct usmc_conn *c;
	int rc;

	if (!allow_tcp)
		return connect_nonblock_smcr(ctx, sa);
	rc = usmc_connect(ctx, (const struct sockaddr *)sa, sizeof(*sa), USMC_NONBLOCK, &c);
	CHECK(!rc, "usmc_connect: %s", usmc_strerror(rc));
	while ((rc = usmc_connect_finish(c)) == -EINPROGRESS || rc == -EAGAIN)
		usleep(1000);
	CHECK(!rc, "usmc_connect_finish: %s", usmc_strerror(rc));
	return c;
}

/* The peer's EOF on non-blocking @c, announced by readiness on @ep (its
 * descriptor registered); dies on data, an error or @ms without readiness. */
static inline void await_eof_epoll(struct usmc_conn *c, int ep, int ms)
{
	for (;;) {
		struct epoll_event e;
		uint8_t b;
		ssize_t r = usmc_recv(c, &b, 1, 0);

		if (r == 0)
			return;
		CHECK(r == -EAGAIN, "EOF expected, got %zd", r);
		CHECK(epoll_wait(ep, &e, 1, ms) == 1, "no readiness for the EOF in %d ms", ms);
	}
}

#endif
