/* SPDX-License-Identifier: MIT */
/*
 * Asynchronous connects (USMC_CONNECT_ASYNC) driven from one thread with
 * poll(), and an echo server that checks nothing but gives every byte
 * back: shared by test_connect_async_tcp (host) and test_connect_async
 * (soft-RoCE guest).
 */
#ifndef USMC_TEST_CONNECT_ASYNC_H
#define USMC_TEST_CONNECT_ASYNC_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <usmc/usmc.h>

#include "check.h"
#include "mono_clock.h"
#include "pattern.h"

/* A new asynchronous connect of @ctx to @sa with @clc_ms as the CLC timeout (0: as the context). */
static inline struct usmc_conn *async_connect(struct usmc_ctx *ctx, const struct sockaddr *sa,
					      socklen_t len, long clc_ms)
{
	struct usmc_conn *c;
	int rc = usmc_conn_create(ctx, &c);

	CHECK(!rc, "usmc_conn_create: %s", usmc_strerror(rc));
	if (clc_ms) {
		rc = usmc_conn_setopt(c, USMC_OPT_CLC_TIMEOUT_MS, clc_ms);
		CHECK(!rc, "setopt CLC timeout: %s", usmc_strerror(rc));
	}
	rc = usmc_conn_connect(c, sa, len, USMC_NONBLOCK | USMC_CONNECT_ASYNC);
	CHECK(!rc, "usmc_conn_connect: %s", usmc_strerror(rc));
	return c;
}

/* What drive_connects() saw. */
struct drive_stats {
	long polls;	     /* poll() calls */
	long finishes;	     /* usmc_connect_finish() calls */
	long max_finish_us;  /* the longest of them */
	int pollin, pollout; /* connections asked to wait for POLLIN / POLLOUT at least once */
};

/*
 * Drive @n asynchronous connects from this thread until each
 * usmc_connect_finish() returned something else than -EINPROGRESS (@rc[i]
 * gets it). usmc_connect_finish() is called only as usmc_connect_events()
 * says: when poll() reports one of its events, or at its timeout; wrong
 * events or timeouts leave a connect waiting forever, so @budget_ms ends
 * the test. @at_ms[i] (may be NULL): when it ended, from the start.
 */
static inline void drive_connects(struct usmc_conn **c, int n, int *rc, long *at_ms, long budget_ms,
				  struct drive_stats *st)
{
	struct pollfd *p = calloc((size_t)n, sizeof(*p));
	long *due = calloc((size_t)n, sizeof(*due));
	bool *in = calloc((size_t)n, sizeof(bool)), *out = calloc((size_t)n, sizeof(bool));
	long t0 = mono_ms();
	int left = n;

	CHECK(p && due && in && out, "calloc");
	memset(st, 0, sizeof(*st));
	for (int i = 0; i < n; i++) {
		rc[i] = -EINPROGRESS;
		due[i] = t0; /* a first finish for each */
		p[i].fd = -1;
	}
	while (left) {
		long now = mono_ms(), next = -1;

		for (int i = 0; i < n; i++) {
			int ms, ev;

			if (rc[i] != -EINPROGRESS)
				continue;
			if (!(p[i].fd >= 0 && p[i].revents) && !(due[i] >= 0 && now >= due[i]))
				goto wait; /* nothing for it yet */
			{
				double f0 = mono_s();

				rc[i] = usmc_connect_finish(c[i]);
				f0 = (mono_s() - f0) * 1e6;
				if (f0 > st->max_finish_us)
					st->max_finish_us = (long)f0;
			}
			st->finishes++;
			if (rc[i] != -EINPROGRESS) {
				left--;
				p[i].fd = -1;
				if (at_ms)
					at_ms[i] = mono_ms() - t0;
				continue;
			}
			ev = usmc_connect_events(c[i], &ms);
			CHECK(ev >= 0, "usmc_connect_events: %s", usmc_strerror(ev));
			CHECK(ev || ms > 0, "connect %d: in progress, yet nothing to wait for", i);
			in[i] |= (ev & POLLIN) != 0;
			out[i] |= (ev & POLLOUT) != 0;
			p[i].fd = ev ? usmc_conn_fd(c[i]) : -1;
			p[i].events = (short)ev;
			due[i] = ms < 0 ? -1 : mono_ms() + ms;
wait:
			if (due[i] >= 0 && (next < 0 || due[i] < next))
				next = due[i];
		}
		if (!left)
			break;
		CHECK(mono_ms() - t0 < budget_ms,
		      "%d of %d connects still in progress after %ld ms", left, n, budget_ms);
		now = mono_ms();
		{
			int ms = next < 0 ? 1000 : next > now ? (int)(next - now) : 0;
			int r = poll(p, (nfds_t)n, ms > 1000 ? 1000 : ms);

			CHECK(r >= 0 || errno == EINTR, "poll: %s", strerror(errno));
			st->polls++;
			if (r <= 0)
				for (int i = 0; i < n; i++)
					p[i].revents = 0;
		}
	}
	for (int i = 0; i < n; i++) {
		st->pollin += in[i];
		st->pollout += out[i];
	}
	free(p);
	free(due);
	free(in);
	free(out);
}

/* Wait up to @ms for @events on @c's descriptor; dies if none. */
static inline void await_fd(struct usmc_conn *c, short events, int ms, const char *what)
{
	struct pollfd p = {.fd = usmc_conn_fd(c), .events = events};

	CHECK(poll(&p, 1, ms) == 1, "%s: no readiness in %d ms", what, ms);
}

/* Send @len bytes of stream @seed on non-blocking @c and read them back,
 * checked; dies on any difference. */
static inline void exchange_checked(struct usmc_conn *c, uint64_t seed, size_t len)
{
	uint8_t *out = malloc(len), *back = malloc(len);
	size_t sent = 0, got = 0;

	CHECK(out && back, "malloc");
	pattern_fill(seed, 0, out, len);
	while (got < len) {
		ssize_t n;

		if (sent < len) {
			n = usmc_send(c, out + sent, len - sent, 0);
			CHECK(n > 0 || n == -EAGAIN, "send: %s", usmc_strerror((int)n));
			if (n > 0)
				sent += (size_t)n;
		}
		n = usmc_recv(c, back + got, len - got, 0);
		CHECK(n > 0 || n == -EAGAIN, "recv: %s", n ? usmc_strerror((int)n) : "EOF");
		if (n > 0)
			got += (size_t)n;
		else
			await_fd(c, (short)(POLLIN | (sent < len ? POLLOUT : 0)), 10000, "echo");
	}
	CHECK(pattern_check(seed, 0, back, len) < 0, "stream %llx: byte %lld differs",
	      (unsigned long long)seed, pattern_check(seed, 0, back, len));
	free(out);
	free(back);
}

/* ---- echo server: a listener's connections, each echoed by a thread ---- */

struct echo_server {
	struct usmc_listener *l;
	int n;			  /* connections to take */
	enum usmc_mode want_mode; /* what each must run */
	pthread_t thread;
	pthread_t *echo;
};

static inline void *echo_conn_main(void *arg)
{
	struct usmc_conn *c = arg;
	uint8_t buf[16384];

	for (;;) {
		ssize_t n = usmc_recv(c, buf, sizeof(buf), 0);

		CHECK(n >= 0, "server recv: %s", usmc_strerror((int)n));
		if (!n)
			break;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = usmc_send(c, buf + off, (size_t)(n - off), 0);

			CHECK(w > 0, "server send: %s", usmc_strerror((int)w));
			off += w;
		}
	}
	usmc_close(c);
	return NULL;
}

static inline void *echo_server_main(void *arg)
{
	struct echo_server *s = arg;

	for (int i = 0; i < s->n; i++) {
		struct usmc_conn *c;
		struct usmc_conn_info info;
		int rc = usmc_accept(s->l, 0, &c);

		CHECK(!rc, "usmc_accept: %s", usmc_strerror(rc));
		usmc_conn_info(c, &info);
		CHECK(info.mode == s->want_mode, "server connection %d runs %s (%s)", i,
		      usmc_mode_name(info.mode), usmc_reason_name(info.reason));
		CHECK(!pthread_create(&s->echo[i], NULL, echo_conn_main, c), "pthread_create");
	}
	return NULL;
}

static inline void echo_server_start(struct echo_server *s, struct usmc_listener *l, int n,
				     enum usmc_mode want_mode)
{
	s->l = l;
	s->n = n;
	s->want_mode = want_mode;
	s->echo = calloc((size_t)n, sizeof(*s->echo));
	CHECK(s->echo, "calloc");
	CHECK(!pthread_create(&s->thread, NULL, echo_server_main, s), "pthread_create");
}

/* After the clients closed: every echo thread saw its EOF. */
static inline void echo_server_join(struct echo_server *s)
{
	pthread_join(s->thread, NULL);
	for (int i = 0; i < s->n; i++)
		pthread_join(s->echo[i], NULL);
	free(s->echo);
}

#endif
