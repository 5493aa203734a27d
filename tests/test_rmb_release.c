// SPDX-License-Identifier: MIT
/*
 * Where a connection's RMB goes at its last reference (smcr_conn.c
 * sc_rmb_release()): back to the pool with its rkey kept when the peer is
 * done writing into it, re-keyed first (DELETE_RKEY to the peer, a new
 * registration) when it may still write. A held EOF given up on its bound
 * (smcr_rx.c) is of the second kind: the peer closed while blocked on our
 * window, our question opened all of it, and nothing of the peer's said it
 * had nothing more. No device: the fake link group of
 * tests/common/fake_lgr.h, whose QP records the LLC messages.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmocka.h>

#include "bufpool.h"
#include "cdc_rx.h"
#include "clock.h"
#include "lgr.h"
#include "llc.h"
#include "smcr_conn.h"
#include "smcr_conn_int.h"
#include "smcr_llc.h"
#include "smcr_wr.h"

#include "common/fake_lgr.h"

#define RMB_BYTES 16384u

/* A connection whose peer closed while blocked on our window (EOF held),
 * its RMB's rkey known to the peer, everything read and the peer asked for
 * the rest at @asked_ms. */
static struct smcr_conn *held_eof_conn(struct fake *f, long asked_ms, uint32_t *rkey)
{
	struct smcr_conn *sc;

	assert_int_equal(smcr_conn_new(f->lgr, RMB_BYTES, RMB_BYTES, &sc), 0);
	sc->rmb->rkey_confirmed = true;
	*rkey = sc->rmb->rkey;
	pthread_mutex_lock(&sc->lock);
	sc->rx.peer_len = RMB_BYTES;
	sc->rx.peer_closed = true;
	sc->rx.peer_write_blocked = true;
	sc->rx.eof_held = true;
	sc->eof_asked = true;
	sc->eof_asked_ms = asked_ms;
	atomic_fetch_add(&f->lgr->eof_holds, 1); /* as sc_eof_ask_locked() arms it */
	pthread_mutex_unlock(&sc->lock);
	return sc;
}

/* The RMB the pool hands out next for a connection like @sc's. */
static struct bufpool_buf *reclaim_rmb(struct fake *f)
{
	struct bufpool_buf *b;

	assert_int_equal(bufpool_claim(f->lgr->rmbs, RMB_BYTES, &b), 0);
	return b;
}

/* The peer never answered: the hold's bound gives EOF, and the RMB the
 * connection leaves behind is re-keyed (the peer told to forget the old
 * rkey, a new registration) before anyone reuses it. */
static void test_given_up_eof_rekeys(void **state)
{
	struct fake f;
	struct smcr_conn *sc;
	struct bufpool_buf *again;
	struct llc_msg m;
	uint32_t rkey;

	(void)state;
	fake_open(&f);
	sc = held_eof_conn(&f, clock_now_ms() - 2 * SMCR_LLC_ANSWER_MAX_MS, &rkey);
	pthread_mutex_lock(&sc->lock);
	assert_true(sc_rmb_may_be_written(sc)); /* held: the peer may write */
	assert_true(sc_eof_expire_locked(sc, clock_now_ms()));
	assert_true(cdc_rx_eof(&sc->rx));	/* the reader sees the end */
	assert_true(sc_rmb_may_be_written(sc)); /* and the peer may still write */
	pthread_mutex_unlock(&sc->lock);
	smcr_conn_discard(sc);
	/* the peer was told to forget the old rkey */
	assert_int_equal(fake_nsent, 1);
	assert_int_equal(llc_decode(fake_sent[0], LLC_MSG_LEN, &m), 0);
	assert_int_equal(m.type, LLC_DELETE_RKEY);
	assert_int_equal(m.delete_rkey.num_rkeys, 1);
	assert_int_equal(m.delete_rkey.rkeys[0], rkey);
	/* and the next connection's ring is not reachable with it */
	again = reclaim_rmb(&f);
	assert_int_not_equal(again->rkey, rkey);
	assert_false(again->rkey_confirmed);
	assert_int_equal(fake_deregs, 1); /* the old registration went */
	bufpool_release(f.lgr->rmbs, again);
	fake_close(&f);
}

/* The peer's own CDC ended the hold (not blocked any more: its last write
 * took all it had): it is done writing, and the RMB goes back to the pool
 * with its rkey kept (no LLC flow, no registration). */
static void test_peer_ended_hold_keeps_rkey(void **state)
{
	struct fake f;
	struct smcr_conn *sc;
	struct bufpool_buf *again;
	uint32_t rkey;

	(void)state;
	fake_open(&f);
	sc = held_eof_conn(&f, clock_now_ms(), &rkey);
	pthread_mutex_lock(&sc->lock);
	sc->rx.peer_write_blocked = false;
	sc->rx.eof_held = false; /* as cdc_rx_apply() ends it */
	sc_eof_ask_locked(sc);	 /* disarms the bound */
	assert_false(sc_rmb_may_be_written(sc));
	pthread_mutex_unlock(&sc->lock);
	smcr_conn_discard(sc);
	assert_int_equal(fake_nsent, 0);
	again = reclaim_rmb(&f);
	assert_int_equal(again->rkey, rkey);
	assert_true(again->rkey_confirmed);
	assert_int_equal(fake_deregs, 0);
	bufpool_release(f.lgr->rmbs, again);
	fake_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_given_up_eof_rekeys),
		cmocka_unit_test(test_peer_ended_hold_keeps_rkey),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
