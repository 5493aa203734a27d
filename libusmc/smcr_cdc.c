// SPDX-License-Identifier: MIT
/*
 * CDC receive (net/smc/smc_cdc.c smc_cdc_rx_handler(),
 * smc_cdc_msg_recv_action()): a CDC from the peer moves the cursors and
 * flags as wire/cdc_rx.h applies them, after it validated every cursor
 * against the ring sizes; then the send side, the held EOF and the waiting
 * threads are told. A CDC that comes before the CLC told us the peer's RMB
 * waits for smcr_conn_set_peer().
 */
#include <errno.h>

#include "cdc.h"
#include "cdc_rx.h"
#include "log.h"
#include "smcr_conn.h"
#include "smcr_conn_int.h"

/* Apply a CDC to sc; requires sc->lock. Returns false for a protocol
 * violation (sc unchanged: cdc_rx_apply() refuses before it moves anything). */
static bool sc_cdc_apply_locked(struct smcr_conn *sc, const struct cdc_msg *m)
{
	return cdc_rx_apply(&sc->rx, m) == CDC_RX_OK;
}

int smcr_conn_set_peer(struct smcr_conn *sc, const struct smcr_peer_rmb *peer)
{
	struct lgr *lgr = sc->lgr;
	int row;

	pthread_mutex_lock(&sc->lock);
	/* the RMB's row, for the link the connection sends on: found again
	 * when the peer's CONFIRM_RKEY brought it or the peer kept its rkey,
	 * else new (a first contact's) */
	row = lgr_rtoken_add(&lgr->rtok, sc->lnk_slot, peer->rkey, peer->dma_addr);
	if (row < 0) {
		pthread_mutex_unlock(&sc->lock);
		usmc_log(lgr->sctx->log, USMC_LOG_WARN,
			 "link group %x: the peer's RMBs fill its %d rtokens: connection %08x "
			 "cannot take rkey %08x",
			 lgr->id, LGR_RTOKEN_ROWS, sc->token, peer->rkey);
		return row;
	}
	sc->peer_rtok = row;
	sc->peer_token = peer->token;
	sc->peer_rkey = peer->rkey;
	sc->rx.peer_len = (uint32_t)smc_uncompress_bufsize(peer->size_class);
	/* RMBE index counts from 1 (Linux: always 1) */
	sc->peer_rmbe_off = (uint64_t)(peer->rmbe_idx - 1) * sc->rx.peer_len;
	sc->peer_rmb_addr = peer->dma_addr + sc->peer_rmbe_off;
	/* on a reused link group the peer's first CDC may beat its CLC CONFIRM */
	if (sc->early_valid) {
		sc->early_valid = false;
		sc->rx_seq = sc->early.seqno;
		sc->rx_seq_seen = true;
		if (!sc_cdc_apply_locked(sc, &sc->early)) {
			usmc_log(
				sc->lgr->sctx->log, USMC_LOG_WARN,
				"link group %x: peer broke the CDC rules on connection %08x: aborted",
				sc->lgr->id, sc->token);
			sc->aborting = true;
			sc_tx_push_locked(sc);
			if (!sc->err)
				sc->err = -EPROTO;
		}
		sc_eof_ask_locked(sc); /* it may have ended the stream while blocked */
	}
	pthread_mutex_unlock(&sc->lock);
	return 0;
}

void sc_cdc_rx(struct lgr *lgr, const uint8_t *buf, uint32_t len)
{
	struct smcr_conn *sc;
	struct cdc_msg m;
	bool drop_conn = false;

	if (cdc_decode(buf, len, &m)) {
		usmc_log(lgr->sctx->log, USMC_LOG_WARN,
			 "link group %x: malformed CDC message dropped (%u bytes)", lgr->id, len);
		return; /* as Linux: malformed CDC dropped */
	}
	sc = lgr_conn_get(lgr, m.token);
	if (!sc)
		return;
	pthread_mutex_lock(&sc->lock);
	if (m.prod_flags & CDC_PF_FAILOVER_VALIDATION) {
		/* no cursors to apply: only whether a CDC was lost */
		if (!sc->err && !cdc_rx_failover_in_sync(sc->rx_seq_seen, sc->rx_seq, m.seqno)) {
			usmc_log(lgr->sctx->log, USMC_LOG_WARN,
				 "link group %x: connection %08x lost CDC %u..%u with a link: "
				 "aborted",
				 lgr->id, sc->token, (unsigned int)(uint16_t)(sc->rx_seq + 1),
				 (unsigned int)m.seqno);
			sc->aborting = true;
			sc_tx_push_locked(sc);
			sc_fail_locked(sc, -ECONNABORTED);
			sc_wake_locked(sc, SC_RD | SC_WR);
			sc_update_ready_locked(sc);
		}
	} else if (!sc->rx.peer_len) {
		/* keep the newest; its cursors supersede older ones, flags add up */
		uint8_t fl = sc->early_valid ? sc->early.conn_state_flags : 0;

		if (!sc->early_valid || !cdc_seq_before(m.seqno, sc->early.seqno)) {
			sc->early = m;
			sc->early.conn_state_flags |= fl;
			sc->early_valid = true;
		}
	} else if (!sc->err && !(sc->rx_seq_seen && cdc_seq_before(m.seqno, sc->rx_seq))) {
		bool held = sc->rx.eof_held;
		uint64_t freed = sc_snd_free(sc);

		sc->rx_seq = m.seqno;
		sc->rx_seq_seen = true;
		if (sc_cdc_apply_locked(sc, &m)) {
			/* its cursors are news: none was lost with a link */
			sc_failover_unwatch_locked(sc);
			if (held != sc->rx.eof_held)
				usmc_log(lgr->sctx->log, USMC_LOG_DEBUG,
					 "connection %08x: EOF %s at %llu bytes", sc->token,
					 held ? "given, the peer is no longer blocked"
					      : "held, the peer ended its stream while blocked",
					 (unsigned long long)sc->rx.rx_prod);
			sc_eof_ask_locked(sc); /* or disarm: the hold ended */
			if (!sc->rx.peer_abort)
				sc_tx_push_locked(sc);
		} else {
			/* a lying peer costs only this connection */
			usmc_log(
				lgr->sctx->log, USMC_LOG_WARN,
				"link group %x: peer broke the CDC rules on connection %08x: aborted",
				lgr->id, sc->token);
			sc->aborting = true;
			sc_tx_push_locked(sc);
			sc_fail_locked(sc, -EPROTO);
			/* data past the peer's end of stream, say: the stream was
			 * not complete after all, so no reader may take EOF */
			sc->err_after_eof = false;
		}
		/* writers care about room the credit freed, and about the
		 * peer's close: sends fail then */
		sc_wake_locked(sc, sc->rx.peer_abort || sc->rx.peer_closed || sc->err ||
						   sc_snd_free(sc) > freed
					   ? SC_RD | SC_WR
					   : SC_RD);
		sc_update_ready_locked(sc);
	}
	/* an orphan still writing (smcr_close()) whose reader closed: the rest
	 * can never be read, so abort, as a close with it unsent would have */
	if (sc->keeps_tcp && sc->rx.peer_closed && !sc->aborting) {
		sc->aborting = true;
		sc_tx_push_locked(sc);
	}
	drop_conn = sc->orphan && (sc->rx.peer_closed || sc->rx.peer_abort || sc->err);
	if (sc->rx.peer_closed || sc->rx.peer_abort)
		smcr_eng_churn(&lgr->eng); /* its DELETE_RKEY follows */
	pthread_mutex_unlock(&sc->lock);
	if (drop_conn)
		lgr_conn_del(lgr, sc->token);
	smcr_conn_put(sc);
}
