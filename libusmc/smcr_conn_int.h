/* SPDX-License-Identifier: MIT */
/*
 * The data path's own declarations, shared by its files and by no one
 * else (the library's interface to a connection is smcr_conn.h). One file
 * per mechanism, as Linux's net/smc; each calls only those listed before it:
 *
 *   smcr_conn.c      the object: life cycle, references, the RMB's release
 *   smcr_ready.c     readiness: the waiting threads and their turns, the
 *                    user's descriptor, cancellation
 *   smcr_tx.c        transmit: RDMA WRITEs and their CDC, smcr_sendv()
 *   smcr_rx.c        receive: smcr_recvv(), credit, the held EOF
 *   smcr_cdc.c       CDC receive: a peer's CDC applied
 *   smcr_close.c     close, the orphan; the TCP socket, the peer's death
 *   smcr_conn_lgr.c  the link group's calls, handed to the above
 *
 * Each file owns its block of struct smcr_conn's fields (smcr_conn.h), all
 * guarded by smcr_conn.lock; a function named *_locked() requires it.
 */
#ifndef USMC_SMCR_CONN_INT_H
#define USMC_SMCR_CONN_INT_H

#include <stdbool.h>
#include <stdint.h>

/* Declared, not included (smcr_conn.h, lgr.h): smcr_conn.c, which every
 * file here calls, includes this header too, and calls none of theirs. */
struct lgr;
struct smcr_conn;
struct smcr_tx_pend;

/* ---- the object (smcr_conn.c) ---------------------------------------- */

/* The link group's call (struct lgr_conn_ops): take a reference. */
void sc_get(struct smcr_conn *sc);
/*
 * A connection closed with data unsent kept its TCP socket until its close
 * (or abort) CDC went out: shut it down and close it now. Requires sc->lock
 * (or the last reference).
 */
void sc_tcp_release_locked(struct smcr_conn *sc);
/* The handshake is over (established or discarded): drop its hold. A
 * discarded one may leave a flow of the peer's running: @churn. */
void sc_hs_done(struct smcr_conn *sc, bool churn);
/* Can the peer still RDMA-write into @sc's RMB? Then its release re-keys
 * it (a late write must not land in the next connection's ring). */
bool sc_rmb_may_be_written(const struct smcr_conn *sc);

/* ---- readiness and waits (smcr_ready.c) ------------------------------ */

/* What a wait waits for (sc_wait_locked()), and whom a wake wakes
 * (sc_wake_locked(): SC_RD, SC_WR or both) */
#define SC_RD	  1 /* readers: data, EOF, errors */
#define SC_WR	  2 /* writers: room in the send buffer, errors */
#define SC_LINGER 3 /* close: everything sent has completed */
#define SC_POSTED 4 /* close: its CDC posted (a wait, woken as writers are) */

/* The send side's state, as readiness reads it: where the send buffer is
 * free again up to, the room it has; the close (or abort) CDC is on the
 * wire, or never will be. */
uint64_t sc_snd_free(const struct smcr_conn *sc);
uint64_t sc_snd_room(const struct smcr_conn *sc);
bool sc_close_posted(const struct smcr_conn *sc);
/* Publish readiness on the user's descriptor and to an event set's watch;
 * requires sc->lock, after every state change. */
void sc_update_ready_locked(struct smcr_conn *sc);
/* The watch (smcr_conn_watch()) goes, with what it counted in the engine;
 * requires sc->lock (or the last reference). */
void sc_watch_drop_locked(struct smcr_conn *sc);
/* Wake the threads waiting on @sc for @what; requires sc->lock. */
void sc_wake_locked(struct smcr_conn *sc, int what);
/* A sticky error @err (0: none, readiness published all the same): every
 * waiter woken; requires sc->lock. sc_fail() takes it, and says whether
 * @sc is an orphan (smcr_close() done). */
void sc_fail_locked(struct smcr_conn *sc, int err);
bool sc_fail(struct smcr_conn *sc, int err);
/*
 * The user's turn in @sc's receive (SC_RD) or send (SC_WR): one thread of
 * each kind at a time, which copies between the user's buffer and the ring
 * with sc->lock dropped (a copy of up to a ring's size must not hold up
 * the link group's dispatch, which takes that lock). Taken and given back
 * with sc->lock held.
 */
void sc_user_enter_locked(struct smcr_conn *sc, int what);
void sc_user_leave_locked(struct smcr_conn *sc, int what);
/* Wait at most @ms for what @what needs, running the link group's
 * completions meanwhile; requires sc->lock, which it drops meanwhile. A
 * reader's or writer's turn (SC_RD, SC_WR) is given back meanwhile, as TCP
 * releases its socket lock while it waits (sk_wait_event()). */
void sc_wait_locked(struct smcr_conn *sc, int what, long ms);

/*
 * Cancellation. The data path holds its connection's lock across system
 * calls that are cancellation points (the readiness pair's reads and
 * writes, the engine's kicks and sleeps), and a waiter holds the engine's
 * token or a queue entry on its stack: a thread cancelled in there would
 * leave them behind. So the user's calls run with cancellation disabled
 * (sc_cancel_off() .. sc_cancel_restore()), and a blocking receive or send
 * that has moved nothing yet is a cancellation point only where it holds
 * nothing: when it starts, and each time a wait ends
 * (sc_cancel_point_locked()).
 */
int sc_cancel_off(void);
void sc_cancel_restore(int old);
/* A pending cancellation is acted on here if @old (the caller's state)
 * allows it; requires sc->lock, which it drops meanwhile, and gives back
 * the caller's turn @what (SC_RD, SC_WR; 0: none held) meanwhile. */
void sc_cancel_point_locked(struct smcr_conn *sc, int what, int old);
/*
 * A user's receive (@what SC_RD) or send (SC_WR) begins: cancellation
 * off, sc->lock taken, a blocking call's first cancellation point, the
 * user's turn. Returns the caller's cancellation state, which the call's
 * loop and sc_user_call_end() take; the end gives all of it back.
 */
int sc_user_call_begin(struct smcr_conn *sc, int what, bool nonblock);
void sc_user_call_end(struct smcr_conn *sc, int what, int cancel);

/* ---- transmit (smcr_tx.c) -------------------------------------------- */

/* The link @sc sends on; requires sc->lock (a failover moves it). */
struct smcr_link *sc_link_locked(struct smcr_conn *sc);
/* The link group's call (struct lgr_conn_ops): the link in slot @from
 * failed; move @sc to slot @to if it sends on @from. */
bool sc_switch_link(struct smcr_conn *sc, int from, int to);

/* Send what the window allows, each piece with its CDC, if there is
 * anything to say; requires sc->lock. */
void sc_tx_push_locked(struct smcr_conn *sc);
/* The link group's calls (struct lgr_conn_ops): a CDC's send completed;
 * send queue space freed for the connections that waited for it. */
void sc_tx_done(struct lgr *lgr, const struct smcr_tx_pend *p);
void sc_kick_pending(struct lgr *lgr);

/* ---- receive, the held EOF (smcr_rx.c) ------------------------------- */

/* A held EOF and the reader took everything: ask the peer for what it still
 * holds (or disarm the bound: the hold ended); requires sc->lock. */
void sc_eof_ask_locked(struct smcr_conn *sc);
/* The bound of a held EOF passed, or it settled: give EOF. Requires
 * sc->lock; true if it did. */
bool sc_eof_expire_locked(struct smcr_conn *sc, long now);
/* The answer to LLC barrier @gen came: a held EOF's question may have its
 * answer. Requires sc->lock. */
void sc_eof_answer_locked(struct smcr_conn *sc, uint32_t gen);
/*
 * After a failover (smcr_conn.h SMCR_FAILOVER_SPILL): the progress
 * thread's tick spills out of the RMB when both windows are shut (true if
 * it did), or ends the watch when it ran out; the peer's next CDC ends it
 * (sc_failover_unwatch_locked()). Both require sc->lock.
 */
bool sc_failover_check_locked(struct smcr_conn *sc, long now);
void sc_failover_unwatch_locked(struct smcr_conn *sc);

/* ---- CDC receive (smcr_cdc.c) ---------------------------------------- */

/* The link group's call (struct lgr_conn_ops): a CDC of @len bytes came. */
void sc_cdc_rx(struct lgr *lgr, const uint8_t *buf, uint32_t len);

/* ---- close, the TCP socket (smcr_close.c) ---------------------------- */

/* The progress thread's tick (all require sc->lock): a closed connection
 * whose peer did not close in time (true: out of the link group's table);
 * one whose peer fell silent; a TCP socket due to be watched; a hang-up
 * without a close CDC (true while its barrier's answer is awaited). */
bool sc_orphan_expired_locked(struct smcr_conn *sc, long now);
void sc_orphan_probe_locked(struct smcr_conn *sc, long now);
bool sc_watch_due_locked(struct smcr_conn *sc, long now);
bool sc_eof_check_locked(struct smcr_conn *sc, long now);
/* The answer to LLC barrier @gen came: a hang-up's may be it. Requires
 * sc->lock. */
void sc_hup_answer_locked(struct smcr_conn *sc, uint32_t gen);
/* The link group's calls (struct lgr_conn_ops): it died (true: @sc is an
 * orphan); the TCP socket of connection @token hung up. */
bool sc_lgr_dead(struct smcr_conn *sc, int err);
void sc_tcp_hup(struct lgr *lgr, uint32_t token);

#endif
