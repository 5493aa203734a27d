// SPDX-License-Identifier: MIT
/*
 * An event loop's round trips cost one wake-up per message, not two:
 * send completions wake nobody unless a writer waits for room or linger
 * runs. The client drives a 64-byte ping-pong from epoll on
 * its readiness descriptor, so its link group's progress thread runs the
 * completions; the server is blocking. Every byte is checked. The client's
 * engine counters must show at most WAKE_MAX wake-ups per round trip: the
 * peer's answer wakes the progress thread once, and the completion of our
 * own request must not wake it again (it did before: 2 per round trip).
 * Rounds: USMC_TEST_ROUNDS (default 300).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>
#include <sys/epoll.h>

#include "../common/pattern.h"
#include "smcr_common.h"

#define SEED	 0xe7100b
#define MSG	 64
#define EPOLL_MS 10000
#define WAKE_MAX 1.5 /* per round trip: 1 plus the tick, churn and slack */

static void *server_main(void *arg)
{
	struct usmc_listener *l = arg;
	static uint8_t buf[4096];
	struct usmc_conn *c;
	int rc = usmc_accept(l, 0, &c);

	CHECK(!rc, "usmc_accept: %s", usmc_strerror(rc));
	expect_smcr(c, "server");
	echo_until_eof(c, buf, sizeof(buf));
	CHECK(!usmc_close(c), "server close");
	return NULL;
}

/* Wait (edge-triggered) until @c reads @len bytes into @buf. */
static void read_all(struct usmc_conn *c, int ep, uint8_t *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		struct epoll_event e;
		ssize_t r = usmc_recv(c, buf + got, len - got, 0);

		if (r == -EAGAIN) {
			CHECK(epoll_wait(ep, &e, 1, EPOLL_MS) == 1,
			      "no readiness for %d ms after %zu of %zu bytes: lost wake-up?",
			      EPOLL_MS, got, len);
			continue;
		}
		CHECK(r > 0, "client recv: %s", r ? usmc_strerror((int)r) : "EOF");
		got += (size_t)r;
	}
}

static struct usmc_engine_stats engine_of(struct usmc_ctx *ctx)
{
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	return st.engine;
}

int main(void)
{
	long rounds = env_long("USMC_TEST_ROUNDS", 300);
	struct usmc_engine_stats e0 = {0}, e1;
	struct usmc_ctx *cs, *cc;
	struct usmc_listener *l;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET};
	uint8_t out[MSG], in[MSG];
	struct sockaddr_in sa;
	struct usmc_conn *c;
	double t0 = 0, dt, wakes, calls;
	pthread_t th;
	int rc, ep;

	CHECK(!usmc_ctx_create(&cs) && !usmc_ctx_create(&cc), "ctx");
	l = listen_b(cs, 16, &sa);
	pthread_create(&th, NULL, server_main, l);
	c = connect_nonblock_smcr(cc, &sa);
	ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0 && !epoll_ctl(ep, EPOLL_CTL_ADD, usmc_conn_fd(c), &ev), "epoll setup");

	/* a few rounds first: the link group's own start is not the steady state */
	for (long i = -10; i < rounds; i++) {
		long long bad;

		if (i == 0) {
			e0 = engine_of(cc);
			t0 = mono_s();
		}
		pattern_fill(SEED, (uint64_t)(i + 10) * MSG, out, MSG);
		CHECK(usmc_send(c, out, MSG, 0) == MSG, "client send");
		read_all(c, ep, in, MSG);
		bad = pattern_check(SEED, (uint64_t)(i + 10) * MSG, in, MSG);
		CHECK(bad < 0, "round %ld: echo differs at byte %lld", i, bad);
	}
	dt = mono_s() - t0;
	e1 = engine_of(cc);
	wakes = (double)(e1.wakeups - e0.wakeups) / (double)rounds;
	calls = (double)(e1.syscalls - e0.syscalls) / (double)rounds;
	printf("%ld round trips of %d B from epoll: %.0f us each; client per round trip: "
	       "%.2f wake-ups, %.2f system calls, %.2f CQEs\n",
	       rounds, MSG, dt / (double)rounds * 1e6, wakes, calls,
	       (double)(e1.cqes - e0.cqes) / (double)rounds);
	CHECK(wakes <= WAKE_MAX,
	      "%.2f wake-ups per round trip (at most %.1f): a send "
	      "completion woke the progress thread?",
	      wakes, WAKE_MAX);

	CHECK(!usmc_shutdown(c, SHUT_WR), "shutdown");
	await_eof_epoll(c, ep, EPOLL_MS); /* the server closes after our EOF */
	close(ep);
	pthread_join(th, NULL);
	CHECK(!usmc_close(c), "client close");
	CHECK(!usmc_listener_close(l), "listener close");
	rc = usmc_ctx_destroy(cc);
	CHECK(!rc, "client ctx destroy: %s", usmc_strerror(rc));
	rc = usmc_ctx_destroy(cs);
	CHECK(!rc, "server ctx destroy: %s", usmc_strerror(rc));
	printf("PASS\n");
	return 0;
}
