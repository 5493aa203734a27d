// SPDX-License-Identifier: MIT
/*
 * A connection whose both windows are shut after a failover (smcr_conn.h
 * SMCR_FAILOVER_SPILL): our send waits for the peer's consumer cursor, the
 * peer has written all our RMB, and the peer's CDC that would have opened
 * our window went with the old link. The tick takes the oldest unread
 * bytes out of the RMB and tells the peer their room; the peer writes its
 * next bytes over their place in the ring, and the reader still gets the
 * stream whole and in order. No device: the fake link group of
 * tests/common/fake_lgr.h with a second link beside the first.
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
#include "cdc.h"
#include "cdc_rx.h"
#include "lgr.h"
#include "llc.h"
#include "smcr_conn.h"
#include "smcr_conn_int.h"
#include "smcr_llc.h"
#include "smcr_wr.h"

#include "common/fake_lgr.h"

#define RING	   16384u /* both RMBs (size class 0) and the send buffer */
#define OTHER_SLOT 1	  /* the link the connection fails over to */
#define UNSENT	   3616u  /* in our send buffer past the peer's window */

/* The peer's stream: a byte for each offset, never the same a ring later. */
static uint8_t stream_byte(uint64_t off)
{
	return (uint8_t)((off * 2654435761u) >> 24);
}

/* The peer RDMA-writes its stream's [from, to) into our RMB. */
static void peer_writes(struct smcr_conn *sc, uint64_t from, uint64_t to)
{
	uint8_t *rmb = sc->rmb->addr;

	for (uint64_t off = from; off < to; off++)
		rmb[off % RING] = stream_byte(off);
}

/* The peer's CDC: its producer cursor at @prod, its consumer at @cons. */
static void peer_cdc(struct fake *f, struct smcr_conn *sc, uint16_t seq, uint64_t prod,
		     uint64_t cons)
{
	struct cdc_msg m = {.seqno = seq,
			    .token = sc->token,
			    .prod = cdc_rx_curs_of(prod, RING),
			    .cons = cdc_rx_curs_of(cons, RING)};
	uint8_t buf[CDC_MSG_LEN];

	assert_int_equal(cdc_encode(&m, buf, sizeof(buf)), CDC_MSG_LEN);
	f->lgr->ops->cdc_rx(f->lgr, buf, sizeof(buf));
}

/*
 * A connection jammed as kcli-silent left one: the peer wrote our whole
 * RMB and we told it nothing back; we wrote the peer's whole RMB and have
 * UNSENT more, and the peer consumed it all, but the CDC that said so was
 * lost (our peer_cons is still 0).
 */
static struct smcr_conn *jammed_conn(struct fake *f)
{
	const struct smcr_peer_rmb peer = {.token = 0x77,
					   .rkey = 0x1111,
					   .dma_addr = 0x100000,
					   .rmbe_idx = 1,
					   .size_class = 0};
	struct smcr_conn *sc;

	fake_add_link(f, OTHER_SLOT, &f->qp);
	assert_int_equal(smcr_conn_new(f->lgr, RING, RING, &sc), 0);
	assert_int_equal(smcr_conn_set_peer(sc, &peer), 0);
	assert_int_equal(lgr_rtoken_set(&f->lgr->rtok, sc->peer_rtok, OTHER_SLOT, 0x2222, 0x200000),
			 0);
	peer_writes(sc, 0, RING);
	pthread_mutex_lock(&sc->lock);
	assert_int_equal(sc->rx.peer_len, RING);
	sc->rx.rx_prod = RING;
	sc->tx_prep = RING + UNSENT;
	sc->rx.tx_sent = sc->tx_fin = RING;
	pthread_mutex_unlock(&sc->lock);
	return sc;
}

/* The link fails: the connection moves to the other link. */
static void fail_over(struct fake *f, struct smcr_conn *sc)
{
	assert_true(f->lgr->ops->switch_link(sc, LGR_FIRST_LINK, OTHER_SLOT));
	assert_int_equal(atomic_load(&f->lgr->failover_watches), 1);
}

/* A jammed connection on a fresh fake link group, just failed over. */
static struct smcr_conn *failed_over(struct fake *f)
{
	struct smcr_conn *sc;

	fake_open(f);
	sc = jammed_conn(f);
	fail_over(f, sc);
	return sc;
}

/* The progress thread's tick: did it post anything? */
static bool tick_sends(struct fake *f)
{
	int sent = fake_nsent;

	f->lgr->ops->tick(f->lgr);
	return fake_nsent > sent;
}

/* The watch, if on, as if its switch were @ms ago. */
static void switched_ago(struct smcr_conn *sc, long ms)
{
	pthread_mutex_lock(&sc->lock);
	if (sc->failover_ms)
		sc->failover_ms -= ms;
	pthread_mutex_unlock(&sc->lock);
}

/* The CDC last posted, decoded. */
static struct cdc_msg last_cdc(void)
{
	struct cdc_msg m;

	assert_true(fake_nsent > 0);
	assert_int_equal(cdc_decode(fake_sent[fake_nsent - 1], CDC_MSG_LEN, &m), 0);
	return m;
}

/* Every send posted completes (their references go), and the connection
 * with them. */
static void finish(struct fake *f, struct smcr_conn *sc)
{
	for (int s = 0; s <= OTHER_SLOT; s++) {
		struct smcr_sq *sq = &f->lgr->lnk[s].sq;

		for (; sq->tail < sq->head; sq->tail++) {
			struct smcr_tx_pend p = sq->pend[sq->tail % SMCR_MAX_SEND_WR];

			p.failed = true;
			if (p.conn)
				f->lgr->ops->tx_done(f->lgr, &p);
		}
	}
	smcr_conn_discard(sc);
	assert_int_equal(atomic_load(&f->lgr->failover_watches), 0);
	fake_close(f);
}

/* Read @n bytes, nonblocking (all are there), and check them against the
 * peer's stream from @from. */
static void read_stream(struct smcr_conn *sc, uint64_t from, size_t n)
{
	uint8_t *buf = malloc(n);
	size_t got = 0;

	assert_non_null(buf);
	while (got < n) {
		ssize_t k = smcr_recvv(sc, &(struct iovec){buf + got, n - got}, 1, 0, true);

		assert_true(k > 0);
		got += (size_t)k;
	}
	for (size_t i = 0; i < n; i++)
		if (buf[i] != stream_byte(from + i))
			fail_msg("stream byte %zu: %02x, want %02x", (size_t)(from + i), buf[i],
				 stream_byte(from + i));
	free(buf);
}

/* Jammed after its failover: the tick spills SMCR_FAILOVER_SPILL bytes
 * and tells the peer; the peer's answer carries the lost consumer cursor
 * and its next bytes, written where the spilled ones were; the reader gets
 * every byte in order, the spilled ones from the spill. */
static void test_jam_spills_and_stream_stays_whole(void **state)
{
	struct fake f;
	struct smcr_conn *sc = failed_over(&f);
	struct cdc_msg m;

	(void)state;
	assert_false(tick_sends(&f)); /* too soon: the peer may answer the switch */
	switched_ago(sc, SMCR_FAILOVER_SETTLE_MS);
	assert_true(tick_sends(&f));
	m = last_cdc();
	assert_int_equal(m.cons.wrap, 0);
	assert_int_equal(m.cons.count, SMCR_FAILOVER_SPILL);	    /* room told */
	assert_int_equal(atomic_load(&f.lgr->failover_watches), 0); /* once */
	/* the peer's answer: its lost cursor, and the room it was given */
	peer_writes(sc, RING, RING + SMCR_FAILOVER_SPILL);
	peer_cdc(&f, sc, 1, RING + SMCR_FAILOVER_SPILL, RING);
	pthread_mutex_lock(&sc->lock);
	assert_int_equal(sc->rx.peer_cons, RING);	 /* our window opened */
	assert_int_equal(sc->rx.tx_sent, RING + UNSENT); /* and the rest went */
	pthread_mutex_unlock(&sc->lock);
	read_stream(sc, 0, RING + SMCR_FAILOVER_SPILL);
	assert_null(sc->spill); /* read: freed */
	finish(&f, sc);
}

/* The peer's CDC after the switch carries its consumer cursor as it stands:
 * nothing was lost, the watch ends, nothing is spilled. */
static void test_peer_cdc_ends_watch(void **state)
{
	struct fake f;
	struct smcr_conn *sc = failed_over(&f);

	(void)state;
	peer_cdc(&f, sc, 1, RING, 0);
	assert_int_equal(atomic_load(&f.lgr->failover_watches), 0);
	switched_ago(sc, SMCR_FAILOVER_SETTLE_MS);
	assert_false(tick_sends(&f));
	assert_null(sc->spill);
	finish(&f, sc);
}

/* @sc's reader copying (its turn taken), and what our send has prepared. */
static void set_reader_and_send(struct smcr_conn *sc, bool reader, uint64_t prep)
{
	pthread_mutex_lock(&sc->lock);
	sc->rx_user = reader;
	sc->tx_prep = prep;
	pthread_mutex_unlock(&sc->lock);
}

/* A reader copying out of the RMB (its turn, the lock dropped) would read
 * over the peer's writes into the spilled bytes' place: no spill while it
 * does, and the watch stays for the next tick. Nor while our own send is
 * not waiting on the peer: then nothing is jammed. */
static void test_no_spill_under_reader_or_open_window(void **state)
{
	struct fake f;
	struct smcr_conn *sc = failed_over(&f);

	(void)state;
	switched_ago(sc, SMCR_FAILOVER_SETTLE_MS);
	set_reader_and_send(sc, true, RING + UNSENT);
	assert_false(tick_sends(&f));
	/* all our bytes are in the peer's RMB: our send waits on nothing */
	set_reader_and_send(sc, false, RING);
	assert_false(tick_sends(&f));
	assert_int_equal(atomic_load(&f.lgr->failover_watches), 1);
	set_reader_and_send(sc, false, RING + UNSENT); /* it waits again */
	assert_true(tick_sends(&f));
	assert_non_null(sc->spill);
	finish(&f, sc);
}

/* The watch is bounded: SMCR_FAILOVER_WATCH_MS after the switch it ends,
 * jammed or not. */
static void test_watch_runs_out(void **state)
{
	struct fake f;
	struct smcr_conn *sc = failed_over(&f);

	(void)state;
	switched_ago(sc, SMCR_FAILOVER_WATCH_MS);
	assert_false(tick_sends(&f));
	assert_int_equal(atomic_load(&f.lgr->failover_watches), 0);
	finish(&f, sc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jam_spills_and_stream_stays_whole),
		cmocka_unit_test(test_peer_cdc_ends_watch),
		cmocka_unit_test(test_no_spill_under_reader_or_open_window),
		cmocka_unit_test(test_watch_runs_out),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
