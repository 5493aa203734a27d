// SPDX-License-Identifier: MIT
/*
 * The listener's decisions as pure functions: backlog room, the congestion
 * test behind auto-fallback, the handshake-time histogram buckets, and the
 * handshake pool's depth and high-water accounting, one address's share
 * of the backlog and the count of handshakes per address behind it.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "conn.h"
#include "handshake_pool.h"
#include "listen_policy.h"
#include "listen_sources.h"
#include "opts.h"
#include "reason.h"

static void test_backlog_room(void **state)
{
	assert_int_equal(listen_backlog_room(0, 0, 4), 4);
	/* both stages count: probing/handshaking and queued */
	assert_int_equal(listen_backlog_room(1, 2, 4), 1);
	assert_int_equal(listen_backlog_room(3, 0, 4), 1);
	assert_int_equal(listen_backlog_room(4, 0, 4), 0);
	assert_int_equal(listen_backlog_room(0, 4, 4), 0);
	assert_int_equal(listen_backlog_room(2, 2, 4), 0);
	/* over the cap is no room, never a wrap-around */
	assert_int_equal(listen_backlog_room(4, 1, 4), 0);
	assert_int_equal(listen_backlog_room(0xffffffffu, 1, 65535), 0);
	assert_int_equal(listen_backlog_room(0, 0, 65535), 65535);
}

static void test_src_share(void **state)
{
	/* half the backlog, at least one place */
	assert_int_equal(listen_src_share(1), 1);
	assert_int_equal(listen_src_share(3), 1);
	assert_int_equal(listen_src_share(8), 4);
	assert_int_equal(listen_src_share(128), 64);
	assert_int_equal(listen_src_share(65535), 32767);
	/* an address at its share is refused, one below it not, however
	 * full the listener is */
	assert_true(listen_src_refuse(4, 8));
	assert_false(listen_src_refuse(3, 8));
	assert_true(listen_src_refuse(64, 128));
	assert_false(listen_src_refuse(63, 128));
	/* backlog 1: one handshake per address, as the cap itself says */
	assert_true(listen_src_refuse(1, 1));
	assert_false(listen_src_refuse(0, 1));
}

static struct sockaddr_storage v4(const char *ip, socklen_t *len)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *a = (struct sockaddr_in *)&ss;

	a->sin_family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, ip, &a->sin_addr), 1);
	*len = sizeof(*a);
	return ss;
}

/* Counted per address (the port does not matter; an IPv4-mapped IPv6
 * address is the IPv4 one), refused at the share once half full, and
 * every entry gone again when its count is. */
static void test_src_count(void **state)
{
	struct listen_sources s;
	struct sockaddr_storage a, b, m = {0};
	struct sockaddr_in6 *m6 = (struct sockaddr_in6 *)&m;
	socklen_t la, lb;

	a = v4("192.0.2.1", &la);
	b = v4("192.0.2.2", &lb);
	m6->sin6_family = AF_INET6;
	assert_int_equal(inet_pton(AF_INET6, "::ffff:192.0.2.1", &m6->sin6_addr), 1);
	listen_sources_init(&s);
	/* backlog 4: share 2; the port does not matter, nor IPv4 mapping */
	assert_int_equal(listen_sources_enter(&s, &a, la, 4), LISTEN_SRC_COUNTED);
	((struct sockaddr_in *)&a)->sin_port = htons(1234);
	assert_int_equal(listen_sources_enter(&s, &m, sizeof(*m6), 4), LISTEN_SRC_COUNTED);
	assert_int_equal(listen_sources_enter(&s, &a, la, 4), LISTEN_SRC_REFUSED);
	assert_int_equal(listen_sources_held(&s, &a, la), 2);
	assert_int_equal(listen_sources_enter(&s, &b, lb, 4), LISTEN_SRC_COUNTED);
	assert_int_equal(listen_sources_held(&s, &b, lb), 1);
	listen_sources_leave(&s, &a, la);
	assert_int_equal(listen_sources_enter(&s, &a, la, 4), LISTEN_SRC_COUNTED);
	listen_sources_leave(&s, &a, la);
	listen_sources_leave(&s, &m, sizeof(*m6));
	assert_int_equal(listen_sources_held(&s, &a, la), 0);
	listen_sources_leave(&s, &b, lb);
	assert_int_equal(listen_sources_held(&s, &a, la), 0);
	for (int i = 0; i < LISTEN_SRC_BUCKETS; i++)
		assert_null(s.bucket[i]);
	/* not an IP address: admitted, never counted */
	m.ss_family = AF_UNIX;
	assert_int_equal(listen_sources_enter(&s, &m, sizeof(m), 8), LISTEN_SRC_UNCOUNTED);
	listen_sources_destroy(&s);
}

static void test_congested(void **state)
{
	/* congested = at least @threshold handshakes wait for a worker */
	assert_false(listen_hs_congested(0, 4));
	assert_false(listen_hs_congested(3, 4));
	assert_true(listen_hs_congested(4, 4));
	assert_true(listen_hs_congested(100, 4));
	assert_false(listen_hs_congested(0, 1));
	assert_true(listen_hs_congested(1, 1));
	assert_true(listen_hs_congested(0, 0));
}

static void test_decline_at_once(void **state)
{
	assert_false(listen_decline_at_once(false, 1000, 1));
	assert_false(listen_decline_at_once(true, 3, 4));
	assert_true(listen_decline_at_once(true, 4, 4));
}

/* Admission by cost: a paced load is always admitted; in a
 * storm one SMC client per LISTEN_BUDGET_DIV handshake times, and only
 * when no handshake waits. */
static void test_admit_by_cost(void **state)
{
	const int64_t ms = 1000000, cost = 20 * ms;
	struct listen_admit_state st = {0};
	int64_t t = 1000 * ms;
	int admitted = 0;

	/* off: everything goes to the pool, whatever the queue */
	assert_int_equal(listen_admit_smcr(false, 1000, 4, t, cost, &st), LISTEN_ADMIT);
	/* on, no storm: admitted at any rate below the threshold */
	for (int i = 0; i < 100; i++)
		assert_int_equal(listen_admit_smcr(true, 3, 4, t + i, cost, &st), LISTEN_ADMIT);
	assert_int_equal(st.storm_until_ns, 0);
	/* the queue reaches its threshold: declined, and a storm begins */
	assert_int_equal(listen_admit_smcr(true, 4, 4, t, cost, &st), LISTEN_DECLINE_QUEUE);
	assert_int_equal(st.storm_until_ns, t + LISTEN_STORM_HOLD_MS * ms);
	/* in the storm: nothing while a handshake waits */
	assert_int_equal(listen_admit_smcr(true, 1, 4, t + ms, cost, &st), LISTEN_DECLINE_BUDGET);
	/* one admission per LISTEN_BUDGET_DIV handshake times, the rest declined */
	for (int64_t now = t + ms; now < t + LISTEN_STORM_HOLD_MS * ms; now += ms)
		admitted += listen_admit_smcr(true, 0, 4, now, cost, &st) == LISTEN_ADMIT;
	assert_int_equal(admitted, (LISTEN_STORM_HOLD_MS - 1) / (20 * LISTEN_BUDGET_DIV) + 1);
	/* the storm is over: every client admitted again */
	t += LISTEN_STORM_HOLD_MS * ms;
	assert_int_equal(listen_admit_smcr(true, 0, 4, t, cost, &st), LISTEN_ADMIT);
	assert_int_equal(listen_admit_smcr(true, 0, 4, t + 1, cost, &st), LISTEN_ADMIT);
	/* no cost measured yet: the default */
	st = (struct listen_admit_state){.storm_until_ns = t + 10 * ms};
	assert_int_equal(listen_admit_smcr(true, 0, 4, t, 0, &st), LISTEN_ADMIT);
	assert_int_equal(st.next_admit_ns, t + LISTEN_HS_COST_DEFAULT * LISTEN_BUDGET_DIV);
}

/* A storm that comes back as soon as it ends holds twice as long each time,
 * up to the cap; one after a calm of a hold or more starts from the base. */
static void test_storm_hold_backs_off(void **state)
{
	const int64_t ms = 1000000, base = LISTEN_STORM_HOLD_MS * ms;
	const int64_t max = LISTEN_STORM_HOLD_MAX_MS * ms;
	struct listen_admit_state st = {0};
	int64_t t = 1000 * ms, hold = base;

	listen_storm_renew(t, &st);
	assert_int_equal(st.storm_hold_ns, base);
	assert_int_equal(st.storm_until_ns, t + base);
	/* within the storm: extended, the hold unchanged */
	listen_storm_renew(t + 10 * ms, &st);
	assert_int_equal(st.storm_hold_ns, base);
	assert_int_equal(st.storm_until_ns, t + 10 * ms + base);
	/* back just after each end: doubled, then capped */
	for (int i = 0; i < 6; i++) {
		t = st.storm_until_ns + ms;
		listen_storm_renew(t, &st);
		hold = 2 * hold < max ? 2 * hold : max;
		assert_int_equal(st.storm_hold_ns, hold);
		assert_int_equal(st.storm_until_ns, t + hold);
	}
	assert_int_equal(st.storm_hold_ns, max);
	/* a calm of one hold: the next storm starts from the base */
	t = st.storm_until_ns + max;
	listen_storm_renew(t, &st);
	assert_int_equal(st.storm_hold_ns, base);
	assert_int_equal(st.storm_until_ns, t + base);
	/* the admission decision renews it the same way */
	t = st.storm_until_ns + ms;
	assert_int_equal(listen_admit_smcr(true, 4, 4, t, 20 * ms, &st), LISTEN_DECLINE_QUEUE);
	assert_int_equal(st.storm_hold_ns, 2 * base);
	assert_int_equal(st.storm_until_ns, t + 2 * base);
}

/* A storm goes on while its refused SMC clients would keep every worker
 * busy; fewer, and it is let end. */
static void test_storm_demand(void **state)
{
	const int64_t ms = 1000000, cost = 10 * ms, win = LISTEN_DEMAND_WINDOW_MS * ms;
	struct listen_demand d = {0};
	int64_t t = 1000 * ms;
	int extend = 0;

	/* the first call opens a window */
	assert_false(listen_storm_demand(t, cost, 2, &d));
	/* 2 workers at 10 ms: 200 a second is their capacity; 400 a second
	 * (one each 2.5 ms) over a window: extend once per window */
	for (int64_t now = t + 2500000; now <= t + 4 * win; now += 2500000)
		extend += listen_storm_demand(now, cost, 2, &d);
	assert_int_equal(extend, 4);
	/* 100 a second: half their capacity, never */
	t += 4 * win;
	extend = 0;
	for (int64_t now = t + 10 * ms; now <= t + 8 * win; now += 10 * ms)
		extend += listen_storm_demand(now, cost, 2, &d);
	assert_int_equal(extend, 0);
	/* no cost measured yet: the default (10 ms) */
	d = (struct listen_demand){.since_ns = t, .n = 0};
	for (int i = 0; i < 100; i++)
		listen_storm_demand(t + i * ms, 0, 1, &d);
	assert_true(listen_storm_demand(t + win, 0, 1, &d)); /* 101 in 250 ms x 10 ms */
}

/* Which worker steps completed: SMC-R, or a DECLINE of ours decided from
 * the PROPOSAL and this host; not one the peer sent or a failed wait. */
static void test_step_final(void **state)
{
	assert_int_equal(listen_step_final(true, false, 0), LISTEN_STEP_DONE);
	assert_int_equal(listen_step_final(false, false, SMC_CLC_DECL_NOSMCRDEV), LISTEN_STEP_DONE);
	assert_int_equal(listen_step_final(false, false, SMC_CLC_DECL_DIFFPREFIX),
			 LISTEN_STEP_DONE);
	assert_int_equal(listen_step_final(false, false, SMC_CLC_DECL_MEM), LISTEN_STEP_DONE);
	assert_int_equal(listen_step_final(false, false, SMC_CLC_DECL_TIMEOUT_CL),
			 LISTEN_STEP_FAILED);
	assert_int_equal(listen_step_final(false, false, SMC_CLC_DECL_ERR_REGBUF),
			 LISTEN_STEP_FAILED);
	assert_int_equal(listen_step_final(false, false, SMC_CLC_DECL_SYNCERR), LISTEN_STEP_FAILED);
	assert_int_equal(listen_step_final(false, true, SMC_CLC_DECL_NOSMCRDEV),
			 LISTEN_STEP_FAILED);
}

/*
 * An auto-fallback listener after an attacker whose handshakes stall
 * stops: honest SMC clients, @rate_hz of them, each a completed step of
 * @step_ns, arrive at an empty queue in a storm that holds as long as it
 * can (LISTEN_STORM_HOLD_MAX_MS). The storm is extended as the accept
 * thread does it (listener_storm_demand()). Returns how long after @t0
 * every client is admitted again, or -1 if not within @limit_ns.
 */
static int64_t smcr_back_after(int64_t t0, int64_t cost, int64_t step_ns, int rate_hz,
			       int64_t limit_ns)
{
	const int64_t gap = 1000000000LL / rate_hz, hold = LISTEN_STORM_HOLD_MAX_MS * 1000000LL;
	struct listen_admit_state st = {.storm_hold_ns = hold, .storm_until_ns = t0 + hold};
	struct listen_demand d = {.since_ns = t0};

	for (int64_t now = t0; now < t0 + limit_ns; now += gap) {
		enum listen_admit a = listen_admit_smcr(true, 0, 4, now, cost, &st);

		if (now >= st.storm_until_ns)
			return now - t0;
		if (a == LISTEN_ADMIT)
			cost = listen_hs_cost(cost, step_ns, LISTEN_STEP_DONE);
		else if (listen_storm_demand(now, cost, 2, &d))
			listen_storm_renew(now, &st);
	}
	return -1;
}

/*
 * Admission by cost cannot be poisoned: handshakes that fail after a long
 * wait (an LLC answer that never came) leave the handshake cost alone;
 * slow ones that complete count at most LISTEN_HS_COST_MAX_MS each; and
 * after the attacker stops, honest demand that two workers serve easily
 * gets SMC-R back within seconds, not minutes.
 */
static void test_cost_not_poisoned(void **state)
{
	const int64_t ms = 1000000, s = 1000 * ms, honest = 5 * ms;
	const int64_t max = LISTEN_HS_COST_MAX_MS * ms, t = 1000 * s;
	int64_t cost = 0, slow, back;

	for (int i = 0; i < 20; i++)
		cost = listen_hs_cost(cost, honest, LISTEN_STEP_DONE);
	assert_int_equal(cost, honest);
	/* sixteen handshakes stalled on CONFIRM_LINK for 2.5 s each */
	for (int i = 0; i < 16; i++)
		cost = listen_hs_cost(cost, 2500 * ms, LISTEN_STEP_FAILED);
	print_message("cost after 16 stalled handshakes: %lld ms\n", (long long)(cost / ms));
	assert_int_equal(cost, honest);
	assert_int_equal(listen_hs_cost(cost, 2500 * ms, LISTEN_STEP_PARKED), honest);
	/* ... or answered just before the LLC timeout: bounded */
	slow = cost;
	for (int i = 0; i < 64; i++)
		slow = listen_hs_cost(slow, 1900 * ms, LISTEN_STEP_DONE);
	assert_true(slow <= max && slow > max / 2);
	assert_int_equal(listen_hs_cost(0, 10 * s, LISTEN_STEP_DONE), max);
	/* the attacker stops; 50 honest SMC clients a second, 5 ms each */
	back = smcr_back_after(t, cost, honest, 50, 120 * s);
	print_message("stalled attacker: SMC-R back after %lld ms\n", (long long)(back / ms));
	assert_true(back >= 0 && back <= LISTEN_STORM_HOLD_MAX_MS * ms + s);
	back = smcr_back_after(t, slow, honest, 50, 120 * s);
	print_message("slow attacker: SMC-R back after %lld ms\n", (long long)(back / ms));
	assert_true(back >= 0 && back <= 30 * s);
}

static void test_threshold_default(void **state)
{
	struct usmc_opts o;

	assert_int_equal(opts_init_from_env(&o, NULL), 0);
	assert_int_equal(opts_set(&o, USMC_OPT_HS_THREADS, 3), 0);
	assert_int_equal(opts_set(&o, USMC_OPT_HS_CONGESTION, 0), 0);
	assert_int_equal(opts_hs_congestion(&o), 6); /* 0 = 2 x threads */
	assert_false(listen_hs_congested(5, opts_hs_congestion(&o)));
	assert_true(listen_hs_congested(6, opts_hs_congestion(&o)));
	assert_int_equal(opts_set(&o, USMC_OPT_HS_CONGESTION, 1), 0);
	assert_int_equal(opts_hs_congestion(&o), 1);
}

static void test_hist_bucket(void **state)
{
	assert_int_equal(listen_hist_bucket(0), 0);
	assert_int_equal(listen_hist_bucket(1), 0);
	assert_int_equal(listen_hist_bucket(2), 1);
	assert_int_equal(listen_hist_bucket(3), 1);
	assert_int_equal(listen_hist_bucket(4), 2);
	assert_int_equal(listen_hist_bucket(1023), 9);
	assert_int_equal(listen_hist_bucket(1024), 10);
	assert_int_equal(listen_hist_bucket(1ULL << (USMC_HS_HIST_BUCKETS - 2)),
			 USMC_HS_HIST_BUCKETS - 2);
	assert_int_equal(listen_hist_bucket(1ULL << (USMC_HS_HIST_BUCKETS - 1)),
			 USMC_HS_HIST_BUCKETS - 1);
	assert_int_equal(listen_hist_bucket(UINT64_MAX), USMC_HS_HIST_BUCKETS - 1);
}

/* ---- the pool: a worker that blocks until released, to hold the queue */

struct gate {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int running, released, done;
};

static void gated(void *arg, struct usmc_conn *c)
{
	struct gate *g = arg;

	pthread_mutex_lock(&g->m);
	g->running++;
	pthread_cond_broadcast(&g->cv);
	while (!g->released)
		pthread_cond_wait(&g->cv, &g->m);
	g->done++;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->m);
	free(c);
}

static void wait_count(struct gate *g, int *field, int n)
{
	pthread_mutex_lock(&g->m);
	while (*field < n)
		pthread_cond_wait(&g->cv, &g->m);
	pthread_mutex_unlock(&g->m);
}

static void test_pool_depth(void **state)
{
	struct gate g = {.m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	struct hs_pool p;
	const int threads = 2, extra = 5;

	assert_int_equal(hs_pool_start(&p, threads, gated, &g), 0);
	for (int i = 0; i < threads; i++)
		hs_pool_submit(&p, calloc(1, sizeof(struct usmc_conn)));
	wait_count(&g, &g.running, threads); /* both workers busy */
	assert_int_equal(hs_pool_depth(&p), 0);
	for (int i = 0; i < extra; i++)
		hs_pool_submit(&p, calloc(1, sizeof(struct usmc_conn)));
	/* depth counts only handshakes waiting for a worker */
	assert_int_equal(hs_pool_depth(&p), extra);
	assert_true(hs_pool_high(&p) >= (unsigned int)extra);
	assert_true(listen_hs_congested(hs_pool_depth(&p), 2 * threads));
	pthread_mutex_lock(&g.m);
	g.released = 1;
	pthread_cond_broadcast(&g.cv);
	pthread_mutex_unlock(&g.m);
	wait_count(&g, &g.done, threads + extra);
	assert_int_equal(hs_pool_depth(&p), 0);
	assert_int_equal(hs_pool_high(&p), extra);
	assert_null(hs_pool_stop(&p));
}

/* Stopping returns what is still queued, for the caller to free. */
static void test_pool_stop_returns_queued(void **state)
{
	struct gate g = {.m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	struct hs_pool p;
	struct usmc_conn *left;
	int n = 0;

	assert_int_equal(hs_pool_start(&p, 1, gated, &g), 0);
	hs_pool_submit(&p, calloc(1, sizeof(struct usmc_conn)));
	wait_count(&g, &g.running, 1);
	for (int i = 0; i < 3; i++)
		hs_pool_submit(&p, calloc(1, sizeof(struct usmc_conn)));
	pthread_mutex_lock(&g.m);
	g.released = 1; /* the running one finishes; stop before others run? */
	pthread_cond_broadcast(&g.cv);
	pthread_mutex_unlock(&g.m);
	left = hs_pool_stop(&p);
	while (left) {
		struct usmc_conn *next = left->next;

		free(left);
		left = next;
		n++;
	}
	/* every submitted connection was either run or handed back */
	assert_int_equal(g.done + n, 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backlog_room),
		cmocka_unit_test(test_congested),
		cmocka_unit_test(test_decline_at_once),
		cmocka_unit_test(test_admit_by_cost),
		cmocka_unit_test(test_storm_hold_backs_off),
		cmocka_unit_test(test_storm_demand),
		cmocka_unit_test(test_step_final),
		cmocka_unit_test(test_cost_not_poisoned),
		cmocka_unit_test(test_src_share),
		cmocka_unit_test(test_src_count),
		cmocka_unit_test(test_threshold_default),
		cmocka_unit_test(test_hist_bucket),
		cmocka_unit_test(test_pool_depth),
		cmocka_unit_test(test_pool_stop_returns_queued),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
