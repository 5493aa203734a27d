/* SPDX-License-Identifier: MIT */
/*
 * The listener: a dedicated accept thread, the probe that tells SMC
 * clients from plain TCP clients, the handshake pool, and the accept queue
 * that usmc_accept() takes from. See docs/listener.md.
 */
#ifndef USMC_LISTEN_H
#define USMC_LISTEN_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <usmc/usmc.h>

#include "handshake_pool.h"
#include "kcompat.h"
#include "opts.h"
#include "reason.h"

struct usmc_ctx;
struct usmc_conn;
struct probing;

/* io_uring multishot accept state (accept thread only, after setup). */
struct accept_ring {
	bool on;	 /* the listener takes connections through the ring */
	bool armed;	 /* a multishot accept is outstanding */
	bool cancelling; /* and its cancellation was submitted */
	bool up;	 /* the ring exists: the accept thread waits in it */
	bool polling;	 /* its multishot poll on the epoll set is armed */
	struct io_uring ring;
	/* sockets the ring accepted while the listener was at its cap: a
	 * multishot accept drains the kernel's whole accept queue at once,
	 * and completions in flight when the cancel goes out still come.
	 * Served first, in order, when there is room. */
	int *stash;
	unsigned int nstash, stash_cap;
};

struct usmc_listener {
	struct usmc_ctx *ctx;
	unsigned int flags;
	int backlog;

	int lfd;    /* the kernel TCP listener */
	int qfd;    /* eventfd: readable while the accept queue is not empty */
	int wakefd; /* wakes the accept thread (stop, backlog space) */
	int epfd;   /* the accept thread's epoll */
	pthread_t accept_thread;
	atomic_bool stopping;
	atomic_bool paused; /* accept thread stopped taking connections */
	struct accept_ring ar;
	bool lfd_in;	      /* accept thread: the listen socket is polled for EPOLLIN */
	atomic_bool uring_on; /* for stats: ar.on, readable by any thread */

	/* usmc_listen() waits until the accept thread chose how it accepts */
	pthread_mutex_t start_lock;
	pthread_cond_t start_cond;
	bool started;

	pthread_mutex_t opts_lock;
	struct usmc_opts opts;

	/* accept queue: established connections for usmc_accept() */
	pthread_mutex_t qlock;
	struct usmc_conn *qhead, *qtail;
	bool qready; /* qfd's count is 1 (else 0) */

	/* accept thread only: connections being probed, oldest first */
	struct probing *probes, *probes_tail;

	struct hs_pool hs;

	struct kcompat_lsn kc; /* kernel-compat mode (kcompat.h) */

	/* backlog accounting: in_handshake (probe + pool) + queued <= backlog */
	atomic_uint in_handshake;
	atomic_uint queued;
	atomic_uint backlog_high;
	atomic_uint stash_high;

	atomic_uint_least64_t accepted, smcr, fallbacks, hs_failed, congestion_fallbacks,
		backlog_full;
	atomic_uint_least64_t fallback_by_reason[USMC_REASON_SLOTS];
	atomic_uint_least64_t hs_hist[USMC_HS_HIST_BUCKETS];
};

/* Hand a connection that reached its final mode to usmc_accept(). */
void listener_enqueue(struct usmc_listener *l, struct usmc_conn *c);

/* A handshake ended without a connection (error): drop it. */
void listener_drop(struct usmc_listener *l, struct usmc_conn *c);

/* ---- pure decisions (unit-tested in tests/test_listen_policy.c) --------- */

/* How many more connections the accept thread may take now: the backlog
 * cap counts every connection being probed, in the handshake, or queued
 * for usmc_accept(). */
unsigned int listen_backlog_room(unsigned int probing_or_hs, unsigned int queued,
				 unsigned int backlog);

/* Is the handshake pool congested? @depth handshakes wait for a worker;
 * @threshold is the effective USMC_OPT_HS_CONGESTION (opts_hs_congestion). */
bool listen_hs_congested(unsigned int depth, long threshold);

/* Should an SMC client be declined at once instead of queued? */
bool listen_decline_at_once(bool auto_fallback, unsigned int depth, long threshold);

/* Histogram bucket of a handshake that took @us microseconds. */
unsigned int listen_hist_bucket(uint64_t us);

#endif
