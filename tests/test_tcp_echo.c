// SPDX-License-Identifier: MIT
/*
 * Echo over the TCP path: N concurrent connections each send M MiB and get
 * them back, every byte checked at its offset. Both ends are event loops on
 * the pollable descriptors (usmc_listener_fd, usmc_conn_fd), so lost
 * wake-ups hang the test (and ctest's timeout fails it).
 *
 * usage: test_tcp_echo [connections=100] [MiB=64]
 */
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <time.h>

#include <usmc/usmc.h>

#include "common/check.h"
#include "common/pattern.h"

#define CHUNK	 (64 * 1024)
#define MAX_EVTS 256

static int nconns = 100;
static uint64_t total;

/* ---- server: echo everything back, then half-close --------------------- */

struct echo {
	struct usmc_conn *c;
	uint8_t buf[CHUNK];
	size_t len, off; /* pending bytes buf[off..len) */
	int eof;
};

static void set_events(int ep, struct echo *e, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = e};

	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, usmc_conn_fd(e->c), &ev) == 0, "epoll mod");
}

/* Returns 1 when the connection is finished and freed. */
static int echo_step(int ep, struct echo *e)
{
	for (;;) {
		if (e->off < e->len) {
			ssize_t n = usmc_send(e->c, e->buf + e->off, e->len - e->off, 0);

			if (n == -EAGAIN) {
				set_events(ep, e, EPOLLOUT);
				return 0;
			}
			CHECK(n > 0, "server send: %s", usmc_strerror((int)n));
			e->off += (size_t)n;
			continue;
		}
		if (e->eof) {
			CHECK(usmc_shutdown(e->c, SHUT_WR) == 0, "server shutdown");
			epoll_ctl(ep, EPOLL_CTL_DEL, usmc_conn_fd(e->c), NULL);
			usmc_close(e->c);
			free(e);
			return 1;
		}
		ssize_t n = usmc_recv(e->c, e->buf, sizeof(e->buf), 0);

		if (n == -EAGAIN) {
			set_events(ep, e, EPOLLIN);
			return 0;
		}
		CHECK(n >= 0, "server recv: %s", usmc_strerror((int)n));
		if (n == 0)
			e->eof = 1;
		e->len = (size_t)n;
		e->off = 0;
	}
}

static void check_tcp_fallback(struct usmc_ctx *ctx, struct usmc_conn *c)
{
	struct usmc_device_info d[8];
	struct usmc_conn_info info;
	int n = usmc_ctx_devices(ctx, d, 8);
	int smcr_dev = 0;

	for (int i = 0; i < n && i < 8; i++)
		smcr_dev |= d[i].gid_index >= 0;
	CHECK(usmc_conn_info(c, &info) == 0, "conn_info");
	CHECK(info.mode == USMC_MODE_TCP, "mode %s", usmc_mode_name(info.mode));
	if (!smcr_dev)
		CHECK(info.reason == USMC_REASON_NOSMCRDEV, "reason %s",
		      usmc_reason_name(info.reason));
}

struct server_arg {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
};

static void *server_main(void *arg)
{
	struct server_arg *sa = arg;
	struct epoll_event evs[MAX_EVTS];
	int ep = epoll_create1(0), accepted = 0, done = 0;
	struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};

	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, usmc_listener_fd(sa->l), &lev) == 0, "epoll add");
	while (done < nconns) {
		int n = epoll_wait(ep, evs, MAX_EVTS, 30000);

		CHECK(n > 0, "server: no event in 30 s (lost wake-up?) done=%d", done);
		for (int i = 0; i < n; i++) {
			struct echo *e = evs[i].data.ptr;

			if (!e) {
				struct usmc_conn *c;

				while (usmc_accept(sa->l, USMC_NONBLOCK, &c) == 0) {
					struct epoll_event ev = {.events = EPOLLIN};

					check_tcp_fallback(sa->ctx, c);
					e = calloc(1, sizeof(*e));
					e->c = c;
					ev.data.ptr = e;
					CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, usmc_conn_fd(c), &ev) ==
						      0,
					      "add conn");
					accepted++;
				}
				continue;
			}
			done += echo_step(ep, e);
		}
	}
	CHECK(accepted == nconns, "accepted %d", accepted);
	close(ep);
	return NULL;
}

/* ---- client: stream the pattern, check the echo ------------------------- */

struct client {
	struct usmc_conn *c;
	uint64_t seed, sent, rcvd;
	int shut;
	uint8_t buf[CHUNK];
};

static uint32_t client_events(const struct client *k)
{
	return EPOLLIN | (k->shut ? 0 : EPOLLOUT);
}

static void client_send(struct client *k)
{
	while (k->sent < total) {
		size_t n = total - k->sent < CHUNK ? (size_t)(total - k->sent) : CHUNK;
		ssize_t w;

		pattern_fill(k->seed, k->sent, k->buf, n);
		w = usmc_send(k->c, k->buf, n, 0);
		if (w == -EAGAIN)
			return;
		CHECK(w > 0, "client send: %s", usmc_strerror((int)w));
		k->sent += (uint64_t)w;
	}
	CHECK(usmc_shutdown(k->c, SHUT_WR) == 0, "client shutdown");
	k->shut = 1;
}

/* Returns 1 at the end of the echo stream. */
static int client_recv(struct client *k)
{
	for (;;) {
		ssize_t n = usmc_recv(k->c, k->buf, sizeof(k->buf), 0);
		long long bad;

		if (n == -EAGAIN)
			return 0;
		CHECK(n >= 0, "client recv: %s", usmc_strerror((int)n));
		if (n == 0) {
			CHECK(k->rcvd == total, "conn %llu: EOF after %llu of %llu bytes",
			      (unsigned long long)k->seed, (unsigned long long)k->rcvd,
			      (unsigned long long)total);
			return 1;
		}
		bad = pattern_check(k->seed, k->rcvd, k->buf, (size_t)n);
		CHECK(bad < 0, "conn %llu: wrong byte at offset %lld", (unsigned long long)k->seed,
		      bad);
		k->rcvd += (uint64_t)n;
	}
}

static void run_clients(struct usmc_ctx *ctx, const struct sockaddr_storage *addr, socklen_t alen)
{
	struct client *ks = calloc((size_t)nconns, sizeof(*ks));
	struct epoll_event evs[MAX_EVTS];
	int ep = epoll_create1(0), done = 0;

	for (int i = 0; i < nconns; i++) {
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = &ks[i]};
		int rc = usmc_connect(ctx, (const struct sockaddr *)addr, alen, USMC_NONBLOCK,
				      &ks[i].c);

		CHECK(rc == 0, "connect %d: %s", i, usmc_strerror(rc));
		ks[i].seed = (uint64_t)i + 1;
		CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, usmc_conn_fd(ks[i].c), &ev) == 0, "add");
	}
	while (done < nconns) {
		int n = epoll_wait(ep, evs, MAX_EVTS, 30000);

		CHECK(n > 0, "client: no event in 30 s (lost wake-up?) done=%d", done);
		for (int i = 0; i < n; i++) {
			struct client *k = evs[i].data.ptr;
			struct epoll_event ev = {.data.ptr = k};
			int rc;

			if (!k->c)
				continue;
			rc = usmc_connect_finish(k->c);
			if (rc == -EINPROGRESS)
				continue;
			CHECK(rc == 0, "connect finish: %s", usmc_strerror(rc));
			if (evs[i].events & EPOLLOUT && !k->shut)
				client_send(k);
			if (client_recv(k)) {
				check_tcp_fallback(ctx, k->c);
				epoll_ctl(ep, EPOLL_CTL_DEL, usmc_conn_fd(k->c), NULL);
				usmc_close(k->c);
				k->c = NULL;
				done++;
				continue;
			}
			ev.events = client_events(k);
			epoll_ctl(ep, EPOLL_CTL_MOD, usmc_conn_fd(k->c), &ev);
		}
	}
	close(ep);
	free(ks);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	struct sockaddr_storage bound;
	socklen_t blen;
	struct server_arg sa;
	struct usmc_ctx_stats st;
	pthread_t srv;
	struct timespec t0, t1;

	if (argc > 1)
		nconns = atoi(argv[1]);
	total = (uint64_t)(argc > 2 ? atoi(argv[2]) : 64) << 20;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(usmc_ctx_create(&sa.ctx) == 0, "ctx");
	CHECK(usmc_listen(sa.ctx, (struct sockaddr *)&a, sizeof(a), 1024, USMC_LISTEN_NONBLOCK,
			  &sa.l) == 0,
	      "listen");
	CHECK(usmc_listener_addr(sa.l, &bound, &blen) == 0, "addr");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_create(&srv, NULL, server_main, &sa);
	run_clients(sa.ctx, &bound, blen);
	pthread_join(srv, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	usmc_ctx_stats(sa.ctx, &st);
	CHECK(st.connects == (uint64_t)nconns && st.accepts == (uint64_t)nconns, "stats");
	CHECK(st.open_conns == 0, "open conns %llu", (unsigned long long)st.open_conns);
	CHECK(usmc_listener_close(sa.l) == 0, "close");
	CHECK(usmc_ctx_destroy(sa.ctx) == 0, "ctx destroy");
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("%d connections x %llu MiB each way, verified, in %.2f s (%.0f MiB/s total)\n",
	       nconns, (unsigned long long)(total >> 20), s,
	       2.0 * nconns * (double)(total >> 20) / s);
	return 0;
}
