// SPDX-License-Identifier: MIT
/*
 * The CDC receive logic (wire/cdc_rx.h) as a state machine under libFuzzer.
 * The input is a script: ring sizes, then operations, each either a CDC
 * from the peer (cursors at offsets from what it could honestly know, so
 * that both honest values and lies just past them come up, plus raw wire
 * values) or a step of our own side (the application reads, we send data,
 * we tell the peer our consumer cursor, we end a held EOF). After every
 * operation the invariants of cdc_rx.h must hold, among them that once
 * cdc_rx_eof() says the stream ended its producer cursor never moves again;
 * at the end an honest CDC must be accepted and reopen the whole send
 * window.
 */
#include <string.h>

#include "cdc_rx.h"
#include "fuzz_common.h"

enum op { OP_PEER_CDC, OP_PEER_RAW, OP_READ, OP_SEND, OP_TELL, OP_HOLD_END, OP_COUNT };

struct script {
	const uint8_t *p;
	size_t left;
};

static uint32_t take(struct script *s, int bytes)
{
	uint32_t v = 0;

	for (int i = 0; i < bytes; i++) {
		v = v << 8 | (s->left ? *s->p : 0);
		if (s->left) {
			s->p++;
			s->left--;
		}
	}
	return v;
}

static void check_invariants(const struct cdc_rx_state *st, const struct cdc_rx_state *before)
{
	bool ended = st->peer_done_writing || st->peer_closed;

	/* the reader was told of the end: nothing after it is taken */
	if (cdc_rx_eof(before))
		FUZZ_ASSERT(st->rx_prod == before->rx_prod && cdc_rx_eof(st));
	/* held only for a stream that ended without an abort, and never again
	 * once released */
	FUZZ_ASSERT(!st->eof_held || (ended && !st->peer_abort));
	if (st->eof_held)
		FUZZ_ASSERT(before->eof_held ||
			    !(before->peer_done_writing || before->peer_closed));
	FUZZ_ASSERT(st->rx_cons <= st->rx_prod);
	FUZZ_ASSERT(st->rx_cons_sent <= st->rx_cons);
	FUZZ_ASSERT(st->rx_prod - st->rx_cons_sent <= st->rmb_len);
	FUZZ_ASSERT(st->peer_cons <= st->tx_sent);
	FUZZ_ASSERT(st->tx_sent - st->peer_cons <= st->peer_len);
}

/* A value near @base: up to a ring and a bit either side. */
static uint64_t near(uint64_t base, uint32_t ring, uint32_t r)
{
	int64_t off = (int64_t)(r % (2u * ring + 5)) - (int64_t)ring - 2;

	return off < 0 && (uint64_t)-off > base ? 0 : base + (uint64_t)off;
}

static void peer_cdc(struct cdc_rx_state *st, struct script *s, bool raw)
{
	struct cdc_rx_state before = *st;
	struct cdc_msg m = {.prod_flags = (uint8_t)take(s, 1),
			    .conn_state_flags = (uint8_t)take(s, 1)};

	if (raw) {
		m.prod = (struct cdc_cursor){(uint16_t)take(s, 2), take(s, 4)};
		m.cons = (struct cdc_cursor){(uint16_t)take(s, 2), take(s, 4)};
	} else {
		m.prod = cdc_rx_curs_of(near(st->rx_cons_sent, st->rmb_len, take(s, 4)),
					st->rmb_len);
		m.cons = cdc_rx_curs_of(near(st->tx_sent, st->peer_len, take(s, 4)), st->peer_len);
	}
	if (cdc_rx_apply(st, &m) != CDC_RX_OK)
		FUZZ_ASSERT(!memcmp(&before, st, sizeof(before))); /* refused: untouched */
}

static void step(struct cdc_rx_state *st, struct script *s)
{
	switch (take(s, 1) % OP_COUNT) {
	case OP_PEER_CDC:
		peer_cdc(st, s, false);
		break;
	case OP_PEER_RAW:
		peer_cdc(st, s, true);
		break;
	case OP_READ: /* the application reads some of what arrived */
		st->rx_cons += take(s, 4) % (st->rx_prod - st->rx_cons + 1);
		break;
	case OP_SEND: /* we write what the window allows */
		st->tx_sent += take(s, 4) % (st->peer_len - (st->tx_sent - st->peer_cons) + 1);
		break;
	case OP_TELL: /* a CDC of ours carried the consumer cursor */
		st->rx_cons_sent = st->rx_cons;
		break;
	case OP_HOLD_END: /* the peer had nothing more, or the bound passed */
		cdc_rx_hold_end(st);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct script s = {data, size};
	struct cdc_rx_state st = {.rmb_len = 16384u << (take(&s, 1) % 6),
				  .peer_len = 16384u << (take(&s, 1) % 6)};
	struct cdc_msg honest;

	while (s.left) {
		struct cdc_rx_state before = st;

		step(&st, &s);
		check_invariants(&st, &before);
	}
	/* no stall the peer cannot clear: an honest CDC reopens the window */
	honest = (struct cdc_msg){.prod = cdc_rx_curs_of(st.rx_prod, st.rmb_len),
				  .cons = cdc_rx_curs_of(st.tx_sent, st.peer_len)};
	if (!cdc_rx_eof(&st))
		honest.prod = cdc_rx_curs_of(st.rx_cons_sent + st.rmb_len, st.rmb_len);
	{
		struct cdc_rx_state before = st;

		FUZZ_ASSERT(cdc_rx_apply(&st, &honest) == CDC_RX_OK);
		check_invariants(&st, &before);
	}
	FUZZ_ASSERT(st.peer_cons == st.tx_sent);
	return 0;
}
