// SPDX-License-Identifier: MIT
/*
 * USMC_OPT_SPIN: a blocking round trip with the spin off sleeps in every
 * wait for the reply; with the spin on (the default) most waits end in the
 * spin. Two client contexts, one each way, against one server; 64-byte
 * round trips, every byte checked. The spin-off client must show at most
 * SPUN_MAX of its waits ended without a sleep (a reply that lands between
 * the last poll and the arm ends a wait without one) and at least
 * SLEPT_MIN channel sleeps per round trip. In the guest, with the spin on,
 * about 0.8 of the waits end in the spin and 0.03 sleep. Rounds:
 * USMC_TEST_ROUNDS (default 300).
 */
#include <pthread.h>
#include <unistd.h>

#include "../common/pattern.h"
#include "smcr_common.h"

#define SEED	  0x5b1c0
#define MSG	  64
#define SPUN_MAX  0.05 /* per round trip, spin off */
#define SLEPT_MIN 0.5  /* channel sleeps per round trip, spin off */

static void *server_main(void *arg)
{
	struct usmc_listener *l = arg;
	static uint8_t buf[2][4096];

	for (int i = 0; i < 2; i++) {
		struct usmc_conn *c;
		int rc = usmc_accept(l, 0, &c);

		CHECK(!rc, "usmc_accept: %s", usmc_strerror(rc));
		expect_smcr(c, "server");
		echo_until_eof(c, buf[i], sizeof(buf[i]));
		CHECK(!usmc_close(c), "server close");
	}
	return NULL;
}

static struct usmc_engine_stats engine_of(struct usmc_ctx *ctx)
{
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	return st.engine;
}

static void recv_all(struct usmc_conn *c, uint8_t *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t r = usmc_recv(c, buf + got, len - got, 0);

		CHECK(r > 0, "client recv: %s", r ? usmc_strerror((int)r) : "EOF");
		got += (size_t)r;
	}
}

/* @rounds blocking round trips from a new context with USMC_OPT_SPIN = @spin;
 * returns its engine counters over them (after 10 to start the link group). */
static struct usmc_engine_stats round_trips(const struct sockaddr_in *sa, int spin, long rounds)
{
	struct usmc_engine_stats e0 = {0}, e1;
	uint8_t out[MSG], in[MSG];
	struct usmc_ctx *cc;
	struct usmc_conn *c;
	int rc;

	CHECK(!usmc_ctx_create(&cc), "ctx");
	CHECK(!usmc_ctx_setopt(cc, USMC_OPT_SPIN, spin), "USMC_OPT_SPIN");
	/* one link: the server's try at a second (refused here, one port
	 * each) would put its LLC completions into the counts */
	CHECK(!usmc_ctx_setopt(cc, USMC_OPT_MAX_LINKS, 1), "USMC_OPT_MAX_LINKS");
	rc = usmc_connect(cc, (const struct sockaddr *)sa, sizeof(*sa), 0, &c);
	CHECK(!rc, "connect: %s", usmc_strerror(rc));
	expect_smcr(c, "client");
	for (long i = -10; i < rounds; i++) {
		uint64_t off = (uint64_t)(i + 10) * MSG;
		long long bad;

		if (i == 0)
			e0 = engine_of(cc);
		pattern_fill(SEED, off, out, MSG);
		send_all(c, out, MSG);
		recv_all(c, in, MSG);
		bad = pattern_check(SEED, off, in, MSG);
		CHECK(bad < 0, "round %ld: echo differs at byte %lld", i, bad);
	}
	e1 = engine_of(cc);
	CHECK(!usmc_shutdown(c, SHUT_WR), "shutdown");
	CHECK(usmc_recv(c, in, 1, 0) == 0, "no EOF after the server's close");
	CHECK(!usmc_close(c), "client close");
	rc = usmc_ctx_destroy(cc);
	CHECK(!rc, "client ctx destroy: %s", usmc_strerror(rc));
	e1.spins_ok -= e0.spins_ok;
	e1.channel_sleeps -= e0.channel_sleeps;
	e1.wakeups -= e0.wakeups;
	return e1;
}

int main(void)
{
	long rounds = env_long("USMC_TEST_ROUNDS", 300);
	struct usmc_engine_stats on, off;
	struct usmc_listener *l;
	struct sockaddr_in sa;
	struct usmc_ctx *cs;
	double spun, slept;
	pthread_t th;

	CHECK(!usmc_ctx_create(&cs), "ctx");
	l = listen_b(cs, 16, &sa);
	pthread_create(&th, NULL, server_main, l);
	on = round_trips(&sa, 1, rounds);
	off = round_trips(&sa, 0, rounds);
	pthread_join(th, NULL);
	CHECK(!usmc_listener_close(l), "listener close");
	CHECK(!usmc_ctx_destroy(cs), "server ctx destroy");

	printf("%ld round trips of %d B; per round trip, spin on: %.2f spins ended the wait, "
	       "%.2f channel sleeps; spin off: %.2f and %.2f\n",
	       rounds, MSG, (double)on.spins_ok / (double)rounds,
	       (double)on.channel_sleeps / (double)rounds, (double)off.spins_ok / (double)rounds,
	       (double)off.channel_sleeps / (double)rounds);
	spun = (double)off.spins_ok / (double)rounds;
	slept = (double)off.channel_sleeps / (double)rounds;
	CHECK(spun <= SPUN_MAX, "spin off: %.2f waits per round trip ended without a sleep", spun);
	CHECK(slept >= SLEPT_MIN, "spin off: %.2f channel sleeps per round trip", slept);
	printf("PASS\n");
	return 0;
}
