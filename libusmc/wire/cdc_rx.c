// SPDX-License-Identifier: MIT
/* A received CDC applied to a connection's cursors (cdc_rx.h). */
#include "cdc_cursor.h"
#include "cdc_rx.h"

struct cdc_cursor cdc_rx_curs_of(uint64_t total, uint32_t size)
{
	return cdc_curs_add((struct cdc_cursor){0, 0}, total, size);
}

/*
 * The peer's producer cursor as a stream total: it may be at most one RMB
 * ahead of the consumer cursor we last told it (rx_cons_sent). Behind it,
 * by less than a ring, it is stale: a peer that moved to another link
 * rewinds to what it knows we have, and our consumer cursor may have been
 * lost with the old link (Linux's smc_curs_diff() takes a cursor that went
 * back as no news); the caller keeps what it had. -1 for a lie.
 */
static int64_t prod_total(const struct cdc_rx_state *s, struct cdc_cursor prod)
{
	int64_t ahead =
		cdc_curs_sdiff(cdc_rx_curs_of(s->rx_cons_sent, s->rmb_len), prod, s->rmb_len);

	if (ahead > (int64_t)s->rmb_len || ahead <= -(int64_t)s->rmb_len ||
	    (int64_t)s->rx_cons_sent + ahead < 0)
		return -1;
	return (int64_t)s->rx_cons_sent + ahead;
}

/*
 * The peer's consumer cursor as a stream total: at most what we ever sent
 * (a failover may have rewound what we sent since), at least one RMB of
 * the peer's below it, and never below zero. -1 for a lie.
 */
static int64_t cons_total(const struct cdc_rx_state *s, struct cdc_cursor cons)
{
	uint64_t sent = s->tx_sent > s->tx_sent_max ? s->tx_sent : s->tx_sent_max;
	int64_t unread = cdc_ring_used(cdc_rx_curs_of(sent, s->peer_len), cons, s->peer_len);

	if (unread < 0 || (uint64_t)unread > sent)
		return -1;
	return (int64_t)(sent - (uint64_t)unread);
}

static void apply_flags(struct cdc_rx_state *s, const struct cdc_msg *m)
{
	s->peer_write_blocked = m->prod_flags & CDC_PF_WRITE_BLOCKED;
	if ((s->peer_write_blocked && s->rx_cons > s->rx_cons_sent) ||
	    (m->prod_flags & CDC_PF_CONS_CURS_UPD_REQ))
		s->cons_update_due = true;
	if (m->conn_state_flags & CDC_CS_PEER_DONE_WRITING)
		s->peer_done_writing = true;
	if (m->conn_state_flags & CDC_CS_PEER_CONN_CLOSED)
		s->peer_closed = true;
	if (m->conn_state_flags & CDC_CS_PEER_CONN_ABORT)
		s->peer_abort = true;
}

/*
 * EOF is held from the CDC that ends the peer's stream if that CDC says the
 * peer is blocked on our window, and ends with the first later CDC that
 * says it is not (cdc_rx.h). An abort ends the stream with an error: nothing
 * is held for it.
 */
static void apply_hold(struct cdc_rx_state *s, bool ended_before)
{
	if (s->peer_abort || !(s->peer_done_writing || s->peer_closed))
		s->eof_held = false;
	else if (!ended_before)
		s->eof_held = s->peer_write_blocked;
	else if (!s->peer_write_blocked)
		s->eof_held = false;
}

void cdc_rx_hold_end(struct cdc_rx_state *s)
{
	s->eof_held = false;
}

enum cdc_rx_verdict cdc_rx_apply(struct cdc_rx_state *s, const struct cdc_msg *m)
{
	bool ended = s->peer_done_writing || s->peer_closed;
	int64_t prod, cons;

	if (!cdc_curs_valid(m->prod, s->rmb_len) || !cdc_curs_valid(m->cons, s->peer_len))
		return CDC_RX_BAD_CURSOR;
	prod = prod_total(s, m->prod);
	if (prod < 0)
		return CDC_RX_BAD_PROD;
	cons = cons_total(s, m->cons);
	if (cons < 0)
		return CDC_RX_BAD_CONS;
	/* cursors are sequenced: one that went back is stale, not news */
	if ((uint64_t)prod > s->rx_prod) {
		if (ended && !s->eof_held)
			return CDC_RX_PROD_AFTER_DONE;
		if ((uint64_t)prod - s->rx_prod > s->rmb_len / 2)
			s->peer_fills_window = true;
		s->rx_prod = (uint64_t)prod;
	}
	if ((uint64_t)cons > s->peer_cons)
		s->peer_cons = (uint64_t)cons;
	/* what the peer consumed it had: a rewound sender goes on from there */
	if (s->peer_cons > s->tx_sent)
		s->tx_sent = s->peer_cons;
	apply_flags(s, m);
	apply_hold(s, ended);
	return CDC_RX_OK;
}
