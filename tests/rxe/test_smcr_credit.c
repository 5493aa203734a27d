// SPDX-License-Identifier: MIT
/*
 * A writer short of room waits for the peer's credit first, and for its
 * own send completions only when no credit comes (smcr_ready.c
 * sc_wait_credit_locked()). Two parts, one connection, every byte checked:
 *
 * 1. A reader that reads nothing: the server sleeps PAUSE_MS before its
 *    first read while the client sends an RMB and a send buffer's worth
 *    (128 KiB). The RMB takes the first half; the second fits only once
 *    the first half's WRITEs complete, which the client must notice within
 *    FILL_MAX_MS: not at the reader's credit PAUSE_MS later, nor at the
 *    progress thread's next 250 ms tick (in the guest: 14-17 ms; 250 ms
 *    when a writer never asked for its completions).
 * 2. A stream: STREAM_MIB MiB in 64 KiB sends. The credits free the room,
 *    so the client's thread wakes about once per credit, not twice per
 *    CDC as when it also waited for its send completions: at most
 *    WAKE_MAX wake-ups per MiB (in the guest: 31-35 now, 60-63 before).
 */
#include <pthread.h>
#include <unistd.h>

#include "../common/pattern.h"
#include "mono_clock.h"
#include "smcr_common.h"

#define SEED	    0xc4ed17
#define FILL	    (128 * 1024) /* part 1: RMB + send buffer, both 64 KiB by default */
#define PAUSE_MS    1500	 /* part 1: the reader's silence */
#define FILL_MAX_MS 150		 /* part 1: well before the reader, or a tick */
#define CHUNK	    (64 * 1024)
#define STREAM_MIB  8
#define WAKE_MAX    45.0 /* part 2: client wake-ups per MiB */

static void recv_checked(struct usmc_conn *c, uint64_t off, size_t len)
{
	static uint8_t buf[CHUNK];

	while (len) {
		ssize_t r = usmc_recv(c, buf, len < sizeof(buf) ? len : sizeof(buf), 0);
		long long bad;

		CHECK(r > 0, "server recv at %llu: %s", (unsigned long long)off,
		      r ? usmc_strerror((int)r) : "EOF");
		bad = pattern_check(SEED, off, buf, (size_t)r);
		CHECK(bad < 0, "byte %llu differs", (unsigned long long)(off + (uint64_t)bad));
		off += (uint64_t)r;
		len -= (size_t)r;
	}
}

static void *server_main(void *arg)
{
	struct usmc_listener *l = arg;
	struct usmc_conn *c;
	uint8_t b;
	int rc = usmc_accept(l, 0, &c);

	CHECK(!rc, "usmc_accept: %s", usmc_strerror(rc));
	expect_smcr(c, "server");
	usleep(PAUSE_MS * 1000);
	recv_checked(c, 0, FILL + (size_t)STREAM_MIB * 1024 * 1024);
	CHECK(usmc_recv(c, &b, 1, 0) == 0, "no EOF after the stream");
	CHECK(!usmc_close(c), "server close");
	return NULL;
}

static uint64_t client_wakeups(struct usmc_ctx *ctx)
{
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	return st.engine.wakeups;
}

static void send_pattern(struct usmc_conn *c, uint64_t off, size_t len)
{
	static uint8_t buf[CHUNK];

	while (len) {
		size_t n = len < sizeof(buf) ? len : sizeof(buf);

		pattern_fill(SEED, off, buf, n);
		send_all(c, buf, n);
		off += n;
		len -= n;
	}
}

int main(void)
{
	struct usmc_listener *l;
	struct sockaddr_in sa;
	struct usmc_ctx *cs, *cc;
	struct usmc_conn *c;
	uint64_t w0, w1;
	long t0, fill_ms;
	double per_mib;
	pthread_t th;
	int rc;

	CHECK(!usmc_ctx_create(&cs), "server ctx");
	CHECK(!usmc_ctx_create(&cc), "client ctx");
	l = listen_b(cs, 4, &sa);
	pthread_create(&th, NULL, server_main, l);
	rc = usmc_connect(cc, (const struct sockaddr *)&sa, sizeof(sa), 0, &c);
	CHECK(!rc, "connect: %s", usmc_strerror(rc));
	expect_smcr(c, "client");

	t0 = mono_ms();
	send_pattern(c, 0, FILL);
	fill_ms = mono_ms() - t0;
	printf("part 1: %d KiB sent in %ld ms while the reader slept %d ms\n", FILL / 1024, fill_ms,
	       PAUSE_MS);
	CHECK(fill_ms < FILL_MAX_MS, "the send buffer's room came back after %ld ms", fill_ms);

	w0 = client_wakeups(cc);
	send_pattern(c, FILL, (size_t)STREAM_MIB * 1024 * 1024);
	w1 = client_wakeups(cc);
	per_mib = (double)(w1 - w0) / STREAM_MIB;
	printf("part 2: %d MiB streamed, %.1f client wake-ups per MiB\n", STREAM_MIB, per_mib);
	CHECK(per_mib <= WAKE_MAX, "%.1f wake-ups per MiB (at most %.0f)", per_mib, WAKE_MAX);

	CHECK(!usmc_shutdown(c, SHUT_WR), "shutdown");
	pthread_join(th, NULL);
	CHECK(!usmc_close(c), "client close");
	CHECK(!usmc_listener_close(l), "listener close");
	CHECK(!usmc_ctx_destroy(cc), "client ctx destroy");
	CHECK(!usmc_ctx_destroy(cs), "server ctx destroy");
	printf("PASS\n");
	return 0;
}
