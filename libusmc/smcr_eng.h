/* SPDX-License-Identifier: MIT */
/*
 * Who runs a link's completions (docs/smcr.md "Run to completion"): a
 * thread about to block in the data path polls the link's CQs itself and
 * dispatches what it finds, spins a little, then arms the receive CQ,
 * polls once more and sleeps on the completion channel. One thread at a
 * time holds that right (the token); the others wait on their
 * connection's condition and are handed the token when its holder is done.
 * The progress thread holds the token only while somebody needs
 * completions run without waiting for them (a readiness descriptor in use,
 * an LLC flow, a send that found the queue full, a link in its
 * handshake), and otherwise drains the CQs at its timer tick. Whoever
 * sleeps arms the send CQ only on demand (smcr_eng_scq_demand_locked()):
 * a send completion nobody waits for wakes nobody.
 *
 * An engine knows its link (smcr_link.h) and nothing above: the link group
 * that owns both hands it the progress thread's eventfd and its options.
 *
 * Lock order: a connection's lock -> smcr_eng.lock; the token holder
 * dispatches with no engine lock held.
 */
#ifndef USMC_SMCR_ENG_H
#define USMC_SMCR_ENG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "smcr_link.h"

enum smcr_eng_owner {
	ENG_FREE, /* nobody polls: the next thread that waits takes it */
	ENG_APP,  /* an application thread (in usmc_recv/send/close) */
	ENG_PROG, /* the progress thread */
};

/* A thread waiting on its connection's condition while another one holds
 * the token (on the waiter's stack, in smcr_eng.waiters). */
struct smcr_eng_waiter {
	pthread_mutex_t *mu;
	pthread_cond_t *cond;
	bool handed;  /* the token is now the waiter's (under smcr_eng.lock) */
	bool passing; /* the hander still uses mu and cond: the waiter may not leave */
	struct smcr_eng_waiter *next;
};

/* What an engine runs on, fixed at smcr_eng_init(). */
struct smcr_eng_setup {
	/* the link group's first link: the engine runs its completions from
	 * the start, and counts in its counters (up.st, shared by the links
	 * of a link group) */
	struct smcr_link *lnk;
	int progress_fd; /* eventfd: wakes the progress thread (its owner's) */
	bool spin;	 /* USMC_OPT_SPIN: a wait for a reply spins first */
	bool busy_poll;	 /* USMC_OPT_BUSY_POLL: an owner never sleeps */
};

struct smcr_eng {
	struct smcr_eng_setup set; /* fixed */

	pthread_mutex_t lock; /* protects the fields up to 'atomics' */
	int owner;	      /* enum smcr_eng_owner */
	bool owner_sleeping;  /* the application owner sleeps on the channel */
	bool prog_scq_off;    /* the progress thread owns and sleeps, send CQ unarmed */
	struct smcr_eng_waiter *waiters, **waiters_tail; /* FIFO */
	int scq_wanted; /* waiters that need send completions (room, linger) */

	/* atomics */
	atomic_int fd_users;	    /* connections whose readiness descriptor exists */
	atomic_int room_waiters;    /* of those, the ones whose descriptor shows no room */
	atomic_int holds;	    /* smcr_eng_hold(): completions must run at once */
	atomic_long churn_until_ms; /* connections come and go: drain often until then */
	int kick_fd;		    /* eventfd: wakes the application owner's sleep */
	/*
	 * The links it runs besides the first (set.lnk, slot 0), by their
	 * link group slot (smcr_eng_link()): smcr_eng_link_add() publishes one
	 * at any time, smcr_eng_link_del() takes it back only while its caller
	 * holds the token, so nobody else polls, arms or sleeps on it then.
	 */
	_Atomic(struct smcr_link *) lnk[SMCR_LINKS_MAX];
	/*
	 * An event loop runs the completions (smcr_eng_loop_attach(), event.c):
	 * each link's channel sits in its epoll set (edge-triggered), whoever
	 * lets the token go leaves the CQs armed, and a loop that found the
	 * token taken (poke) is kicked when it goes free.
	 */
	atomic_bool looped;	      /* loop_users > 0 */
	int loop_users;		      /* under lock: watched connections */
	int loop_epfd;		      /* under lock: the loop's epoll set */
	int loop_kick_fd;	      /* under lock: its eventfd, written to run us */
	void *loop_tag;		      /* under lock: epoll data of the channels */
	int loop_reg[SMCR_LINKS_MAX]; /* under lock: channel fd registered per slot, or -1 */
	bool loop_poke;		      /* under lock: the loop found the token taken */

	/* the token holder's only */
	bool rcq_armed[SMCR_LINKS_MAX], scq_armed[SMCR_LINKS_MAX];
	int64_t avg_wait_ns; /* moving average of an application wait */
	int64_t spin_cap_ns; /* the longest spin (smcr_spin_cap_ns()), set at init */
};

/* The link in link group slot @slot if the engine runs it, else NULL. */
static inline struct smcr_link *smcr_eng_link(struct smcr_eng *e, int slot)
{
	return slot == 0 ? e->set.lnk : atomic_load_explicit(&e->lnk[slot], memory_order_acquire);
}

/* A predicate on the waiter's state, evaluated with its lock taken by the callee. */
typedef bool (*smcr_eng_ready_fn)(void *arg);

int smcr_eng_init(struct smcr_eng *e, const struct smcr_eng_setup *set);
void smcr_eng_fini(struct smcr_eng *e);

/* What a wait is for (smcr_eng_wait() @how). */
#define SMCR_WAIT_SCQ	(1u << 0) /* send completions: room in the send buffer, linger */
#define SMCR_WAIT_REPLY (1u << 1) /* the answer to what this connection sent: worth a spin */

/*
 * smcr_eng_wait() - wait until @ready(@arg) holds or @deadline_ms passes,
 * running @e's link's completions meanwhile. Called and returns with @mu (the
 * connection's lock) held; @cond is the condition the connection signals
 * for this kind of waiter; @how: SMCR_WAIT_* flags. Only a wait for a
 * reply spins before it sleeps: a reader of a stream, or a writer waiting
 * for room, would spin on the CPU that the peer's and rxe's work needs. May
 * return early (spuriously): the caller checks its state again. Not to be
 * cancelled (the token, or a queue entry on the caller's stack, would
 * outlive the thread): its callers run with cancellation disabled
 * (smcr_conn_int.h).
 */
void smcr_eng_wait(struct smcr_eng *e, pthread_mutex_t *mu, pthread_cond_t *cond,
		   smcr_eng_ready_fn ready, void *arg, unsigned how, long deadline_ms);

/*
 * smcr_eng_try_poll() - a non-blocking call found nothing: run what the CQs
 * hold if nobody else does (the token is free), without sleeping. Called
 * and returns with @mu held. True if it polled.
 */
bool smcr_eng_try_poll(struct smcr_eng *e, pthread_mutex_t *mu);

/*
 * A connection's state changed outside the token holder's dispatch (an
 * error, a shutdown): wake the owner if it sleeps on the channel. Requires
 * the connection's lock (or none).
 */
void smcr_eng_kick(struct smcr_eng *e);

/* Completions must run without anybody waiting for them (an LLC flow, a
 * send that found the queue full): the progress thread takes the token. */
void smcr_eng_hold(struct smcr_eng *e);
void smcr_eng_unhold(struct smcr_eng *e);
/* The same while the caller needs it once (a full send queue). */
void smcr_eng_want_progress(struct smcr_eng *e);
/*
 * Connections are coming or going (created, closed, the peer's close seen,
 * an LLC request of the peer answered): the peer's LLC requests
 * (CONFIRM_RKEY, DELETE_RKEY, which Linux waits for) may come while nobody
 * waits in the library, so for SMCR_ENG_CHURN_MS the progress thread holds
 * the token whenever no application thread does, and sleeps on the channel.
 */
#define SMCR_ENG_CHURN_MS 200
void smcr_eng_churn(struct smcr_eng *e);
bool smcr_eng_churning(struct smcr_eng *e, long now_ms);

/* ---- the progress thread's side (its owner's, lgr.c) ---- */

/* True if the progress thread should own the token now. */
bool smcr_eng_progress_needed(struct smcr_eng *e);
/* Take the token if it is free and needed (@force: free for a tick's
 * drain); true if the progress thread holds it now. */
bool smcr_eng_progress_take(struct smcr_eng *e, bool force);
/* Give the token up if nobody needs the progress thread: to the first
 * waiter, or free. True if it was given up. */
bool smcr_eng_progress_release(struct smcr_eng *e, bool force);

/*
 * Arm before the progress thread sleeps: the receive CQ always, the send CQ
 * only if somebody needs send completions run as they come
 * (smcr_eng_scq_demand()); otherwise they wait for the next drain (a
 * receive, the tick), and a request, a response and a close cost no
 * wake-up each for their own completion.
 */
void smcr_eng_progress_arm(struct smcr_eng *e);
/* A busy-polling progress thread that found nothing: offers its CPU every
 * so often (*@last_ns: when it last did), as an application busy-poller
 * does once its reply is late (docs/smcr.md "Busy-polling on shared CPUs"). */
void smcr_eng_progress_busy_idle(struct smcr_eng *e, int64_t *last_ns);

/*
 * Send completions are needed as they come: a writer or a linger waits
 * (scq_wanted), data waits for room in the send queue (any_pending), or a
 * readiness descriptor shows a full send buffer (room_waiters). Requires
 * smcr_eng.lock.
 */
bool smcr_eng_scq_demand_locked(struct smcr_eng *e);
/* That demand rose from nothing: wake an owner asleep without the send CQ. */
void smcr_eng_scq_demand_raised(struct smcr_eng *e);

/* Poll each link's CQs once and dispatch (the token holder only); returns how many. */
int smcr_eng_poll(struct smcr_eng *e);
/* Poll each link's CQs until they are empty (the token holder only). */
int smcr_eng_drain(struct smcr_eng *e);
/* Arm each link's receive CQ (and send CQ if @scq) unless armed (token holder). */
void smcr_eng_arm(struct smcr_eng *e, bool scq);
/* Consume one event of the channel of the link in @slot (token holder);
 * false if none was pending. */
bool smcr_eng_get_event(struct smcr_eng *e, int slot);

/*
 * The event loop's side (event.c, docs/events.md): an event loop that
 * watches connections of this engine runs its completions in its own
 * thread. smcr_eng_loop_attach() for each watched connection (the first
 * one records the loop's epoll set @epfd, its eventfd @kick_fd and @tag,
 * the epoll data of the channels) and smcr_eng_loop_detach() when it goes
 * (the last one takes the channels out of the set). While attached,
 * whoever lets the token go (the loop, an application thread, the progress
 * thread) arms the CQs and polls once more first, so that a completion
 * either is run or raises a channel event in the loop's epoll set; a loop
 * that found the token taken is kicked when it goes free.
 */
void smcr_eng_loop_attach(struct smcr_eng *e, int epfd, int kick_fd, void *tag);
void smcr_eng_loop_detach(struct smcr_eng *e);
/*
 * smcr_eng_loop_run() - the loop's pass, never sleeping: if the token is
 * free, take it, register the links' channels in the loop's epoll set,
 * read their events, drain the CQs, arm them, poll once more, and pass
 * the token on; true then. Taken: false, and the loop is kicked when the
 * token goes free (its holder runs the completions meanwhile).
 */
bool smcr_eng_loop_run(struct smcr_eng *e);

/*
 * smcr_eng_link_add() - run the completions of @lnk, the link group's
 * link in @slot, from now on too (its CQs and channel made, not yet in
 * use by anybody else). Any thread; the owner, if asleep, is woken to
 * sleep on its channel too.
 */
void smcr_eng_link_add(struct smcr_eng *e, int slot, struct smcr_link *lnk);
/*
 * smcr_eng_link_del() - stop running the completions of the link in
 * @slot (not the first), before its CQs are destroyed. Only while the
 * caller holds the token: nobody else polls or sleeps on the engine then.
 */
void smcr_eng_link_del(struct smcr_eng *e, int slot);

#endif
