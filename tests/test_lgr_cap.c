// SPDX-License-Identifier: MIT
/*
 * The link group caps' decision (lgr_cap.c) step by step, at the defaults
 * (128 per context, 8 per peer address) and at the edges of the options'
 * ranges: handshakes' share, the reserve for our own connects, idle link
 * groups reclaimed before a refusal.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lgr_cap.h"

#define MAX_LGRS 128
#define PER_PEER 8

static struct lgr_cap_verdict in(struct lgr_cap_load l)
{
	return lgr_cap_decide(&l, MAX_LGRS, PER_PEER, true);
}

static struct lgr_cap_verdict out(struct lgr_cap_load l)
{
	return lgr_cap_decide(&l, MAX_LGRS, PER_PEER, false);
}

static void test_shares(void **state)
{
	(void)state;
	assert_int_equal(lgr_cap_hs_share(PER_PEER), 4);
	assert_int_equal(lgr_cap_hs_share(MAX_LGRS), 64);
	assert_int_equal(lgr_cap_hs_share(1), 1);
	assert_int_equal(lgr_cap_hs_share(3), 1);
	assert_int_equal(lgr_cap_reserve(MAX_LGRS), 16);
	assert_int_equal(lgr_cap_reserve(4096), 512);
	/* at least one, but a context of one link group still serves */
	assert_int_equal(lgr_cap_reserve(2), 1);
	assert_int_equal(lgr_cap_reserve(15), 1);
	assert_int_equal(lgr_cap_reserve(1), 0);
}

/* One address's PROPOSALs hold at most half its cap: the other half stays
 * for the link groups it completes, ours to it, and other processes of
 * its host that find one complete. */
static void test_hs_per_address(void **state)
{
	(void)state;
	assert_int_equal(
		in((struct lgr_cap_load){.open = 3, .peer = 3, .hs = 3, .peer_hs = 3}).refused,
		LGR_CAP_ADMIT);
	assert_int_equal(
		in((struct lgr_cap_load){.open = 4, .peer = 4, .hs = 4, .peer_hs = 4}).refused,
		LGR_CAP_HS_PEER);
	/* idle link groups do not help: handshakes are not reclaimed */
	assert_int_equal(
		in((struct lgr_cap_load){
			   .open = 8, .peer = 8, .hs = 4, .peer_hs = 4, .idle = 4, .peer_idle = 4})
			.refused,
		LGR_CAP_HS_PEER);
	/* our own connects to that address are not handshakes of its */
	assert_int_equal(
		out((struct lgr_cap_load){.open = 4, .peer = 4, .hs = 4, .peer_hs = 4}).refused,
		LGR_CAP_ADMIT);
}

/* Handshakes from many addresses hold at most half of the context. */
static void test_hs_all(void **state)
{
	(void)state;
	assert_int_equal(in((struct lgr_cap_load){.open = 63, .hs = 63}).refused, LGR_CAP_ADMIT);
	assert_int_equal(in((struct lgr_cap_load){.open = 64, .hs = 64}).refused, LGR_CAP_HS_ALL);
	assert_int_equal(out((struct lgr_cap_load){.open = 64, .hs = 64}).refused, LGR_CAP_ADMIT);
}

/* The last eighth of the context is our own connects'. */
static void test_reserve(void **state)
{
	struct lgr_cap_verdict v;

	(void)state;
	assert_int_equal(in((struct lgr_cap_load){.open = 111}).refused, LGR_CAP_ADMIT);
	assert_int_equal(in((struct lgr_cap_load){.open = 112}).refused, LGR_CAP_ALL);
	assert_int_equal(out((struct lgr_cap_load){.open = 112}).refused, LGR_CAP_ADMIT);
	assert_int_equal(out((struct lgr_cap_load){.open = 127}).refused, LGR_CAP_ADMIT);
	assert_int_equal(out((struct lgr_cap_load){.open = 128}).refused, LGR_CAP_ALL);
	/* reserve in use: an incoming one needs enough idle ones to get back
	 * below its limit, or it is refused and reclaims none */
	v = in((struct lgr_cap_load){.open = 114, .idle = 2});
	assert_int_equal(v.refused, LGR_CAP_ALL);
	assert_int_equal(v.reclaim_any, 0);
	v = in((struct lgr_cap_load){.open = 114, .idle = 3});
	assert_int_equal(v.refused, LGR_CAP_ADMIT);
	assert_int_equal(v.reclaim_any, 3);
	/* a context of one link group: no reserve, a server still serves */
	assert_int_equal(lgr_cap_decide(&(struct lgr_cap_load){0}, 1, 1, true).refused,
			 LGR_CAP_ADMIT);
}

/* A full cap reclaims idle link groups before it refuses. */
static void test_reclaim(void **state)
{
	struct lgr_cap_verdict v;

	(void)state;
	/* the context full of idle ones: one goes, whoever's */
	v = out((struct lgr_cap_load){.open = 128, .peer = 0, .idle = 128});
	assert_int_equal(v.refused, LGR_CAP_ADMIT);
	assert_int_equal(v.reclaim_peer, 0);
	assert_int_equal(v.reclaim_any, 1);
	v = in((struct lgr_cap_load){.open = 128, .peer = 3, .idle = 20});
	assert_int_equal(v.refused, LGR_CAP_ADMIT);
	assert_int_equal(v.reclaim_any, 17); /* back below 112 */
	/* full, nothing idle: refused */
	assert_int_equal(out((struct lgr_cap_load){.open = 128}).refused, LGR_CAP_ALL);
	/* the address at its cap: one of its own idle ones goes, which
	 * frees a place of the context too */
	v = out((struct lgr_cap_load){.open = 128, .peer = 8, .idle = 5, .peer_idle = 1});
	assert_int_equal(v.refused, LGR_CAP_ADMIT);
	assert_int_equal(v.reclaim_peer, 1);
	assert_int_equal(v.reclaim_any, 0);
	/* another address's idle ones make no room under this one's cap */
	v = out((struct lgr_cap_load){.open = 20, .peer = 8, .idle = 12, .peer_idle = 0});
	assert_int_equal(v.refused, LGR_CAP_PEER);
	assert_int_equal(v.reclaim_peer + v.reclaim_any, 0);
	/* below both caps: nothing is reclaimed */
	v = in((struct lgr_cap_load){.open = 100, .peer = 7, .idle = 100, .peer_idle = 7});
	assert_int_equal(v.refused, LGR_CAP_ADMIT);
	assert_int_equal(v.reclaim_peer + v.reclaim_any, 0);
}

/* Caps lowered under link groups already there (options are read at each
 * handshake): as many idle ones go as it takes, or none. */
static void test_lowered_caps(void **state)
{
	struct lgr_cap_verdict v;
	struct lgr_cap_load l = {.open = 20, .peer = 10, .idle = 20, .peer_idle = 10};

	(void)state;
	v = lgr_cap_decide(&l, 16, 4, false);
	assert_int_equal(v.refused, LGR_CAP_ADMIT);
	assert_int_equal(v.reclaim_peer, 7); /* 10 -> 3, below 4 */
	assert_int_equal(v.reclaim_any, 0);  /* 20 - 7 = 13, below 16 */
	l.peer_idle = 6;
	assert_int_equal(lgr_cap_decide(&l, 16, 4, false).refused, LGR_CAP_PEER);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shares),	cmocka_unit_test(test_hs_per_address),
		cmocka_unit_test(test_hs_all),	cmocka_unit_test(test_reserve),
		cmocka_unit_test(test_reclaim), cmocka_unit_test(test_lowered_caps),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
