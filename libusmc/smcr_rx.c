// SPDX-License-Identifier: MIT
/*
 * Receive (net/smc/smc_rx.c): the user's reads out of the RMB, and the
 * consumer cursor told back to the peer as credit (smc_tx.c
 * smc_tx_consumer_update()). And the held EOF (wire/cdc_rx.h): a peer
 * that closed while blocked on our window is asked for what it still
 * holds before the reader sees the end of the stream.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "cdc_rx.h"
#include "clock.h"
#include "log.h"
#include "smcr_conn.h"
#include "smcr_conn_int.h"
#include "smcr_ring.h"

/* ---- held EOF -------------------------------------------------------- */

/* Arm (again) the bound of a held EOF; requires sc->lock. */
static void sc_eof_arm_locked(struct smcr_conn *sc)
{
	if (!sc->eof_asked_ms)
		atomic_fetch_add(&sc->lgr->eof_holds, 1);
	sc->eof_asked_ms = clock_now_ms();
}

static void sc_eof_disarm_locked(struct smcr_conn *sc)
{
	if (sc->eof_asked_ms)
		atomic_fetch_sub(&sc->lgr->eof_holds, 1);
	sc->eof_asked_ms = 0;
	sc->eof_ask = false;
	sc->eof_barrier = 0;
}

/*
 * EOF is held (wire/cdc_rx.h) and the reader took everything: ask the peer
 * for what it still holds. Our consumer cursor opens the whole window and
 * carries CONS_CURS_UPD_REQ, on which Linux runs its send path
 * (net/smc/smc_cdc.c smc_cdc_msg_recv_action() -> smc_tx.c smc_tx_pending()),
 * writing what it has (a usmc peer answers with a CDC), and an LLC barrier
 * follows it (sc_eof_answer_locked()). Once per arrival of data: a peer
 * that writes more is asked again when that is read; the bound runs from
 * each question until data or the barrier's answer comes. Requires
 * sc->lock.
 */
void sc_eof_ask_locked(struct smcr_conn *sc)
{
	if (!sc->rx.eof_held) {
		if (sc->eof_asked_ms)
			sc_eof_disarm_locked(sc);
		return;
	}
	if (sc->rx.rx_cons != sc->rx.rx_prod) {
		/* data came since we asked: the bound waits only on a peer that
		 * says nothing, never on a slow reader (ended then, the hold
		 * would refuse what the peer still writes) */
		if (sc->eof_asked_ms)
			sc_eof_disarm_locked(sc);
		return;
	}
	if (sc->eof_asked && sc->eof_ask_prod == sc->rx.rx_prod)
		return;
	sc->eof_asked = true;
	sc->eof_ask_prod = sc->rx.rx_prod;
	sc->eof_ask = true;
	sc->eof_empty = false;
	if (!sc->eof_first_ask_ms)
		sc->eof_first_ask_ms = clock_now_ms();
	sc_eof_arm_locked(sc);
	sc_tx_push_locked(sc);
}

/* Give a held EOF; requires sc->lock. The progress thread's tick gives it
 * too, behind the token holder's back: a reader that holds the token
 * sleeps on the channel, not on its condition, and is kicked. */
static void sc_eof_give_locked(struct smcr_conn *sc, const char *why)
{
	cdc_rx_hold_end(&sc->rx);
	sc->eof_given_up = true;
	usmc_log(sc->lgr->sctx->log, USMC_LOG_DEBUG,
		 "connection %08x: held EOF given at %llu bytes: %s", sc->token,
		 (unsigned long long)sc->rx.rx_prod, why);
	sc_eof_disarm_locked(sc);
	sc_wake_locked(sc, SC_RD);
	sc_update_ready_locked(sc);
	smcr_eng_kick(&sc->lgr->eng);
}

/* When a held EOF whose barrier came back empty may be given. */
static long sc_eof_settle_due_ms(const struct smcr_conn *sc)
{
	return sc->eof_first_ask_ms + SMCR_EOF_SETTLE_MS;
}

/* The barrier behind the last question came back with nothing, and
 * SMCR_EOF_SETTLE_MS have passed since the first: the peer has nothing
 * more. Give EOF. Requires sc->lock; true if it did. */
static bool sc_eof_settle_locked(struct smcr_conn *sc, long now)
{
	if (!sc->rx.eof_held || !sc->eof_empty || sc->rx.rx_prod != sc->eof_ask_prod ||
	    now < sc_eof_settle_due_ms(sc))
		return false;
	sc_eof_give_locked(sc, "the barrier came back with nothing more");
	return true;
}

/* The bound of a held EOF passed: SMCR_EOF_HOLD_MS since the question with
 * no word from the peer (a late answer is still coming from a peer that
 * talks: smcr_llc_answer_waits()), or it settled (sc_eof_settle_locked()).
 * Give EOF. Requires sc->lock; true if it did. */
bool sc_eof_expire_locked(struct smcr_conn *sc, long now)
{
	if (sc_eof_settle_locked(sc, now))
		return true;
	if (!sc->eof_asked_ms ||
	    smcr_llc_answer_waits(now, sc->eof_asked_ms, lgr_last_rx_ms(sc->lgr)))
		return false;
	sc_eof_give_locked(sc, "no answer, and no word from the peer within the LLC wait");
	return true;
}

/*
 * The answer to LLC barrier @gen came: whatever the peer sent on our
 * questions before it has come too (smcr_llc_barrier()), unless the peer
 * deferred its send path (SMCR_EOF_SETTLE_MS). A connection that asked with
 * all read and got nothing since: the peer has nothing more, EOF once the
 * settle time has passed (Linux 6.12 sends nothing at all when it has
 * nothing to write, net/smc/smc_tx.c __smc_tx_sndbuf_nonempty(), and its
 * write_blocked flag stays set after a write that filled our window
 * exactly, so only this tells). One that got data: asked again once it is
 * read. Requires sc->lock.
 */
void sc_eof_answer_locked(struct smcr_conn *sc, uint32_t gen)
{
	if (sc->eof_barrier && (int32_t)(gen - sc->eof_barrier) >= 0) {
		sc->eof_barrier = 0;
		sc->eof_empty = sc->rx.rx_prod == sc->eof_ask_prod;
		if (!sc_eof_settle_locked(sc, clock_now_ms())) {
			sc_eof_ask_locked(sc);	   /* disarm, or ask again */
			sc_wake_locked(sc, SC_RD); /* to wait for the settle time */
		}
	}
}

/* ---- after a failover ------------------------------------------------ */

/* The spilled bytes are read: the buffer goes. Requires sc->lock. */
static void sc_spill_free_locked(struct smcr_conn *sc)
{
	free(sc->spill);
	sc->spill = NULL;
}

void sc_failover_unwatch_locked(struct smcr_conn *sc)
{
	if (sc->failover_ms)
		atomic_fetch_sub(&sc->lgr->failover_watches, 1);
	sc->failover_ms = 0;
}

/* Our send waits on the peer's window, and the peer's on ours as we told
 * it (it has written our whole RMB past the consumer cursor it knows). */
static bool sc_windows_shut(const struct smcr_conn *sc)
{
	return sc->tx_prep > sc->rx.tx_sent &&
	       sc->rx.tx_sent - sc->rx.peer_cons >= sc->rx.peer_len &&
	       sc->rx.rx_prod - sc->rx.rx_cons_sent >= sc->rx.rmb_len;
}

/*
 * Take the oldest SMCR_FAILOVER_SPILL unread bytes out of the RMB and tell
 * the peer their room (smcr_conn.h). The peer writes the next bytes of its
 * stream over their place in the ring; the reader takes them from the
 * spill. Only while no reader copies out of the RMB (rx_user): one that
 * copies with the lock dropped would read over the peer's writes. Requires
 * sc->lock; true if it did.
 */
static bool sc_spill_locked(struct smcr_conn *sc)
{
	uint64_t unread = sc->rx.rx_prod - sc->rx.rx_cons;
	uint64_t n = unread < SMCR_FAILOVER_SPILL ? unread : SMCR_FAILOVER_SPILL;

	if (sc->rx_user || sc->spill || !n)
		return false;
	sc->spill = malloc(n);
	if (!sc->spill)
		return false; /* the next tick tries again */
	smcr_ring_copy(sc->rmb->addr, sc->rx.rmb_len, sc->rx.rx_cons,
		       &(struct iovec){.iov_base = sc->spill, .iov_len = n}, 1, 0, n, false);
	sc->spill_start = sc->rx.rx_cons;
	sc->spill_end = sc->rx.rx_cons + n;
	sc->rx.cons_update_due = true;
	sc_tx_push_locked(sc);
	return true;
}

bool sc_failover_check_locked(struct smcr_conn *sc, long now)
{
	long since = now - sc->failover_ms;

	if (!sc->failover_ms)
		return false;
	if (sc->err || sc->aborting || sc->rx.peer_abort || since >= SMCR_FAILOVER_WATCH_MS) {
		sc_failover_unwatch_locked(sc);
		return false;
	}
	if (since < SMCR_FAILOVER_SETTLE_MS || !sc_windows_shut(sc) || !sc_spill_locked(sc))
		return false;
	usmc_log(sc->lgr->sctx->log, USMC_LOG_INFO,
		 "connection %08x: both ends wait on each other's window %ld ms after its "
		 "failover (the peer's consumer cursor went with the old link): %llu bytes "
		 "taken out of the RMB to open the peer's",
		 sc->token, since, (unsigned long long)(sc->spill_end - sc->spill_start));
	sc_failover_unwatch_locked(sc);
	return true;
}

/* ---- reading --------------------------------------------------------- */

/* Copy @n bytes of the stream from @pos into @iov past its first @skip:
 * those below spill_end from the spill, the rest from the RMB. With the
 * lock dropped: the reader's turn keeps the spill. */
static void sc_rx_copy_out(struct smcr_conn *sc, uint64_t pos, const struct iovec *iov, int iovcnt,
			   size_t skip, size_t n)
{
	if (sc->spill && pos < sc->spill_end) {
		size_t k = sc->spill_end - pos < n ? (size_t)(sc->spill_end - pos) : n;

		smcr_ring_copy(sc->spill, (uint32_t)(sc->spill_end - sc->spill_start),
			       pos - sc->spill_start, iov, iovcnt, skip, k, false);
		pos += k;
		skip += k;
		n -= k;
	}
	if (n)
		smcr_ring_copy(sc->rmb->addr, sc->rx.rmb_len, pos, iov, iovcnt, skip, n, false);
}

/* Tell the peer about consumed bytes when it matters (net/smc/smc_tx.c
 * smc_tx_consumer_update(), with smc_rx.c smc_rx_update_consumer()'s limit),
 * and in any case each quarter of the RMB consumed: credit goes back in
 * pieces, so a sender never idles a round trip per half RMB (Linux applies
 * any cursor update it receives, net/smc/smc_cdc.c smc_cdc_msg_recv_action()). */
static void sc_consumer_update_locked(struct smcr_conn *sc)
{
	uint64_t unconf = sc_rx_credit(sc) - sc->rx.rx_cons_sent;
	uint64_t limit = sc->rx.rmb_len / 10 > SMCR_CONS_UPDATE_MIN ? sc->rx.rmb_len / 10
								    : SMCR_CONS_UPDATE_MIN;
	uint64_t quarter = sc->rx.rmb_len / 4 > SMCR_CONS_UPDATE_MIN ? sc->rx.rmb_len / 4
								     : SMCR_CONS_UPDATE_MIN;
	uint64_t sender_free = sc->rx.rmb_len - (sc->rx.rx_prod - sc->rx.rx_cons_sent);

	if ((unconf > limit && (sender_free <= sc->rx.rmb_len / 2 || sc->rx.peer_write_blocked)) ||
	    unconf >= quarter) {
		sc->rx.cons_update_due = true;
		sc_tx_push_locked(sc);
	}
	sc_eof_ask_locked(sc); /* a held EOF: all read, ask for the rest */
}

/* How long a reader waits before it looks again: a second, or until the
 * bound of a held EOF (which a talking peer moves on). Requires sc->lock. */
static long sc_rd_wait_ms(const struct smcr_conn *sc)
{
	long left = 1000, now;

	if (!sc->eof_asked_ms && !sc->eof_empty)
		return left; /* the common case: no clock read */
	now = clock_now_ms();
	if (sc->eof_asked_ms)
		left = smcr_llc_answer_due_ms(sc->eof_asked_ms, lgr_last_rx_ms(sc->lgr)) - now + 1;
	if (sc->eof_empty && sc_eof_settle_due_ms(sc) - now + 1 < left)
		left = sc_eof_settle_due_ms(sc) - now + 1;
	return left < 1 ? 1 : left > 1000 ? 1000 : left;
}

/*
 * The most a read copies before it updates the consumer cursor. A peer that
 * writes our whole window per CDC (rx.peer_fills_window, Linux's sender)
 * then idles until credit comes back: copied a quarter RMB at a time, each
 * quarter is credited as soon as it is consumed (sc_consumer_update_locked()),
 * the peer writes its next quarter while we copy the rest, and the stream
 * settles into quarter-RMB CDCs that overlap the reader's copy instead of
 * whole windows in turn. A peer that pushes at most half per CDC (usmc's)
 * overlaps already; for it the extra credits only cost CDCs and writer
 * wake-ups (measured slower: docs/smcr.md "A sender that fills the
 * window").
 */
static size_t sc_rx_piece(const struct smcr_conn *sc, int flags)
{
	if (!sc->rx.peer_fills_window || (flags & MSG_PEEK))
		return SIZE_MAX;
	return sc->rx.rmb_len / 4;
}

/* Copy what the reader wants (@want more bytes into @iov after @done) of
 * the @avail bytes at its place in the RMB, one piece at most, and consume
 * them unless peeking. Requires sc->lock and the reader's turn; the copy
 * runs with the lock dropped (the peer writes none of those bytes until
 * they are consumed, and nobody else reads them). Returns how many. */
static size_t sc_rx_copy_locked(struct smcr_conn *sc, const struct iovec *iov, int iovcnt,
				int flags, size_t done, size_t want, uint64_t avail)
{
	size_t n = want, piece = sc_rx_piece(sc, flags);
	uint64_t pos = sc->rx.rx_cons + ((flags & MSG_PEEK) ? done : 0);

	if (n > avail)
		n = avail;
	if (n > piece)
		n = piece;
	pthread_mutex_unlock(&sc->lock);
	sc_rx_copy_out(sc, pos, iov, iovcnt, done, n);
	pthread_mutex_lock(&sc->lock);
	if (!(flags & MSG_PEEK)) {
		sc->rx.rx_cons += n;
		sc->sent_since_read = false;
		if (sc->spill && sc->rx.rx_cons >= sc->spill_end)
			sc_spill_free_locked(sc); /* read: the RMB has the rest */
		sc_consumer_update_locked(sc);
	}
	return n;
}

/* Nothing is there to read: the end of the stream (0), an error (< 0), or
 * neither (1: more may come). Requires sc->lock. */
static int sc_rx_nothing_locked(struct smcr_conn *sc)
{
	if (sc->rx.peer_abort)
		return -ECONNRESET;
	if (sc->err && !sc->err_after_eof)
		return sc->err;
	if (sc->rx.eof_held) {
		sc_eof_ask_locked(sc); /* asked already for this much: no-op */
		sc_eof_expire_locked(sc, clock_now_ms());
	}
	return cdc_rx_eof(&sc->rx) || sc->shut_rd ? 0 : 1;
}

/* smcr_recvv() with sc->lock and the reader's turn held; @cancel: the
 * caller's cancellation state. */
static ssize_t sc_recvv_locked(struct smcr_conn *sc, const struct iovec *iov, int iovcnt, int flags,
			       bool nonblock, int cancel)
{
	size_t total = smcr_iov_total(iov, iovcnt), done = 0;
	ssize_t rc = 0;
	bool polled = false;

	while (done < total) {
		uint64_t avail = sc->rx.rx_prod - sc->rx.rx_cons - ((flags & MSG_PEEK) ? done : 0);
		int more;

		if (avail) {
			size_t n = sc_rx_copy_locked(sc, iov, iovcnt, flags, done, total - done,
						     avail);

			done += n;
			if (n < avail)
				continue; /* one piece of what is here: on to the next */
			if (!(flags & MSG_WAITALL) || (flags & MSG_PEEK))
				break;
			continue;
		}
		more = sc_rx_nothing_locked(sc);
		if (more <= 0) {
			rc = more;
			break;
		}
		/* nothing here, and nobody may be running the completions */
		if (nonblock && !done && !polled && (polled = true) &&
		    smcr_eng_try_poll(&sc->lgr->eng, &sc->lock))
			continue;
		if (nonblock || (done && !(flags & MSG_WAITALL))) {
			rc = -EAGAIN;
			break;
		}
		sc_wait_locked(sc, SC_RD, sc_rd_wait_ms(sc));
		if (!done)
			sc_cancel_point_locked(sc, SC_RD, cancel);
	}
	if (done) /* data that comes after this read makes a new edge */
		sc->rd_read = true;
	sc_update_ready_locked(sc);
	if (done)
		return (ssize_t)done;
	return rc == -EAGAIN && !nonblock ? 0 : rc;
}

ssize_t smcr_recvv(struct smcr_conn *sc, const struct iovec *iov, int iovcnt, int flags,
		   bool nonblock)
{
	int cancel = sc_user_call_begin(sc, SC_RD, nonblock);
	ssize_t rc = sc_recvv_locked(sc, iov, iovcnt, flags, nonblock, cancel);

	sc_user_call_end(sc, SC_RD, cancel);
	return rc;
}
