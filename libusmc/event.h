/* SPDX-License-Identifier: MIT */
/*
 * A context's event set (usmc_ctx_event_fd(), usmc_ctx_poll()): one epoll
 * set per context holding the TCP socket of each watched connection in TCP
 * mode, the descriptor of each watched listener, the eventfd of a ready
 * queue (event_queue.h) that the SMC-R connections' watches feed
 * (smcr_conn_watch(): no readiness socketpair), and, for the link groups
 * of those connections, their links' completion channels and a kick
 * eventfd (smcr_eng_loop_attach()). usmc_ctx_poll() runs those link groups'
 * completions in its caller's thread when nobody else does (the engine's
 * token is free), waits in the epoll set, and turns what it finds into
 * struct usmc_event.
 *
 * Made at the context's first event call, freed by usmc_ctx_destroy().
 *
 * Lock: the ready queue's (evq.lock, a leaf below a connection's lock)
 * guards the set's own fields and every watch's user, interest and dead
 * flag too. A watch is freed only when no thread is in usmc_ctx_poll() of
 * the set (pollers), since a poll may hold its pointer from epoll_wait():
 * until then it is dead and kept in graves. The engines' list has a lock
 * of its own, run_lock, held while a poll runs them, so none is dropped
 * meanwhile: run_lock -> smcr_eng.lock, a connection's lock (the dispatch)
 * -> evq.lock.
 */
#ifndef USMC_EVENT_H
#define USMC_EVENT_H

#include <stdbool.h>
#include <stdint.h>

#include "event_queue.h"

struct smcr_eng;
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
	struct smcr_eng *eng;	   /* fixed: SMC-R, the engine attached for it */
	bool via_fd;		   /* fixed: USMC_EV_FD, readiness on usmc_conn_fd() */
	struct ev_watch *grave_next;
};

/* A link group's engine that a watched connection of the set runs on. */
struct ev_eng {
	struct smcr_eng *e;
	int users; /* watched connections on it */
	struct ev_eng *next;
};

struct usmc_evset {
	struct evq q; /* its lock guards the fields up to run_lock */
	int epfd;     /* fixed: usmc_ctx_event_fd() */
	int pollers;  /* threads in usmc_ctx_poll() */
	struct ev_watch *graves;

	pthread_mutex_t run_lock; /* protects engs; held while a poll runs them */
	struct ev_eng *engs;
	int kick_fd;   /* fixed: eventfd, written by an engine to have it run */
	char eng_tag;  /* epoll data of the engines' channels: &eng_tag */
	char kick_tag; /* epoll data of kick_fd: &kick_tag */
};

/* The connection or listener goes (usmc_close(), usmc_abort(),
 * usmc_listener_close()): out of its context's event set, if watched. */
void event_conn_forget(struct usmc_conn *c);
void event_listener_forget(struct usmc_listener *l);

/* usmc_ctx_destroy(): the set, if one was made (nothing is watched). */
void event_set_free(struct usmc_evset *set);

#endif
