// SPDX-License-Identifier: MIT
/*
 * SMC-Rv2 echo between two libusmc contexts (two independent stacks) over
 * two rxe devices: client on host A, server on host B. Both ends must run
 * SMC-R (a silent TCP fallback fails the test). The client is non-blocking
 * and driven by edge-triggered epoll on usmc_conn_fd(), so a lost wake-up
 * hangs the test (and its timeout fails it); the server is blocking. Every
 * echoed byte is checked against the pattern stream.
 * Size: USMC_TEST_BYTES (default 8 MiB).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>
#include <sys/epoll.h>

#include "../common/pattern.h"
#include "smcr_common.h"

#define SEED	 0x5eed
#define CHUNK	 (256 * 1024)
#define EPOLL_MS 10000

struct server {
	struct usmc_listener *l;
	uint64_t echoed;
};

static void *server_main(void *arg)
{
	struct server *s = arg;
	static uint8_t buf[CHUNK];
	struct usmc_conn *c;
	int rc = usmc_accept(s->l, 0, &c);

	CHECK(!rc, "usmc_accept: %s", usmc_strerror(rc));
	expect_smcr(c, "server");
	s->echoed = echo_until_eof(c, buf, sizeof(buf));
	CHECK(!usmc_close(c), "server close");
	return NULL;
}

/* Client: push the pattern, read the echo, all through epoll readiness. */
static void client_run(struct usmc_conn *c, uint64_t total)
{
	static uint8_t out[CHUNK], in[CHUNK];
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET};
	uint64_t sent = 0, got = 0;
	bool shut = false;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	CHECK(ep >= 0 && !epoll_ctl(ep, EPOLL_CTL_ADD, usmc_conn_fd(c), &ev), "epoll setup");
	while (got < total) {
		struct epoll_event e;
		int n = epoll_wait(ep, &e, 1, EPOLL_MS);

		CHECK(n == 1, "no readiness for %d ms (sent %llu, got %llu): lost wake-up?",
		      EPOLL_MS, (unsigned long long)sent, (unsigned long long)got);
		while (sent < total) { /* edge-triggered: until EAGAIN */
			size_t len = total - sent < CHUNK ? (size_t)(total - sent) : CHUNK;
			ssize_t w;

			pattern_fill(SEED, sent, out, len);
			w = usmc_send(c, out, len, 0);
			if (w == -EAGAIN)
				break;
			CHECK(w > 0, "client send: %s", usmc_strerror((int)w));
			sent += (uint64_t)w;
		}
		if (sent == total && !shut) {
			CHECK(!usmc_shutdown(c, SHUT_WR), "shutdown");
			shut = true;
		}
		while (got < total) {
			ssize_t r = usmc_recv(c, in, sizeof(in), 0);
			long long bad;

			if (r == -EAGAIN)
				break;
			CHECK(r > 0, "client recv: %s after %llu bytes",
			      r ? usmc_strerror((int)r) : "EOF", (unsigned long long)got);
			bad = pattern_check(SEED, got, in, (size_t)r);
			CHECK(bad < 0, "echo differs at byte %lld", bad);
			got += (uint64_t)r;
		}
	}
	/* the server closes after the echo: EOF, announced by readiness */
	await_eof_epoll(c, ep, EPOLL_MS);
	close(ep);
}

int main(void)
{
	uint64_t total = (uint64_t)env_long("USMC_TEST_BYTES", 8 << 20);
	struct usmc_ctx *cs, *cc;
	struct server srv = {0};
	struct usmc_ctx_stats st;
	struct sockaddr_in sa;
	struct usmc_conn *c;
	pthread_t th;
	double t0, dt;
	int rc;

	CHECK(!usmc_ctx_create(&cs) && !usmc_ctx_create(&cc), "ctx");
	srv.l = listen_b(cs, 16, &sa);
	pthread_create(&th, NULL, server_main, &srv);
	c = connect_nonblock_smcr(cc, &sa);
	t0 = mono_s();
	client_run(c, total);
	dt = mono_s() - t0;
	pthread_join(th, NULL);
	CHECK(srv.echoed == total, "server echoed %llu of %llu", (unsigned long long)srv.echoed,
	      (unsigned long long)total);
	CHECK(!usmc_close(c), "client close");
	usmc_ctx_stats(cc, &st);
	CHECK(st.smcr == 1 && st.lgrs_created == 1, "client: %llu SMC-R conns, %llu LGRs",
	      (unsigned long long)st.smcr, (unsigned long long)st.lgrs_created);
	printf("echo %llu bytes over SMC-R in %.2f s: %.1f MB/s each way\n",
	       (unsigned long long)total, dt, (double)total / dt / 1e6);
	CHECK(!usmc_listener_close(srv.l), "listener close");
	rc = usmc_ctx_destroy(cc);
	CHECK(!rc, "client ctx destroy: %s", usmc_strerror(rc));
	rc = usmc_ctx_destroy(cs);
	CHECK(!rc, "server ctx destroy: %s", usmc_strerror(rc));
	printf("PASS\n");
	return 0;
}
