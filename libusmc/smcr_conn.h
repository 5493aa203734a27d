/* SPDX-License-Identifier: MIT */
/*
 * One SMC-R connection's data path (net/smc/smc_tx.c, smc_rx.c, smc_cdc.c,
 * smc_close.c): the send buffer ring RDMA-written into the peer's RMB, CDC
 * messages carrying the cursors, close and abort, and the readiness of the
 * descriptor the user polls. The API object (struct usmc_conn, conn.h)
 * owns one of these once the handshake moved it onto SMC-R. Its files,
 * one per mechanism: smcr_conn_int.h.
 */
#ifndef USMC_SMCR_CONN_H
#define USMC_SMCR_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "cdc.h"
#include "cdc_rx.h"
#include "lgr.h"

/* SOCK_MIN_SNDBUF / 2 on x86-64 Linux: floor of the consumer update limit */
#define SMCR_CONS_UPDATE_MIN 2304
/* TCP hung up but no close CDC yet: an LLC barrier behind the hang-up
 * (sc_eof_check_locked()) tells a close still on its way from a dead peer;
 * this long without its answer and without a word from the peer, the peer
 * is taken for dead (smcr_llc_answer_waits()). */
#define SMCR_TCP_EOF_GRACE_MS SMCR_LLC_WAIT_MS
/* A connection's TCP socket joins the progress thread's epoll set only once
 * it has lived this long: a short-lived one costs no epoll_ctl() pair, and
 * a peer that dies earlier is found when it joins (epoll reports a hang-up
 * that happened before) or by TEST_LINK. */
#define SMCR_TCP_WATCH_DELAY_MS 1000

/* A held EOF (wire/cdc_rx.h: the peer closed while blocked on our window)
 * is given this long after we asked the peer for what it still holds (the
 * reader had taken everything) if neither data nor the answer to the LLC
 * barrier behind the question came, nor any word from the peer since: as
 * long as an LLC answer may take (SMC_LLC_WAIT_TIME; smcr_llc_answer_waits()). */
#define SMCR_EOF_HOLD_MS SMCR_LLC_WAIT_MS

/* A held EOF is given on the barrier's empty answer only once this long has
 * passed since the first question: a Linux peer that gets our question
 * while its closing process still owns the socket defers its send path to
 * release_sock() (net/smc/smc_cdc.c smc_cdc_msg_recv_action():
 * tx_in_release_sock; af_smc.c smc_release_cb()), and one whose send slots
 * are busy to its tx work (smc_tx.c smc_tx_sndbuf_nonempty()), while its
 * LLC work echoes the barrier at once. Only a Linux peer whose last write
 * filled our window exactly pays it, once, at its close. */
#define SMCR_EOF_SETTLE_MS 100

/* A connection we closed whose peer has been silent this long since (no
 * close CDC, nothing on the link) has its link group tested once
 * (TEST_LINK): a peer that died right after our close would otherwise
 * hold it until USMC_OPT_CLOSE_WAIT_MS or the keepalive (30 s). Our
 * close CDC and TEST_LINK then go unacknowledged (its QP went with its
 * process), or the TEST_LINK unanswered: the link fails, the link group
 * with its last link, and the connection with it. A live peer answers,
 * and the connection waits on. */
#define SMCR_ORPHAN_PROBE_MS SMCR_LLC_WAIT_MS

/*
 * After a failover, a CDC of the peer's may have gone with the old link,
 * and with it the consumer cursor that would have opened our send window.
 * Linux counts that cursor as told when it posts it (net/smc/smc_cdc.c
 * smc_cdc_msg_send(): rx_curs_confirmed), and sends its next one only from
 * its send path, which writes nothing while our RMB is full as it sees it
 * (smc_tx.c __smc_tx_sndbuf_nonempty()), nor on CONS_CURS_UPD_REQ (that
 * runs the same path). If our application waits on its send and the
 * peer's on ours, neither ever moves. So a connection is watched from its
 * switch until the peer's next CDC (which carries its consumer cursor), at
 * most SMCR_FAILOVER_WATCH_MS; found with both windows shut at least
 * SMCR_FAILOVER_SETTLE_MS after the switch, it takes SMCR_FAILOVER_SPILL
 * bytes out of the RMB into a buffer of its own (the reader takes them
 * from there) and tells the peer the room: any room runs Linux's send
 * path, whose CDC brings the cursor (smcr_rx.c sc_failover_check_locked()).
 */
#define SMCR_FAILOVER_SETTLE_MS 100
#define SMCR_FAILOVER_WATCH_MS	30000
#define SMCR_FAILOVER_SPILL	4096

struct bufpool_buf;

/* A connection's readiness as an event set's watch is told it
 * (smcr_conn_watch()). */
#define SMCR_READY_RD	 (1u << 0) /* a receive returns at once: data, EOF, error */
#define SMCR_READY_WR	 (1u << 1) /* a send returns at once: room, or an error */
#define SMCR_READY_RDHUP (1u << 2) /* nothing more will arrive (TCP's RCV_SHUTDOWN) */
#define SMCR_READY_ERR	 (1u << 3) /* an error, or the peer's abort */

/* Called under the connection's lock at each change of its readiness: it
 * may take only leaf locks and must not call back into the connection. */
typedef void (*smcr_watch_fn)(void *arg, unsigned state);

/* What the peer's ACCEPT or CONFIRM says about its RMB. */
struct smcr_peer_rmb {
	uint32_t token; /* its alert token: written into our CDCs */
	uint32_t rkey;
	uint64_t dma_addr; /* of the RMB */
	uint8_t rmbe_idx;  /* counts from 1 */
	uint8_t size_class;
};

struct smcr_conn {
	/* ---- the object (smcr_conn.c): set at creation, constant after */
	struct lgr *lgr;
	atomic_int refs;
	uint32_t token; /* ours: the peer writes it into its CDCs */
	struct bufpool_buf *rmb, *sndbuf;
	uint32_t snd_len;
	/* the handshake's: lgr->links_made as its CONFIRM_RKEY was built,
	 * the RMB's rkey_links once it is answered (smcr_clc.c) */
	unsigned int rkey_links;

	pthread_mutex_t lock; /* guards every block below (rx.rmb_len: set at creation) */
	bool in_hs; /* with lock: between smcr_conn_new() and establish/discard: a handshake hold */

	/*
	 * ---- the cursors, with lock: moved by a received CDC (smcr_cdc.c), by
	 * reads (smcr_rx.c) and by sends (smcr_tx.c).
	 * The cursors and flags a received CDC moves, as wire/cdc_rx.h applies
	 * them: the RMB sizes (rx.peer_len 0 until smcr_conn_set_peer()), the
	 * receive side's and the peer's consumer cursor as stream totals, the
	 * peer's flags. The send side's tx_sent is here too.
	 */
	struct cdc_rx_state rx;

	/* ---- CDC receive (smcr_cdc.c), with lock */
	/* the peer's RMB (smcr_conn_set_peer): where smcr_tx.c writes */
	uint32_t peer_token;
	/* its row in lgr->rtok (a handle, lgr_rtoken.h; 0 none): its rkey
	 * and address on each link. A stale handle (the peer deleted the
	 * rkey, the row went to another RMB) finds nothing. */
	int peer_rtok;
	uint64_t peer_rmbe_off; /* our RMBE's offset in the peer's RMB (its rmbe_idx) */
	/* the row's column for the link the connection sends on, copied:
	 * the data path reads these (plus the RMBE's offset in the address),
	 * and a connection that changes links copies them anew */
	uint64_t peer_rmb_addr;
	uint32_t peer_rkey;
	uint16_t rx_seq;
	bool rx_seq_seen;
	bool early_valid; /* a CDC came before the CLC told us the peer's RMB */
	struct cdc_msg early;

	/* ---- transmit (smcr_tx.c), with lock */
	/* the link group slot of the link it sends on (Linux: conn->lnk):
	 * the server's choice, the link of the QP the ACCEPT named for the
	 * client; moved by a failover */
	uint8_t lnk_slot;
	uint64_t tx_prep; /* copied into the send buffer; RDMA-written: rx.tx_sent */
	uint64_t tx_fin;  /* CDC completed (sc_snd_free(): or consumed by the peer) */
	uint16_t tx_seq;
	bool tx_pending;      /* something to send once send queue space frees */
	bool tx_resync;	      /* moved to another link: the next push sends a CDC */
	bool sent_since_read; /* sent since the last read took data: a read awaits a reply */

	/* ---- the ends of the stream, with lock: set by the user's calls
	 * (smcr_close.c) and by errors (smcr_ready.c sc_fail_locked()); the
	 * *_sent flags once smcr_tx.c told the peer */
	bool shut_wr, shut_wr_sent, shut_rd, closed, closed_sent, aborting, abort_sent;
	int err;	    /* sticky negative errno (LGR down, protocol error) */
	bool err_after_eof; /* err came after the peer's clean close: reads see EOF */

	/* ---- close (smcr_close.c), with lock */
	bool orphan;		 /* smcr_close() done: freed when the peer closes */
	long orphan_deadline_ms; /* ... or aborted then (USMC_OPT_CLOSE_WAIT_MS) */
	long orphan_ms;		 /* smcr_close() then */
	bool orphan_probed;	 /* its link group tested (SMCR_ORPHAN_PROBE_MS) */
	/* the TCP socket (smcr_close.c), with lock */
	int tcp_fd;	      /* watched for the peer's death; -1 once closed */
	bool keeps_tcp;	      /* closed with data unsent: tcp_fd is ours to close
				 once the close CDC is out (sc_tcp_release_locked()) */
	bool tcp_watched;     /* tcp_fd is in the progress thread's epoll set */
	long tcp_watch_ms;    /* ... from then on (SMCR_TCP_WATCH_DELAY_MS) */
	long tcp_eof_ms;      /* the TCP socket hung up then (0: not) */
	uint32_t hup_barrier; /* the smcr_llc_barrier() behind the hang-up, 0 none */

	/* ---- a held EOF (rx.eof_held; smcr_rx.c), with lock: asking the peer
	 * for what it still holds */
	bool eof_ask;	/* the next CDC asks: CONS_CURS_UPD_REQ */
	bool eof_asked; /* asked with rx.rx_prod at eof_ask_prod */
	uint64_t eof_ask_prod;
	uint32_t eof_barrier;  /* the smcr_llc_barrier() behind the question, 0 none */
	long eof_asked_ms;     /* the held EOF's question went then (SMCR_EOF_HOLD_MS), 0 none */
	long eof_first_ask_ms; /* the held EOF's first question went then (SMCR_EOF_SETTLE_MS) */
	bool eof_empty;	       /* the barrier came back with nothing since the last question */
	/* we gave the held EOF ourselves (its bound passed, or it settled),
	 * not a CDC of the peer's that says it is no longer blocked: the
	 * peer may still write what it holds (sc_rmb_may_be_written()) */
	bool eof_given_up;

	/* ---- after a failover (smcr_rx.c sc_failover_check_locked()), with
	 * lock */
	long failover_ms; /* switched links then, watched (lgr->failover_watches); 0 not */
	/* bytes [spill_start, spill_end) of the peer's stream, taken out of
	 * the RMB while both windows were shut: the reader's next bytes come
	 * from here, the RMB's from spill_end on; NULL none */
	uint8_t *spill;
	uint64_t spill_start, spill_end;

	/* ---- the user's calls (smcr_ready.c sc_user_enter_locked()), with
	 * lock: one reader and one writer at a time, as TCP's socket lock
	 * serialises them, but not by holding the lock: they copy with it
	 * dropped, and give their turn back while they wait. Another one of
	 * the same kind waits on user_cond. */
	bool rx_user, tx_user;
	int user_waiters;
	pthread_cond_t user_cond;

	/* ---- readiness (smcr_ready.c), with lock */
	/* readers' and writers' conditions (a send completion wakes only
	 * writers), and how many threads wait in the engine for each */
	pthread_cond_t rcond, wcond;
	int rwaiters, wwaiters;
	/* the user polls ev[0] (see docs/smcr.md); created by the first
	 * smcr_conn_fd(), -1 until then: nobody pays for it unasked */
	int ev[2];
	bool ev_looped; /* its poller runs the completions: not in eng.fd_users */
	bool rd_sig, wr_blocked_sig;
	int rd_bytes;	       /* bytes written ev[1] -> ev[0] for readability: edges */
	uint64_t rd_edge_prod; /* rx.rx_prod at the last edge */
	bool rd_read;	       /* the user read since the last edge */
	bool rdhup_sig;	       /* ev[1]'s write side is shut down: EPOLLRDHUP on ev[0] */
	bool hup_sig;	       /* its read side too: EPOLLHUP on ev[0] */
	bool ev_fill_small;    /* ev[0]'s SO_SNDBUF is down to the minimum: a fill is short */
	/* an event set's watch (smcr_conn_watch()), instead of ev[]: told
	 * the state (SMCR_READY_*) at each change, under lock */
	smcr_watch_fn watch_fn;
	void *watch_arg;
	unsigned watch_state; /* what watch_fn was told last */
	bool watch_room;      /* counted in eng.room_waiters: the send buffer is full */
};

/* The consumer cursor we tell the peer: what the reader consumed, or
 * past it what was spilled out of the RMB. Requires sc->lock. */
static inline uint64_t sc_rx_credit(const struct smcr_conn *sc)
{
	return sc->spill_end > sc->rx.rx_cons ? sc->spill_end : sc->rx.rx_cons;
}

/*
 * Test hook, weak and undefined in the library: a test program that defines
 * it runs it in smcr_close() between taking the connection out of its link
 * group's table and dropping its last reference, the window in which the
 * link group may die and be freed.
 */
void smcr_test_hook_close_put(void) __attribute__((weak));

/* The link group's view of its connections (lgr.h). */
extern const struct lgr_conn_ops smcr_conn_lgr_ops;

/*
 * smcr_conn_new() - a connection on @lgr with an RMB of @rmb_size and a
 * send buffer of @snd_size (rounded to a size class), in @lgr's table.
 */
int smcr_conn_new(struct lgr *lgr, size_t rmb_size, size_t snd_size, struct smcr_conn **out);
/* The link group slot of the link @sc sends on (a failover may move it). */
int smcr_conn_link_slot(struct smcr_conn *sc);
/* A client's connection sends on the link in @slot: the one whose QP the
 * server's ACCEPT named. Before its peer RMB is known. */
void smcr_conn_use_link(struct smcr_conn *sc, int slot);
/* Drop a reference; the last one frees (and returns the buffers). */
void smcr_conn_put(struct smcr_conn *sc);
/* Undo smcr_conn_new() of a handshake that failed: out of the table, freed. */
void smcr_conn_discard(struct smcr_conn *sc);
/*
 * smcr_rkey_forget() - tell the peer of @lgr to forget @rkey of our RMB
 * (DELETE_RKEY, on an active link group), as Linux does when it frees one
 * (net/smc/smc_core.c smcr_buf_unuse() -> smc_llc_do_delete_rkey()). The
 * caller holds a reference on @lgr.
 */
void smcr_rkey_forget(struct lgr *lgr, uint32_t rkey);
/*
 * smcr_conn_set_peer() - the peer's RMB, from its CLC message: its row in
 * the link group's rtokens (added, or found again) and the copy for the
 * connection's link; applies a CDC that came first. -ENOSPC, nothing
 * changed, when the link group knows LGR_RTOKEN_ROWS other peer RMBs
 * already (the handshake declines: SMC_CLC_DECL_ERR_RTOK).
 */
int smcr_conn_set_peer(struct smcr_conn *sc, const struct smcr_peer_rmb *peer);
/* The handshake is done: watch @tcp_fd for the peer's death (from
 * SMCR_TCP_WATCH_DELAY_MS on), publish readiness. */
void smcr_conn_establish(struct smcr_conn *sc, int tcp_fd);

/* The descriptor the user polls (readable/writable like a socket),
 * created at the first call; a negative errno if it cannot be. */
int smcr_conn_fd(struct smcr_conn *sc);

/*
 * smcr_conn_fd_loop() - whoever polls the descriptor runs the completions
 * (@on: an event loop attached to the engine, usmc_conn_watch() with
 * USMC_EV_FD; the descriptor is made if it was not), or the library's
 * progress thread must (!@on, the default): the descriptor counts in
 * eng.fd_users only then. Returns 0 or a negative errno (making it).
 */
int smcr_conn_fd_loop(struct smcr_conn *sc, bool on);

/*
 * smcr_conn_watch() - tell @fn(@arg, SMCR_READY_* bits) the connection's
 * readiness now and at each change, instead of a descriptor (@fn NULL:
 * no longer; once it returns, @fn is not running and will not be called).
 * Who runs the completions meanwhile is the watcher's to arrange: an event
 * loop attaches to the engine (smcr_eng_loop_attach(), docs/smcr.md
 * "Without a descriptor"). A full send buffer counts in room_waiters.
 */
void smcr_conn_watch(struct smcr_conn *sc, smcr_watch_fn fn, void *arg);

/* The engine that runs the connection's completions (its link group's). */
static inline struct smcr_eng *smcr_conn_eng(struct smcr_conn *sc)
{
	return &sc->lgr->eng;
}

/* Where the stream's bytes stand: usmc_conn_info's snd_unsent onwards. */
void smcr_conn_flow_info(struct smcr_conn *sc, struct usmc_conn_info *info);

/* The user's calls; @nonblock: the connection's or MSG_DONTWAIT. */
ssize_t smcr_sendv(struct smcr_conn *sc, const struct iovec *iov, int iovcnt, bool nonblock);
ssize_t smcr_recvv(struct smcr_conn *sc, const struct iovec *iov, int iovcnt, int flags,
		   bool nonblock);
int smcr_shutdown(struct smcr_conn *sc, int how);
/*
 * Close (lingering up to @linger_ms for unsent data) or abort; consumes @sc.
 * A peer that has not closed within @close_wait_ms is aborted. Data still
 * unsent after the linger goes on to a live peer after the call, the close
 * CDC behind it (Linux too writes the rest after its close,
 * net/smc/smc_close.c smc_close_active()): true then, and the TCP socket
 * given at smcr_conn_establish() is the connection's, shut down and closed
 * once that CDC is out; false: the caller shuts it down and closes it.
 */
bool smcr_close(struct smcr_conn *sc, bool abort, long linger_ms, long close_wait_ms);

#endif
