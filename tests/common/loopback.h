/* SPDX-License-Identifier: MIT */
/*
 * Fixtures of the cmocka tests that run over loopback TCP: a usmc listener
 * on 127.0.0.1 with a port the kernel picks, a plain-socket client of it,
 * exact reads. Every step asserts (include <cmocka.h> first), so a test
 * fails where its setup broke.
 */
#ifndef USMC_TEST_LOOPBACK_H
#define USMC_TEST_LOOPBACK_H

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include <usmc/usmc.h>

/* A listener of @ctx on 127.0.0.1:0; its bound address in @addr/@alen. */
static inline struct usmc_listener *lo_listen(struct usmc_ctx *ctx, int backlog, unsigned int flags,
					      struct sockaddr_storage *addr, socklen_t *alen)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct usmc_listener *l;

	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), backlog, flags, &l), 0);
	*alen = sizeof(*addr);
	assert_int_equal(usmc_listener_addr(l, addr, alen), 0);
	return l;
}

/* A plain TCP socket connected to @addr (no SMC option on its SYN). */
static inline int plain_connect_to(const struct sockaddr_storage *addr, socklen_t alen)
{
	int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	if (connect(fd, (const struct sockaddr *)addr, alen))
		fail_msg("connect: %s", strerror(errno));
	return fd;
}

/* Reads exactly @len bytes from the plain socket @fd; EOF or error fails. */
static inline void fd_read_exact(int fd, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t n = recv(fd, (char *)buf + got, len - got, 0);

		assert_true(n > 0);
		got += (size_t)n;
	}
}

/* Reads exactly @len bytes from @c; EOF or error fails. */
static inline void conn_read_exact(struct usmc_conn *c, void *buf, size_t len)
{
	assert_int_equal(usmc_recv(c, buf, len, MSG_WAITALL), (ssize_t)len);
}

#endif
