/* SPDX-License-Identifier: MIT */
/*
 * Fixtures of the event API's host tests (tests/test_event_*.c): a pair of
 * connected usmc connections over loopback TCP (a usmc client, the usmc
 * listener's accepted end), and a poll that waits for one connection's
 * event with a deadline. Every step checks (common/check.h): a setup that
 * broke fails the test where it broke.
 */
#ifndef USMC_TEST_EVENT_PAIR_H
#define USMC_TEST_EVENT_PAIR_H

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include <usmc/usmc.h>

#include "check.h"

static inline long ev_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A listener of @ctx on 127.0.0.1, port picked by the kernel. */
static inline struct usmc_listener *ev_listen(struct usmc_ctx *ctx, unsigned int flags,
					      struct sockaddr_storage *addr, socklen_t *alen)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct usmc_listener *l;
	int rc = usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 1024, flags, &l);

	CHECK(!rc, "usmc_listen: %s", usmc_strerror(rc));
	*alen = sizeof(*addr);
	rc = usmc_listener_addr(l, addr, alen);
	CHECK(!rc, "usmc_listener_addr: %s", usmc_strerror(rc));
	return l;
}

/* A usmc client of @ctx connected to @l, and the accepted end: the client
 * blocking (MSG_DONTWAIT where a test must not wait), the server not. */
static inline void ev_pair(struct usmc_ctx *ctx, struct usmc_listener *l,
			   const struct sockaddr_storage *addr, socklen_t alen,
			   struct usmc_conn **client, struct usmc_conn **server)
{
	int rc = usmc_connect(ctx, (const struct sockaddr *)addr, alen, 0, client);

	CHECK(!rc, "usmc_connect: %s", usmc_strerror(rc));
	/* a TCP client of a probing listener says nothing: the probe's
	 * silence decides, or its first byte; ours is read below */
	rc = (int)usmc_send(*client, "!", 1, 0);
	CHECK(rc == 1, "usmc_send: %s", usmc_strerror(rc));
	{
		char b;
		long until = ev_now_ms() + 5000;

		/* a listener made with USMC_LISTEN_NONBLOCK */
		while ((rc = usmc_accept(l, USMC_NONBLOCK, server)) == -EAGAIN &&
		       ev_now_ms() < until) {
			struct pollfd p = {.fd = usmc_listener_fd(l), .events = POLLIN};

			poll(&p, 1, 100);
		}
		CHECK(!rc, "usmc_accept: %s", usmc_strerror(rc));

		while ((rc = (int)usmc_recv(*server, &b, 1, 0)) == -EAGAIN && ev_now_ms() < until) {
			struct pollfd p = {.fd = usmc_conn_fd(*server), .events = POLLIN};

			poll(&p, 1, 100);
		}
		CHECK(rc == 1 && b == '!', "the first byte: %s", usmc_strerror(rc));
	}
}

/* Whether @fd is readable now. */
static inline bool ev_fd_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/*
 * Poll @ctx until an event of @conn (or, @conn NULL, of @l) has all of
 * @want, at most @ms; returns its bits (0: not within @ms). Other events
 * are ignored.
 */
static inline uint32_t ev_wait_for(struct usmc_ctx *ctx, const struct usmc_conn *conn,
				   const struct usmc_listener *l, uint32_t want, int ms,
				   void **user)
{
	long until = ev_now_ms() + ms;

	for (;;) {
		struct usmc_event ev[16];
		long left = until - ev_now_ms();
		int n = usmc_ctx_poll(ctx, ev, 16, left > 0 ? (int)left : 0);

		CHECK(n >= 0, "usmc_ctx_poll: %s", usmc_strerror(n));
		for (int i = 0; i < n; i++) {
			bool mine = conn ? ev[i].conn == conn : ev[i].listener == l;

			CHECK(!ev[i].conn != !ev[i].listener, "an event names one object");
			if (mine && (ev[i].events & want) == want) {
				if (user)
					*user = ev[i].user;
				return ev[i].events;
			}
		}
		if (left <= 0)
			return 0;
	}
}

/* Every event a poll of @ctx returns now for @conn (0: none). */
static inline uint32_t ev_now(struct usmc_ctx *ctx, const struct usmc_conn *conn)
{
	struct usmc_event ev[64];
	uint32_t bits = 0;
	int n = usmc_ctx_poll(ctx, ev, 64, 0);

	CHECK(n >= 0, "usmc_ctx_poll: %s", usmc_strerror(n));
	for (int i = 0; i < n; i++)
		if (ev[i].conn == conn)
			bits |= ev[i].events;
	return bits;
}

#endif
