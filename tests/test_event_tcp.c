// SPDX-License-Identifier: MIT
/*
 * The event API on TCP-mode connections and listeners (usmc.h "Events"),
 * one scenario per test: bad arguments; a poll's timeout; accept events of
 * a probing and of a direct listener; a connection's readiness edges, each
 * both ways: readable with data, not once drained, again level-triggered,
 * HUP (when asked for) at the peer's shutdown and close, ERR (unasked) at
 * its reset; writable, not while the send buffer is full, again once the
 * peer drained it; a watch
 * changed and ended (by the call and by usmc_close()); the context's
 * descriptor readable exactly when a poll has something, from an outer
 * epoll set. Deadlines on every wait.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/event_pair.h"

#define WAIT_MS 5000 /* an event that should come: a failure when later */

static struct usmc_ctx *ctx;
static struct usmc_listener *lis;
static struct sockaddr_storage addr;
static socklen_t alen;

static int setup_flags(unsigned int flags)
{
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	lis = ev_listen(ctx, flags, &addr, &alen);
	return 0;
}

static int setup(void **state)
{
	(void)state;
	return setup_flags(USMC_LISTEN_NONBLOCK);
}

static int setup_direct(void **state)
{
	(void)state;
	return setup_flags(USMC_LISTEN_NONBLOCK | USMC_LISTEN_TCP_ONLY);
}

static int teardown(void **state)
{
	(void)state;
	assert_int_equal(usmc_listener_close(lis), 0);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
	return 0;
}

static void test_invalid(void **state)
{
	struct usmc_event ev[2];
	struct usmc_conn *c, *s, *unconnected;

	(void)state;
	assert_int_equal(usmc_ctx_event_fd(NULL), -EINVAL);
	assert_int_equal(usmc_ctx_poll(NULL, ev, 2, 0), -EINVAL);
	assert_int_equal(usmc_ctx_poll(ctx, NULL, 2, 0), -EINVAL);
	assert_int_equal(usmc_ctx_poll(ctx, ev, 0, 0), -EINVAL);
	assert_int_equal(usmc_ctx_poll(ctx, ev, -1, 0), -EINVAL);
	assert_int_equal(usmc_ctx_poll(ctx, ev, 2, -2), -EINVAL);
	assert_int_equal(usmc_conn_watch(NULL, USMC_EV_READ, NULL), -EINVAL);
	assert_int_equal(usmc_listener_watch(NULL, USMC_EV_ACCEPT, NULL), -EINVAL);
	assert_int_equal(usmc_listener_watch(lis, USMC_EV_READ, NULL), -EINVAL);
	assert_int_equal(usmc_listener_watch(lis, 1u << 20, NULL), -EINVAL);
	assert_int_equal(usmc_conn_create(ctx, &unconnected), 0);
	assert_int_equal(usmc_conn_watch(unconnected, USMC_EV_READ, NULL), -ENOTCONN);
	assert_int_equal(usmc_conn_watch(unconnected, 0, NULL), 0); /* nothing to end */
	assert_int_equal(usmc_close(unconnected), 0);
	ev_pair(ctx, lis, &addr, alen, &c, &s);
	assert_int_equal(usmc_conn_watch(c, USMC_EV_ACCEPT, NULL), -EINVAL);
	assert_int_equal(usmc_conn_watch(c, 1u << 20, NULL), -EINVAL);
	/* nothing was watched by the failed calls */
	assert_int_equal(usmc_ctx_poll(ctx, ev, 2, 0), 0);
	/* the descriptor is one and the same */
	assert_true(usmc_ctx_event_fd(ctx) >= 0);
	assert_int_equal(usmc_ctx_event_fd(ctx), usmc_ctx_event_fd(ctx));
	usmc_close(c);
	usmc_close(s);
}

/* Nothing ready: 0 after the time asked, not before and not much later. */
static void test_timeout(void **state)
{
	struct usmc_event ev[4];
	struct usmc_conn *c, *s;
	long t0;

	(void)state;
	t0 = ev_now_ms();
	assert_int_equal(usmc_ctx_poll(ctx, ev, 4, 0), 0);
	assert_true(ev_now_ms() - t0 < 100);
	ev_pair(ctx, lis, &addr, alen, &c, &s);
	assert_int_equal(usmc_conn_watch(s, USMC_EV_READ, NULL), 0); /* nothing to read */
	assert_false(ev_fd_readable(usmc_ctx_event_fd(ctx)));
	t0 = ev_now_ms();
	assert_int_equal(usmc_ctx_poll(ctx, ev, 4, 150), 0);
	assert_true(ev_now_ms() - t0 >= 140);
	assert_true(ev_now_ms() - t0 < 1000);
	usmc_close(c);
	usmc_close(s);
}

/* ACCEPT while usmc_accept() has a connection, not after it took it. */
static void accept_events(void)
{
	int cfd[3];
	struct usmc_conn *s;
	void *user = NULL;
	int tag;

	assert_int_equal(usmc_listener_watch(lis, USMC_EV_ACCEPT, &tag), 0);
	assert_int_equal(ev_wait_for(ctx, NULL, lis, USMC_EV_ACCEPT, 100, NULL), 0);
	for (int i = 0; i < 3; i++) {
		cfd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(cfd[i] >= 0);
		assert_int_equal(connect(cfd[i], (struct sockaddr *)&addr, alen), 0);
		assert_int_equal(write(cfd[i], "x", 1), 1); /* the probe's answer: TCP */
	}
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ev_wait_for(ctx, NULL, lis, USMC_EV_ACCEPT, WAIT_MS, &user),
				 USMC_EV_ACCEPT);
		assert_ptr_equal(user, &tag);
		assert_true(ev_fd_readable(usmc_ctx_event_fd(ctx)));
		/* level-triggered: again, untaken */
		assert_int_equal(ev_wait_for(ctx, NULL, lis, USMC_EV_ACCEPT, 0, NULL),
				 USMC_EV_ACCEPT);
		assert_int_equal(usmc_accept(lis, 0, &s), 0);
		usmc_close(s);
	}
	assert_int_equal(usmc_accept(lis, 0, &s), -EAGAIN);
	assert_int_equal(ev_wait_for(ctx, NULL, lis, USMC_EV_ACCEPT, 0, NULL), 0);
	assert_false(ev_fd_readable(usmc_ctx_event_fd(ctx)));
	/* unwatched: a new client is not told */
	assert_int_equal(usmc_listener_watch(lis, 0, NULL), 0);
	close(cfd[0]);
	cfd[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(cfd[0], (struct sockaddr *)&addr, alen), 0);
	assert_int_equal(write(cfd[0], "x", 1), 1);
	assert_int_equal(ev_wait_for(ctx, NULL, lis, USMC_EV_ACCEPT, 300, NULL), 0);
	for (int i = 0; i < 3; i++)
		close(cfd[i]);
	/* watched again, it is told of the one waiting */
	assert_int_equal(usmc_listener_watch(lis, USMC_EV_ACCEPT, NULL), 0);
	assert_int_equal(ev_wait_for(ctx, NULL, lis, USMC_EV_ACCEPT, WAIT_MS, NULL),
			 USMC_EV_ACCEPT);
	/* usmc_listener_close() (teardown) ends the watch */
}

static void test_accept(void **state)
{
	(void)state;
	accept_events();
}

static void test_accept_direct(void **state)
{
	(void)state;
	accept_events();
}

/* READ with data, level-triggered; not once drained; HUP (asked for) at
 * the peer's SHUT_WR, with READ (EOF to read). */
static void test_read_hup(void **state)
{
	struct usmc_conn *c, *s;
	char buf[64];
	void *user = NULL;
	int tag;

	(void)state;
	ev_pair(ctx, lis, &addr, alen, &c, &s);
	assert_int_equal(usmc_conn_watch(s, USMC_EV_READ | USMC_EV_HUP, &tag), 0);
	assert_int_equal(ev_now(ctx, s), 0);
	assert_int_equal(usmc_send(c, "hello", 5, 0), 5);
	assert_int_equal(ev_wait_for(ctx, s, NULL, USMC_EV_READ, WAIT_MS, &user), USMC_EV_READ);
	assert_ptr_equal(user, &tag);
	assert_true(ev_fd_readable(usmc_ctx_event_fd(ctx)));
	assert_int_equal(ev_now(ctx, s), USMC_EV_READ); /* level */
	assert_int_equal(usmc_recv(s, buf, 2, 0), 2);
	assert_int_equal(ev_now(ctx, s), USMC_EV_READ); /* 3 bytes left */
	assert_int_equal(usmc_recv(s, buf, sizeof(buf), 0), 3);
	assert_memory_equal(buf, "llo", 3);
	assert_int_equal(ev_now(ctx, s), 0);
	assert_false(ev_fd_readable(usmc_ctx_event_fd(ctx)));
	assert_int_equal(usmc_shutdown(c, SHUT_WR), 0);
	assert_int_equal(ev_wait_for(ctx, s, NULL, USMC_EV_READ | USMC_EV_HUP, WAIT_MS, NULL),
			 USMC_EV_READ | USMC_EV_HUP);
	assert_int_equal(usmc_recv(s, buf, sizeof(buf), 0), 0);
	/* the peer's whole close: still HUP, READ (EOF) */
	usmc_close(c);
	assert_int_equal(ev_wait_for(ctx, s, NULL, USMC_EV_HUP, WAIT_MS, NULL) & USMC_EV_HUP,
			 USMC_EV_HUP);
	usmc_close(s);
	assert_int_equal(ev_now(ctx, s), 0); /* closed: out of the set */
}

/* HUP only when asked for (a writer whose peer half-closed goes on
 * writing, as with EPOLLRDHUP); asked for without READ, it comes alone. */
static void test_hup_asked(void **state)
{
	struct usmc_conn *c, *s;

	(void)state;
	ev_pair(ctx, lis, &addr, alen, &c, &s);
	assert_int_equal(usmc_conn_watch(s, USMC_EV_WRITE, NULL), 0);
	assert_int_equal(ev_wait_for(ctx, s, NULL, USMC_EV_WRITE, WAIT_MS, NULL), USMC_EV_WRITE);
	assert_int_equal(usmc_shutdown(c, SHUT_WR), 0);
	usleep(100 * 1000); /* the FIN is in */
	assert_int_equal(ev_now(ctx, s), USMC_EV_WRITE);
	assert_int_equal(usmc_conn_watch(s, USMC_EV_WRITE | USMC_EV_HUP, NULL), 0);
	assert_int_equal(ev_wait_for(ctx, s, NULL, USMC_EV_HUP, WAIT_MS, NULL),
			 USMC_EV_WRITE | USMC_EV_HUP); /* no READ: not asked for */
	assert_int_equal(usmc_conn_watch(s, USMC_EV_HUP, NULL), 0);
	assert_int_equal(ev_now(ctx, s), USMC_EV_HUP);
	usmc_close(c);
	usmc_close(s);
}

/* ERR at the peer's reset, unasked (HUP too when asked for); the next call
 * returns the error. */
static void test_reset(void **state)
{
	struct usmc_conn *c, *s, *c2, *s2;
	char b;

	(void)state;
	ev_pair(ctx, lis, &addr, alen, &c, &s);
	ev_pair(ctx, lis, &addr, alen, &c2, &s2);
	assert_int_equal(usmc_conn_watch(s, USMC_EV_READ | USMC_EV_HUP, NULL), 0);
	assert_int_equal(usmc_conn_watch(s2, USMC_EV_WRITE, NULL), 0);
	assert_int_equal(usmc_abort(c), 0);
	assert_int_equal(usmc_abort(c2), 0);
	assert_int_equal(ev_wait_for(ctx, s, NULL, USMC_EV_ERR | USMC_EV_HUP, WAIT_MS, NULL),
			 USMC_EV_READ | USMC_EV_ERR | USMC_EV_HUP);
	assert_int_equal(ev_wait_for(ctx, s2, NULL, USMC_EV_ERR, WAIT_MS, NULL),
			 USMC_EV_WRITE | USMC_EV_ERR);
	assert_int_equal(usmc_recv(s, &b, 1, 0), -ECONNRESET);
	assert_int_equal(usmc_send(s2, "x", 1, 0), -ECONNRESET);
	usmc_close(s);
	usmc_close(s2);
}

/* WRITE while there is room; not once the send buffer is full; again once
 * the peer read enough. */
static void test_write_full(void **state)
{
	static char blob[64 * 1024], sink[64 * 1024];
	struct usmc_conn *c, *s;
	long filled = 0, drained = 0;
	int sz = 16 * 1024;

	(void)state;
	ev_pair(ctx, lis, &addr, alen, &c, &s);
	/* small buffers: the fill is quick */
	assert_int_equal(usmc_conn_setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz)), 0);
	assert_int_equal(usmc_conn_setsockopt(c, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz)), 0);
	assert_int_equal(usmc_conn_watch(s, USMC_EV_WRITE, NULL), 0);
	assert_int_equal(ev_wait_for(ctx, s, NULL, USMC_EV_WRITE, WAIT_MS, NULL), USMC_EV_WRITE);
	for (;;) {
		ssize_t n = usmc_send(s, blob, sizeof(blob), 0);

		if (n == -EAGAIN)
			break;
		assert_true(n > 0);
		filled += n;
		assert_true(filled < 64L * 1024 * 1024);
	}
	assert_int_equal(ev_now(ctx, s), 0);
	assert_false(ev_fd_readable(usmc_ctx_event_fd(ctx)));
	/* the peer reads: room comes back, and WRITE with it */
	while (drained < filled) {
		ssize_t n = usmc_recv(c, sink, sizeof(sink), MSG_DONTWAIT);

		if (n == -EAGAIN) {
			if (ev_wait_for(ctx, s, NULL, USMC_EV_WRITE, 0, NULL))
				break;
			usleep(1000);
			continue;
		}
		assert_true(n > 0);
		drained += n;
	}
	assert_int_equal(ev_wait_for(ctx, s, NULL, USMC_EV_WRITE, WAIT_MS, NULL), USMC_EV_WRITE);
	usmc_close(c);
	usmc_close(s);
}

/* A second watch call changes what is asked for and the user pointer. */
static void test_change(void **state)
{
	struct usmc_conn *c, *s;
	void *user = NULL;
	int a, b;

	(void)state;
	ev_pair(ctx, lis, &addr, alen, &c, &s);
	assert_int_equal(usmc_conn_watch(s, USMC_EV_READ, &a), 0);
	assert_int_equal(ev_now(ctx, s), 0);
	assert_int_equal(usmc_conn_watch(s, USMC_EV_READ | USMC_EV_WRITE, &b), 0);
	assert_int_equal(ev_wait_for(ctx, s, NULL, USMC_EV_WRITE, WAIT_MS, &user), USMC_EV_WRITE);
	assert_ptr_equal(user, &b);
	assert_int_equal(usmc_send(c, "z", 1, 0), 1);
	assert_int_equal(ev_wait_for(ctx, s, NULL, USMC_EV_READ | USMC_EV_WRITE, WAIT_MS, NULL),
			 USMC_EV_READ | USMC_EV_WRITE);
	assert_int_equal(usmc_conn_watch(s, USMC_EV_READ, &a), 0);
	assert_int_equal(ev_now(ctx, s), USMC_EV_READ);
	assert_int_equal(usmc_conn_watch(s, 0, NULL), 0);
	assert_int_equal(ev_now(ctx, s), 0);
	assert_false(ev_fd_readable(usmc_ctx_event_fd(ctx)));
	usmc_close(c);
	usmc_close(s);
}

/* The context's descriptor in an outer epoll set wakes it, as a loop uses it. */
static void test_outer_epoll(void **state)
{
	struct epoll_event ee = {.events = EPOLLIN};
	struct usmc_conn *c, *s;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	long t0;

	(void)state;
	assert_true(ep >= 0);
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, usmc_ctx_event_fd(ctx), &ee), 0);
	ev_pair(ctx, lis, &addr, alen, &c, &s);
	assert_int_equal(usmc_conn_watch(s, USMC_EV_READ, NULL), 0);
	assert_int_equal(epoll_wait(ep, &ee, 1, 100), 0);
	t0 = ev_now_ms();
	assert_int_equal(usmc_send(c, "ping", 4, 0), 4);
	assert_int_equal(epoll_wait(ep, &ee, 1, WAIT_MS), 1);
	assert_true(ev_now_ms() - t0 < WAIT_MS);
	assert_int_equal(ev_now(ctx, s), USMC_EV_READ);
	close(ep);
	usmc_close(c);
	usmc_close(s);
}

/* Many connections: each one's event names it and its user pointer; the
 * ones beyond @max come in the next calls. */
static void test_many_small_max(void **state)
{
	enum { N = 40, MAX = 3 };
	struct usmc_conn *c[N], *s[N];
	int seen[N] = {0}, total = 0;
	long until;

	(void)state;
	for (int i = 0; i < N; i++) {
		ev_pair(ctx, lis, &addr, alen, &c[i], &s[i]);
		assert_int_equal(usmc_conn_watch(s[i], USMC_EV_READ, &seen[i]), 0);
		assert_int_equal(usmc_send(c[i], "m", 1, 0), 1);
	}
	until = ev_now_ms() + WAIT_MS;
	while (total < N && ev_now_ms() < until) {
		struct usmc_event ev[MAX];
		int n = usmc_ctx_poll(ctx, ev, MAX, 100);

		assert_true(n >= 0 && n <= MAX);
		for (int i = 0; i < n; i++) {
			int *p = ev[i].user, k = (int)(p - seen);
			char b;

			assert_true(k >= 0 && k < N);
			assert_ptr_equal(ev[i].conn, s[k]);
			assert_int_equal(ev[i].events, USMC_EV_READ);
			assert_int_equal(usmc_recv(s[k], &b, 1, 0), 1); /* no longer ready */
			assert_int_equal(seen[k]++, 0);
			total++;
		}
	}
	assert_int_equal(total, N);
	for (int i = 0; i < N; i++) {
		usmc_close(c[i]);
		usmc_close(s[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_invalid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_accept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_accept_direct, setup_direct, teardown),
		cmocka_unit_test_setup_teardown(test_read_hup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hup_asked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reset, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write_full, setup, teardown),
		cmocka_unit_test_setup_teardown(test_change, setup, teardown),
		cmocka_unit_test_setup_teardown(test_outer_epoll, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_small_max, setup_direct, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
