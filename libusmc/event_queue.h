/* SPDX-License-Identifier: MIT */
/*
 * The ready queue of an event set (event.c): the watched connections whose
 * readiness no kernel descriptor carries (SMC-R mode), told by whichever
 * thread changed their state, taken by the thread in usmc_ctx_poll().
 *
 * An item is queued exactly while its state has a bit its watcher asked
 * for (or one of the queue's @always bits, reported unasked: USMC_EV_ERR,
 * as epoll reports EPOLLERR), and the queue's eventfd is readable exactly while the
 * queue is not empty: the eventfd sits in the event set's epoll set, so
 * usmc_ctx_event_fd() is exact for an event loop. Level-triggered, as
 * epoll's default: a collected item stays queued (moved to the tail, so a
 * caller that takes fewer than are ready sees the others next time) until
 * its state loses the bits.
 *
 * Lock: evq.lock is a leaf below a connection's lock (evq_set_state() is
 * called under it); nothing is taken while it is held.
 */
#ifndef USMC_EVENT_QUEUE_H
#define USMC_EVENT_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct evq_item {
	/* guarded by evq.lock */
	uint32_t state;	   /* what the connection is now (USMC_EV_* bits) */
	uint32_t interest; /* what its watcher asked for; 0: never queued */
	bool queued;
	struct evq_item *prev, *next;
};

struct evq {
	pthread_mutex_t lock; /* protects the list and every item's fields */
	int efd;	      /* eventfd: readable while the list is not empty */
	uint32_t always;      /* bits reported unasked, fixed */
	struct evq_item *head, *tail;
	unsigned long signals; /* eventfd writes and reads, for the tests */
};

/* An empty queue whose unasked bits are @always; a negative errno if its
 * eventfd cannot be made. */
int evq_init(struct evq *q, uint32_t always);
void evq_fini(struct evq *q);

/* The item's state is @state now (any thread; the caller may hold the
 * connection's lock). Queues it or takes it out, and the eventfd follows. */
void evq_set_state(struct evq *q, struct evq_item *it, uint32_t state);
/* Its watcher asks for @interest now (0: nothing, the item leaves). */
void evq_set_interest(struct evq *q, struct evq_item *it, uint32_t interest);

/*
 * evq_collect() - up to @max queued items into @items, with the bits to
 * report for each (state & (interest | always)) in @bits, the oldest first;
 * they stay queued, moved to the tail. Returns how many. Requires q->lock:
 * the caller reads what it needs of each item's owner before it lets go.
 */
int evq_collect_locked(struct evq *q, struct evq_item **items, uint32_t *bits, int max);

#endif
