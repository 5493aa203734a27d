/* SPDX-License-Identifier: MIT */
/*
 * The listener: a dedicated accept thread, the probe that tells SMC
 * clients from plain TCP clients, the handshake pool, and the accept queue
 * that usmc_accept() takes from. See docs/listener.md.
 */
#ifndef USMC_LISTEN_H
#define USMC_LISTEN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <usmc/usmc.h>

#include "hs.h"
#include "kcompat.h"
#include "opts.h"

struct usmc_ctx;
struct usmc_conn;
struct probing;

struct usmc_listener {
	struct usmc_ctx *ctx;
	unsigned int flags;
	int backlog;

	int lfd;    /* the kernel TCP listener */
	int qfd;    /* eventfd semaphore: one count per queued connection */
	int wakefd; /* wakes the accept thread (stop, backlog space) */
	int epfd;   /* the accept thread's epoll */
	pthread_t accept_thread;
	atomic_bool stopping;
	atomic_bool paused; /* accept thread stopped taking connections */

	pthread_mutex_t opts_lock;
	struct usmc_opts opts;

	/* accept queue: established connections for usmc_accept() */
	pthread_mutex_t qlock;
	struct usmc_conn *qhead, *qtail;

	/* accept thread only: connections being probed, oldest first */
	struct probing *probes, *probes_tail;

	struct hs_pool hs;

	struct kcompat_lsn kc; /* kernel-compat mode (kcompat.h) */

	/* backlog accounting: in_handshake (probe + pool) + queued <= backlog */
	atomic_uint in_handshake;
	atomic_uint queued;

	atomic_uint_least64_t accepted, smcr, fallbacks, hs_failed, congestion_fallbacks,
		backlog_full;
};

/* Hand a connection that reached its final mode to usmc_accept(). */
void listener_enqueue(struct usmc_listener *l, struct usmc_conn *c);

/* A handshake ended without a connection (error): drop it. */
void listener_drop(struct usmc_listener *l, struct usmc_conn *c);

#endif
