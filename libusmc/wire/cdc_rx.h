/* SPDX-License-Identifier: MIT */
/*
 * What a received CDC message does to a connection's cursors and flags, as
 * a pure function (net/smc/smc_cdc.c smc_cdc_msg_recv_action() is the
 * kernel's counterpart). Cursors are 64-bit totals of each stream; the
 * message carries them as (wrap, count) and every value a peer sends is
 * checked against what it can honestly know before anything moves.
 *
 * Invariants that hold after every call, whatever the peer sends (the
 * stateful fuzzer fuzz_cdc_rx checks them):
 *   rx_cons <= rx_prod and rx_prod - rx_cons_sent <= rmb_len: the peer
 *     never has more than one RMB of data outstanding beyond the consumer
 *     cursor we told it, so nothing is read outside the RMB and the
 *     credit we compute (rmb_len - (rx_prod - rx_cons_sent)) never wraps;
 *   peer_cons <= tx_sent and tx_sent - peer_cons <= peer_len: the send
 *     window is never negative;
 *   an honest CDC (cons = tx_sent) always reopens the whole window: a lie
 *     costs the liar's connection, never a stall it cannot clear;
 *   eof_held only while the peer ended its stream (done writing or closed)
 *     and has not aborted, and once cdc_rx_eof() holds, rx_prod never moves
 *     again: data after the end the application was told of is refused.
 *
 * Held EOF: Linux's close gives up waiting for its send buffer when a
 * signal is pending (net/smc/smc_close.c smc_close_active() ->
 * smc_close_stream_wait()) and sends peer_conn_closed with the producer
 * cursor as it stands; when our consumer cursor opens the window its
 * receive path writes the rest after the close, close flag still set
 * (net/smc/smc_cdc.c smc_cdc_msg_recv_action() -> smc_tx_pending()). Linux
 * sets write_blocked at every write that fills our window (net/smc/smc_tx.c
 * smc_tx_rdma_writes(): to_send >= rmbespace) and keeps it until a write
 * that does not, so a stream that ends with the flag set may still have
 * data behind it: EOF waits (eof_held) and producer advances are taken,
 * within the window as ever, until a CDC comes without the flag (the
 * peer's last write took all it had) or the caller ends the hold
 * (cdc_rx_hold_end(): it asked and the peer had nothing, or its bound
 * passed). A usmc peer never sets the flag on the CDC that ends its
 * stream (it lingers until all is sent), so it never holds EOF.
 */
#ifndef USMC_CDC_RX_H
#define USMC_CDC_RX_H

#include <stdbool.h>
#include <stdint.h>

#include "cdc.h"

struct cdc_rx_state {
	uint32_t rmb_len;      /* our RMB: the peer writes into it */
	uint32_t peer_len;     /* the peer's RMB: we write into it */
	uint64_t rx_prod;      /* the peer has written up to here */
	uint64_t rx_cons;      /* the application consumed up to here */
	uint64_t rx_cons_sent; /* consumer cursor last told to the peer */
	uint64_t tx_sent;      /* RDMA-written to the peer up to here */
	/* the most ever written: a failover rewinds tx_sent below it to what
	 * the peer surely has (smcr_tx.c), and the peer may have taken more */
	uint64_t tx_sent_max;
	uint64_t peer_cons; /* the peer consumed up to here */
	bool peer_write_blocked, peer_done_writing, peer_closed, peer_abort;
	bool eof_held;	      /* the peer ended its stream while blocked: EOF waits */
	bool cons_update_due; /* the peer asked, or waits, for our consumer cursor */
	/* One CDC moved the producer by more than half our RMB: the peer writes
	 * all the window it has at once and then waits for credit (Linux does,
	 * net/smc/smc_tx.c smc_tx_rdma_writes()); a usmc peer pushes at most
	 * half per CDC. Sticky for the connection. */
	bool peer_fills_window;
};

/* Why cdc_rx_apply() refused a message. */
enum cdc_rx_verdict {
	CDC_RX_OK = 0,
	CDC_RX_BAD_CURSOR,	/* a cursor outside its ring */
	CDC_RX_BAD_PROD,	/* producer a ring behind or over a ring ahead of our cursor */
	CDC_RX_BAD_CONS,	/* consumer cursor ahead of what we ever sent, or below zero */
	CDC_RX_PROD_AFTER_DONE, /* data after the end of the peer's stream (not held) */
};

/*
 * A CDC with the failover-validation flag (CDC_PF_FAILOVER_VALIDATION):
 * after moving a connection to another link, a Linux peer sends one whose
 * seqno is that of the last CDC it saw complete, and no cursors (net/smc/
 * smc_cdc.c smcr_cdc_msg_send_validation()). It carries nothing to apply.
 * The connection is in sync unless the peer's last completed CDC is one
 * we never received (@seen: we received any, @rx_seq the newest): its
 * stream or credit then lost a CDC with the old link, and it must end, as
 * smc_cdc_msg_validate() ends it.
 */
static inline bool cdc_rx_failover_in_sync(bool seen, uint16_t rx_seq, uint16_t peer_seq)
{
	return !seen || !cdc_seq_before(rx_seq, peer_seq);
}

/* Apply @m to @s. On a refusal @s is unchanged: the connection must end. */
enum cdc_rx_verdict cdc_rx_apply(struct cdc_rx_state *s, const struct cdc_msg *m);

/* The peer's stream has ended and nothing is held back: a reader that took
 * everything up to rx_prod sees EOF. */
static inline bool cdc_rx_eof(const struct cdc_rx_state *s)
{
	return (s->peer_done_writing || s->peer_closed) && !s->eof_held;
}

/* The caller ends a held EOF (the peer had nothing more, or the bound
 * passed): from now on its producer cursor may not move. */
void cdc_rx_hold_end(struct cdc_rx_state *s);

/* The cursor of stream total @total on a ring of @size bytes. */
struct cdc_cursor cdc_rx_curs_of(uint64_t total, uint32_t size);

#endif
