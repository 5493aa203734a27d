// SPDX-License-Identifier: MIT
/*
 * Admission by cost over loopback: an attacker whose handshakes stall on a
 * worker and then fail must not make the handshake cost (hs_cost_ns) what
 * keeps an auto-fallback listener's storm going. Without a device the
 * worker's stall is made by the test (it holds the workers,
 * tests/common/hold_workers.h) on PROPOSALs that then fail to decode, as
 * an LLC answer that never comes stalls and fails a first contact. After
 * the attack, honest SMC clients at a rate two workers serve easily must
 * be admitted again (a DECLINE NOSMCRDEV from a worker, not SERVER_BUSY
 * from the accept thread) within the storm's longest hold, not after
 * minutes.
 */
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/loopback.h"
#include "linux_proposal.h"
#include "listen_core.h"
#include "mono_clock.h"

#define DIAG_OFF	 16
#define DIAG_SERVER_BUSY 0x0a000003u
#define DIAG_NOSMCRDEV	 0x03030002u
#define ROUNDS		 6
#define STALL_MS	 1000 /* each stalled handshake holds its worker this long */
#define HONEST_GAP_MS	 25   /* 40 honest SMC clients a second */
#define BACK_WITHIN_MS	 (LISTEN_STORM_HOLD_MAX_MS + 7000) /* generous: loaded CI */
#define ADMITTED_RUN	 20 /* this many admitted in a row: SMC-R is back */
#define WAIT_MS		 10000

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* The workers' hook (weak in libusmc, listen_core.c): each waits here
 * while the test holds them, counted. */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static bool hold_on; /* guarded by hold_lock */
static int held;     /* guarded by hold_lock */

void listen_test_hook_worker(void);
void listen_test_hook_worker(void)
{
	pthread_mutex_lock(&hold_lock);
	held++;
	pthread_cond_broadcast(&hold_cond);
	while (hold_on)
		pthread_cond_wait(&hold_cond, &hold_lock);
	held--;
	pthread_mutex_unlock(&hold_lock);
}

static void hold_workers(bool on)
{
	pthread_mutex_lock(&hold_lock);
	hold_on = on;
	pthread_cond_broadcast(&hold_cond);
	pthread_mutex_unlock(&hold_lock);
}

/* Wait until @n workers are held; fails after WAIT_MS. */
static void wait_held(int n)
{
	long t0 = mono_ms();
	int now;

	do {
		sleep_ms(1);
		pthread_mutex_lock(&hold_lock);
		now = held;
		pthread_mutex_unlock(&hold_lock);
		assert_true(mono_ms() - t0 < WAIT_MS);
	} while (now < n);
}

struct env {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	struct sockaddr_storage addr;
	socklen_t alen;
};

static int smc_client(const struct env *e, bool malformed)
{
	uint8_t m[sizeof(linux_v2_proposal)];
	int fd = plain_connect_to(&e->addr, e->alen);

	memcpy(m, linux_v2_proposal, sizeof(m));
	if (malformed)
		m[sizeof(m) - 1] ^= 0xff; /* the trailer's eyecatcher: decoding fails */
	assert_int_equal(send(fd, m, sizeof(m), MSG_NOSIGNAL), (ssize_t)sizeof(m));
	return fd;
}

/* The diagnosis of the DECLINE that answers @fd's PROPOSAL; 0 if none. */
static uint32_t decline_diag(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	uint8_t m[64];
	uint32_t diag;
	size_t got = 0;

	while (got < DIAG_OFF + 4) {
		ssize_t n;

		if (poll(&p, 1, WAIT_MS) != 1)
			return 0;
		n = recv(fd, m + got, sizeof(m) - got, 0);
		if (n <= 0)
			return 0;
		got += (size_t)n;
	}
	memcpy(&diag, m + DIAG_OFF, sizeof(diag));
	return ntohl(diag);
}

/* Take every connection the listener handed out, and close it. */
static void drain_accepted(struct env *e)
{
	struct usmc_conn *c;

	while (usmc_accept(e->l, 0, &c) == 0)
		usmc_close(c);
}

static void wait_idle(struct env *e)
{
	struct usmc_listener_stats st;
	long t0 = mono_ms();

	do {
		drain_accepted(e);
		usmc_listener_stats(e->l, &st);
		assert_true(mono_ms() - t0 < WAIT_MS);
		sleep_ms(2);
	} while (st.in_handshake);
}

/*
 * Handshakes that stall on both workers for @stall_ms, then fail: two
 * malformed PROPOSALs held, and with @queued a third waiting (threshold 1:
 * congested) while an SMC client arrives, which is declined at once and
 * starts a storm (auto-fallback on).
 */
static void stall_workers(struct env *e, long stall_ms, bool queued)
{
	struct usmc_listener_stats st;
	int fd[4], n = 2;

	hold_workers(true);
	fd[0] = smc_client(e, true);
	wait_held(1); /* not queued when the next one comes: that is congestion */
	fd[1] = smc_client(e, true);
	wait_held(2);
	if (queued) {
		fd[n++] = smc_client(e, true);
		for (long t0 = mono_ms(); usmc_listener_stats(e->l, &st), !st.hs_queue_depth;)
			assert_true(mono_ms() - t0 < WAIT_MS);
		fd[n++] = smc_client(e, false);
		assert_int_equal(decline_diag(fd[3]), DIAG_SERVER_BUSY);
	}
	sleep_ms(stall_ms);
	hold_workers(false);
	wait_idle(e);
	for (int i = 0; i < n; i++)
		close(fd[i]);
}

/* Honest SMC clients, one each HONEST_GAP_MS, until ADMITTED_RUN in a row
 * are admitted: how long that took (ms), or -1 past @limit_ms. */
static long smcr_back_after(struct env *e, long limit_ms)
{
	long t0 = mono_ms();
	int run = 0, busy = 0;

	while (run < ADMITTED_RUN) {
		int fd = smc_client(e, false);
		uint32_t diag = decline_diag(fd);

		close(fd);
		drain_accepted(e);
		assert_true(diag == DIAG_SERVER_BUSY || diag == DIAG_NOSMCRDEV);
		run = diag == DIAG_NOSMCRDEV ? run + 1 : 0;
		busy += diag == DIAG_SERVER_BUSY;
		if (mono_ms() - t0 > limit_ms) {
			print_message("%d honest SMC clients refused, still refused after %ld ms\n",
				      busy, limit_ms);
			return -1;
		}
		sleep_ms(HONEST_GAP_MS);
	}
	print_message("%d honest SMC clients refused after the attack\n", busy);
	return mono_ms() - t0 - (long)ADMITTED_RUN * HONEST_GAP_MS;
}

static void test_stalled_handshakes_poison_nothing(void **state)
{
	struct env e;
	long back;
	int64_t cost;

	assert_int_equal(usmc_ctx_create(&e.ctx), 0);
	assert_int_equal(usmc_ctx_setopt(e.ctx, USMC_OPT_HS_THREADS, 2), 0);
	assert_int_equal(usmc_ctx_setopt(e.ctx, USMC_OPT_HS_CONGESTION, 1), 0);
	e.l = lo_listen(e.ctx, 64, USMC_LISTEN_NONBLOCK, &e.addr, &e.alen);
	/* the attack, every stalled handshake on a worker (no storm yet) */
	for (int i = 0; i < ROUNDS; i++)
		stall_workers(&e, STALL_MS, false);
	/* then a storm, and the attacker stops */
	assert_int_equal(usmc_listener_setopt(e.l, USMC_OPT_AUTO_FALLBACK, 1), 0);
	stall_workers(&e, 10, true);
	cost = atomic_load(&e.l->hs_cost_ns);
	print_message("handshake cost after %d rounds of stalled handshakes: %.1f ms\n", ROUNDS,
		      (double)cost / 1e6);
	back = smcr_back_after(&e, BACK_WITHIN_MS);
	print_message("SMC-R back %ld ms after the attack\n", back);
	assert_true(back >= 0);
	assert_true(cost < LISTEN_HS_COST_MAX_MS * 1000000LL);
	assert_int_equal(usmc_listener_close(e.l), 0);
	assert_int_equal(usmc_ctx_destroy(e.ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stalled_handshakes_poison_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
