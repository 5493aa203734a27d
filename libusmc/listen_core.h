/* SPDX-License-Identifier: MIT */
/*
 * The listener (docs/listener.md): a dedicated accept thread
 * (accept_thread.h), the probe that tells SMC clients from plain TCP
 * clients (probe.h), the handshake pool, and the accept queue that
 * usmc_accept() takes from. This header is the listener object and what its
 * threads share (listen_core.c); the API is listen.c.
 */
#ifndef USMC_LISTEN_CORE_H
#define USMC_LISTEN_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <usmc/usmc.h>

#include "handshake_pool.h"
#include "kcompat.h"
#include "listen_policy.h"
#include "listen_sources.h"
#include "mode_counts.h"

struct ev_watch;
#include "opts.h"
#include "reason.h"
#include "registry.h"
#include "smcr_ctx.h"

struct usmc_ctx;
struct usmc_conn;
struct probing;
struct accept_backend_ops;

/*
 * Who may touch what. Locks: start_lock, opts_lock, qlock, park_lock,
 * afd_lock, demand_lock here, hs.lock in the pool and srcs.lock in the
 * sources; none is ever held while another lock is taken, or while calling
 * out of the listener (conn_destroy(), the SMC-R handshake, kcompat): each
 * is a leaf. The exceptions: syn_lock, taken before hs.lock (the SYN-time
 * congestion flag follows the queue's depth) and never held across a call
 * out of the listener; and peer_lock, held across kcompat_server_peer(),
 * which takes no lock (atomics and a bpf() lookup). Fields marked "accept
 * thread" are its alone once it runs; those marked "fixed" are set by
 * usmc_listen() before any thread starts and only read afterwards; atomics
 * need no lock.
 */
struct usmc_listener {
	struct usmc_ctx *ctx; /* fixed */
	unsigned int flags;   /* fixed: USMC_LISTEN_* */
	int backlog;	      /* fixed */

	int lfd;    /* fixed: the kernel TCP listener */
	int qfd;    /* fixed: eventfd, readable while the accept queue is not empty */
	int wakefd; /* fixed: wakes the accept thread (stop, backlog space) */
	int epfd;   /* fixed: the accept thread's epoll */

	/* fixed: kernel-compat, or SMC off at listen time: usmc_accept() takes
	 * the connections whose SYN decided TCP from lfd itself, in the
	 * caller's thread (listen_direct.c; docs/listener.md "Plain TCP") */
	bool direct;
	int afd; /* fixed: direct: epoll of qfd and lfd (else qfd): usmc_listener_fd() */
	struct ev_watch *watch;	  /* usmc_listener_watch(): in the context's event set */
	pthread_mutex_t afd_lock; /* protects afd_lfd and lfd's entry in afd */
	bool afd_lfd;		  /* guarded by afd_lock: lfd polled in afd */
	/* direct: when usmc_accept() last looked at the kernel's queue; and
	 * whether the accept thread takes from it meanwhile, to be told at
	 * once that the application does (accept_cede(), once: cede_asked) */
	_Atomic int64_t app_ns;
	atomic_bool lfd_held, cede_asked;
	atomic_int app_nofd; /* direct: an errno of accept4() for want of fds */
	bool ceded;	     /* accept thread: it leaves lfd to usmc_accept() (accept_cede()) */
	/* connections usmc_accept() took that go to the probe, counted in
	 * in_handshake, for the accept thread (listener_take_handed()) */
	struct conn_fifo handed; /* guarded by park_lock */

	pthread_t accept_thread;
	atomic_bool stopping;
	atomic_bool paused;   /* accept thread stopped taking connections */
	atomic_bool uring_on; /* for stats: connections come through io_uring */

	/* accept thread: how it takes connections (accept_backend.h) */
	const struct accept_backend_ops *ab;
	void *ab_data;	 /* accept thread: the backend's own state */
	bool lfd_in;	 /* accept thread: the listen socket is polled for EPOLLIN */
	bool lfd_unread; /* accept thread: lfd_in set since the epoll set was last read */
	/* accept thread: the kernel kept a connection for want of a
	 * descriptor or memory (the errno, noted by a backend), and none is
	 * taken until nofd_until_ms (accept_thread.c accept_nofd_backoff()) */
	int nofd_err;
	long nofd_until_ms;

	/* accept thread: connections being probed, in deadline order */
	struct probing *probes, *probes_tail;

	/* usmc_listen() waits until the accept thread chose its backend */
	pthread_mutex_t start_lock; /* protects started */
	pthread_cond_t start_cond;  /* signalled under start_lock when started */
	bool started;		    /* guarded by start_lock */

	pthread_mutex_t opts_lock; /* protects opts */
	struct usmc_opts opts;	   /* guarded by opts_lock (setopt from any thread) */

	/* accept queue: established connections for usmc_accept() */
	pthread_mutex_t qlock; /* protects q, qready and qfd's count */
	struct conn_fifo q;    /* guarded by qlock */
	bool qready;	       /* guarded by qlock: qfd's count is 1 (else 0) */

	struct hs_pool hs; /* its own lock (handshake_pool.h) */

	/* handshakes a worker parked to wait for the client's CONFIRM, for
	 * the accept thread to watch (probe_park()) */
	pthread_mutex_t park_lock; /* protects parked and handed */
	struct conn_fifo parked;   /* guarded by park_lock */

	/* handshakes parked until a handshake event of the context (probe.c:
	 * a first contact with their peer ended, an LLC flow's answer came):
	 * the context tells hs_watch, which sets hs_moved and wakes the
	 * accept thread if any waits */
	struct smcr_hs_watch hs_watch; /* fixed */
	atomic_bool hs_moved;
	atomic_uint event_waiters; /* changed by the accept thread only */

	struct kcompat_lsn kc; /* fixed once listening; congested is atomic */
	/* the accept thread and the workers each recompute the SYN-time flag
	 * after they move the queue: one at a time, so that the last write
	 * follows the last depth (update_congestion()) */
	pthread_mutex_t syn_lock;

	/* backlog accounting: in_handshake (probe + pool) + queued <= backlog */
	atomic_uint in_handshake;
	atomic_uint queued;	  /* changed under qlock, read without it as a hint */
	atomic_uint backlog_high; /* written by the accept thread only */
	atomic_uint stash_high;	  /* written by the accept thread only */

	atomic_uint_least64_t accepted, hs_failed, congestion_fallbacks, backlog_full;
	/* auto-fallback admits SMC-R by cost (listener_admit_smcr()) */
	_Atomic int64_t storm_until_ns; /* a storm: congested within storm_hold_ns */
	_Atomic int64_t storm_hold_ns;	/* the storm's hold (listen_storm_renew()) */
	_Atomic int64_t next_admit_ns;	/* in a storm, no SMC-R admission before */
	_Atomic int64_t hs_cost_ns;	/* moving average of a worker's handshake time */
	pthread_mutex_t demand_lock;	/* protects demand */
	struct listen_demand demand;	/* guarded by demand_lock */
	/* kcompat_server_peer() deduces a socket's kind from counts that a
	 * concurrent caller moves: one caller at a time (usmc_accept() in
	 * direct mode and the accept thread) */
	pthread_mutex_t peer_lock;
	atomic_uint_least64_t budget_fallbacks;
	/* handshakes per source address (listen_sources.h); SMC clients
	 * refused because their address held its share */
	struct listen_sources srcs;
	atomic_uint_least64_t source_refused;
	struct mode_counts modes; /* connections handed to usmc_accept() */
	atomic_uint_least64_t hs_hist[USMC_HS_HIST_BUCKETS];

	/* the context's registry (usmc-stat): linked from usmc_listen() to
	 * usmc_listener_close() */
	struct reg_node reg; /* guarded by ctx->reg_lock */
};

/* ---- between the listener's files (listen_core.c) ----------------------- */

/* Hand a connection that reached its final mode to usmc_accept(). */
void listener_enqueue(struct usmc_listener *l, struct usmc_conn *c);

/* The oldest connection of the accept queue, taken off it; NULL if empty. */
struct usmc_conn *listener_queue_pop(struct usmc_listener *l);

/*
 * @c (an SMC client, counted in in_handshake) starts to hold a place of
 * the backlog for its handshake: count it for its source address. False
 * if that address holds its share (listen_src_refuse()): then the caller
 * refuses it (probe.c).
 */
bool listener_src_enter(struct usmc_listener *l, struct usmc_conn *c);

/* The connection is TCP with @reason: give it to the application. */
void listener_finish_tcp(struct usmc_listener *l, struct usmc_conn *c, uint32_t reason);

/* A handshake ended without a connection (error @err, negative): drop it,
 * and say why (a silent drop leaves operators a client's reset to explain). */
void listener_drop(struct usmc_listener *l, struct usmc_conn *c, int err);

/* Queue @c (counted in in_handshake) for a handshake worker. */
void listener_hs_submit(struct usmc_listener *l, struct usmc_conn *c);

/* A handshake worker's step on @c (hs_fn, handshake_pool.h; @arg is the
 * listener): it ends in the accept queue, dropped, or parked. */
void listener_hs_worker(void *arg, struct usmc_conn *c);

/* A worker parked @c (LISTEN_HS_PARKED): hand it to the accept thread. */
void listener_park(struct usmc_listener *l, struct usmc_conn *c);

/* Every handshake parked since the last call, linked by ->next, taken off
 * the list (the accept thread watches them; listener close frees them). */
struct usmc_conn *listener_take_parked(struct usmc_listener *l);

/* Every connection usmc_accept() handed to the probe since the last call,
 * linked by ->next, taken off the list (for the accept thread). */
struct usmc_conn *listener_take_handed(struct usmc_listener *l);

/*
 * A socket @fd just taken from the kernel, as a connection with a copy of
 * the listener's options in @o, counted in accepted, its SYN's word
 * (kc_peer) and accept time noted; NULL if out of memory (@fd closed).
 */
struct usmc_conn *listener_new_conn(struct usmc_listener *l, int fd, struct usmc_opts *o);

/*
 * Whether the TCP handshake of new connection @c decided its mode (SMC
 * off, or kernel-compat: no option, or congested at SYN time): then @c is
 * TCP with its reason, not queued (true); else it is for the probe.
 */
bool listener_decided_at_syn(struct usmc_listener *l, struct usmc_conn *c,
			     const struct usmc_opts *o);

/* ---- direct mode (listen_direct.c) --------------------------------------- */

/* Set up direct mode and afd (usmc_listen(), after the accept thread's
 * fds); 0 or a negative errno. Without it afd stays qfd. */
int listener_direct_setup(struct usmc_listener *l);

/*
 * usmc_accept() found the accept queue empty: take a connection the SYN
 * decided from the kernel's queue in the caller's thread. 0 with *@out; or
 * -EAGAIN (none there, or none the cap lets it take; those that go to the
 * probe were handed to the accept thread).
 */
int listener_direct_accept(struct usmc_listener *l, struct usmc_conn **out);

/* Direct mode: the accept thread leaves the listen socket to usmc_accept()
 * while the application looked at it within this long (accept_cede()): long
 * enough that a busy server's accept thread wakes 20 times a second for it
 * at most, short enough that an SMC client's PROPOSAL waits far less than
 * Linux's CLC_WAIT_TIME (6 s) for its probe when the application stops
 * accepting. */
#define LISTEN_APP_LEASE_MS 50

/* Whether usmc_listener_fd() reports the kernel's queue (@on: there is
 * room and no back-off). Any thread. */
void listener_offer_lfd(struct usmc_listener *l, bool on);

/* Count @c's CLC handshake time, from the accept, in the histogram. */
void listener_record_hs_time(struct usmc_listener *l, const struct usmc_conn *c);

/* Kernel-compat: SYN-ACKs go out without the option while congested. */
void listener_update_congestion(struct usmc_listener *l, const struct usmc_opts *o);

/*
 * Auto-fallback: admit SMC client @c to the handshake pool (false), or
 * decline it at once (true), counting the budget's declines. Takes the
 * storm's admission token when it admits.
 */
bool listener_decline_smcr(struct usmc_listener *l, const struct usmc_opts *o);

/* The accept thread refused an SMC client in a storm (kernel-compat: at SYN
 * time): the storm goes on while they come faster than the workers could
 * serve them (listen_storm_demand()). */
void listener_storm_demand(struct usmc_listener *l, const struct usmc_opts *o);

/* A consistent copy of the listener's options. */
void listener_copy_opts(struct usmc_listener *l, struct usmc_opts *out);

/* Room for connections in the listener proper (the stash of io_uring mode
 * is not in it: docs/listener.md, "Backlog"). */
unsigned int listener_room(struct usmc_listener *l);

/* Kernel-compat: what the TCP handshake of accepted socket @fd said. Every
 * accepted socket goes through it once, whatever becomes of it, so that the
 * listener's count of the sockets it took stays the program's
 * (kcompat_server_peer()). */
enum kc_peer listener_accepted_peer(struct usmc_listener *l, int fd);

/* A socket taken from the kernel that nobody will get (out of memory):
 * closed, counted as a failed handshake. */
void listener_refuse(struct usmc_listener *l, int fd);

/* Wake the accept thread: stop, or room freed while it was paused at the
 * cap, or a parked handshake to watch, or a handshake event. */
void listener_wake(struct usmc_listener *l);

/* Between usmc_listen() and usmc_listener_close(): handshakes that wait for
 * a handshake event (a first contact's end, an LLC flow's answer) are
 * retried when one of the context comes (listener_watch_events(l, true)),
 * not on a timer. */
void listener_watch_events(struct usmc_listener *l, bool on);

#endif
