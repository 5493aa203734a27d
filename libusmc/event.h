/* SPDX-License-Identifier: MIT */
/*
 * A context's event set (usmc_ctx_event_fd(), usmc_ctx_poll()): one epoll
 * set per context holding the TCP socket of each watched connection in TCP
 * mode, the descriptor of each watched listener, and the eventfd of a
 * ready queue (event_queue.h) that the SMC-R connections' watches feed
 * (smcr_conn_watch(): no readiness socketpair). usmc_ctx_poll() waits in
 * that epoll set and turns what it finds into struct usmc_event.
 *
 * Made at the context's first event call, freed by usmc_ctx_destroy().
 *
 * Lock: the ready queue's (evq.lock, a leaf below a connection's lock)
 * guards the set's own fields and every watch's user, interest and dead
 * flag too. A watch is freed only when no thread is in usmc_ctx_poll() of
 * the set (pollers), since a poll may hold its pointer from epoll_wait():
 * until then it is dead and kept in graves.
 */
#ifndef USMC_EVENT_H
#define USMC_EVENT_H

#include <stdbool.h>
#include <stdint.h>

#include "event_queue.h"

struct usmc_ctx;
struct usmc_conn;
struct usmc_listener;

struct ev_watch {
	struct evq_item it; /* SMC-R: the connection in the ready queue */
	struct usmc_evset *set;
	struct usmc_conn *conn;	   /* or */
	struct usmc_listener *lis; /* fixed */
	int fd;			   /* fixed: in the epoll set, or -1 (SMC-R) */
	void *user;		   /* guarded by set->q.lock */
	uint32_t interest;	   /* guarded by set->q.lock: USMC_EV_* asked for */
	bool dead;		   /* guarded by set->q.lock: unwatched */
	struct ev_watch *grave_next;
};

struct usmc_evset {
	struct evq q; /* its lock guards the fields below */
	int epfd;     /* fixed: usmc_ctx_event_fd() */
	int pollers;  /* threads in usmc_ctx_poll() */
	struct ev_watch *graves;
};

/* The connection or listener goes (usmc_close(), usmc_abort(),
 * usmc_listener_close()): out of its context's event set, if watched. */
void event_conn_forget(struct usmc_conn *c);
void event_listener_forget(struct usmc_listener *l);

/* usmc_ctx_destroy(): the set, if one was made (nothing is watched). */
void event_set_free(struct usmc_evset *set);

#endif
