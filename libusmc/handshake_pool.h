/* SPDX-License-Identifier: MIT */
/*
 * The handshake pool of a listener: worker threads fed by a bounded FIFO.
 * CLC (and, with SMC-R, first-contact link setup) runs here so that the
 * accept thread never waits on a handshake.
 */
#ifndef USMC_HANDSHAKE_POOL_H
#define USMC_HANDSHAKE_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "conn.h"

struct usmc_conn;

/* Runs one handshake on a worker thread; owns @c from then on. */
typedef void (*hs_fn)(void *arg, struct usmc_conn *c);

struct hs_pool {
	pthread_mutex_t lock;	/* protects queue, depth, high, stopping */
	pthread_cond_t more;	/* signalled under lock: queued, or stopping */
	struct conn_fifo queue; /* guarded by lock: waiting for a worker */
	unsigned int depth;	/* guarded by lock: length of queue */
	unsigned int high;	/* guarded by lock: high-water mark of depth */
	bool stopping;		/* guarded by lock */
	hs_fn fn;		/* fixed by hs_pool_start() */
	void *arg;		/* fixed by hs_pool_start() */
	int nthreads;		/* hs_pool_start()/hs_pool_stop() only */
	pthread_t *threads;	/* hs_pool_start()/hs_pool_stop() only */
};

int hs_pool_start(struct hs_pool *p, int nthreads, hs_fn fn, void *arg);

/* Queue @c for a worker. Never blocks: the caller bounds the total. */
void hs_pool_submit(struct hs_pool *p, struct usmc_conn *c);

/* Handshakes waiting for a worker now, and the high-water mark. */
unsigned int hs_pool_depth(struct hs_pool *p);
unsigned int hs_pool_high(struct hs_pool *p);

/* Stop the workers (after their current handshake); returns the
 * connections still queued, linked by ->next, for the caller to free. */
struct usmc_conn *hs_pool_stop(struct hs_pool *p);

#endif
