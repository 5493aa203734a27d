/* SPDX-License-Identifier: MIT */
/* A connection: its TCP socket, its mode, and the data path it uses. */
#ifndef USMC_CONN_H
#define USMC_CONN_H

#include <stdatomic.h>
#include <stdbool.h>

#include <usmc/usmc.h>

#include "opts.h"
#include "registry.h"

struct usmc_ctx;
struct smcr_conn;
struct smcr_hs;
struct smcr_serve;
struct conn_client_hs;
struct ev_watch;

/*
 * No lock: a connection belongs to one thread at a time (the accept thread,
 * then maybe a handshake worker, then the application), handed over through
 * the locked queues of the handshake pool and the listener; the byte
 * counters are atomic for usmc_conn_info() from another thread.
 */
struct usmc_conn {
	struct usmc_ctx *ctx;
	int fd; /* the TCP socket; also the pollable fd in TCP mode */
	enum usmc_mode mode;
	uint32_t reason;
	bool peer_declined;
	bool is_server;
	bool nonblock;
	/* the peer's address, kept from the connect or an SMC handshake's start
	 * (conn_keep_peer()): getpeername() fails once the peer has reset (0
	 * length: not kept, usmc_conn_info() asks the socket) */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	bool counted_open;    /* counted in ctx->open_conns */
	bool decline_at_once; /* listener congested: decline in the accept thread */
	bool src_counted;     /* listener: counted for its source (listener_src_enter()) */
	int kc_peer;	      /* enum kc_peer: SMC option seen in the handshake */
	uint32_t kc_ticket;   /* kcompat_mark_client()'s, until the connect ends */
	/* listener: the length of a whole CLC message the accept thread saw
	 * waiting on @fd (peeked), so the worker takes it with one recv() */
	size_t clc_waiting;
	uint64_t t_accept_ns; /* listener: when the accept thread took it (CLOCK_MONOTONIC) */
	struct usmc_opts opts;
	struct smcr_serve *serve; /* listener: a handshake between ACCEPT and CONFIRM */
	/* client, USMC_CONNECT_ASYNC: the handshake until it ends
	 * (connect_handshake.h) */
	struct conn_client_hs *chs;
	int connect_err; /* client, USMC_CONNECT_ASYNC: how it failed, for every later call */
	struct smcr_conn *smcr; /* SMC-R state when mode is USMC_MODE_SMCR */
	struct ev_watch *watch; /* usmc_conn_watch(): in its context's event set (event.h) */
	atomic_uint_least64_t bytes_sent, bytes_received;
	atomic_bool reset_reported; /* SMC-R: a peer reset was returned once */
	struct usmc_conn *next;	    /* struct conn_fifo link (handshake pool, accept queue) */

	/* The context's registry (usmc-stat, stat.h): linked from conn_alloc()
	 * to conn_destroy(). The links are guarded by ctx->reg_lock; the st_*
	 * copies are written by the owning thread and read by the stat thread
	 * under reg_lock, so they are atomic. */
	struct reg_node reg; /* guarded by ctx->reg_lock */
	atomic_int st_fd;    /* the TCP socket once it exists, else -1 */
	atomic_int st_mode;  /* enum usmc_mode */
	atomic_uint st_reason;
	atomic_bool st_peer_declined;
	atomic_uint st_lgr_id; /* SMC-R: its link group's id, else 0 */
};

/* A FIFO of connections linked by ->next; its owner's lock guards it. */
struct conn_fifo {
	struct usmc_conn *head, *tail;
};

static inline void conn_fifo_push(struct conn_fifo *q, struct usmc_conn *c)
{
	c->next = NULL;
	if (q->tail)
		q->tail->next = c;
	else
		q->head = c;
	q->tail = c;
}

/* The oldest connection, unlinked; NULL if empty. */
static inline struct usmc_conn *conn_fifo_pop(struct conn_fifo *q)
{
	struct usmc_conn *c = q->head;

	if (c) {
		q->head = c->next;
		if (!q->head)
			q->tail = NULL;
		c->next = NULL;
	}
	return c;
}

/* A connection around TCP socket @fd; the options are copied. */
struct usmc_conn *conn_alloc(struct usmc_ctx *ctx, int fd, const struct usmc_opts *opts,
			     bool is_server);

/* Keep the peer's address of an accepted socket (once): a client that
 * resets later is still named by usmc_conn_info(). */
void conn_keep_peer(struct usmc_conn *c);

/* For messages: the peer's address as kept, else as the socket tells now. */
struct log_addr conn_log_peer(const struct usmc_conn *c);

/* The connection reached its final mode: record it and count it. */
void conn_set_mode(struct usmc_conn *c, enum usmc_mode mode, uint32_t reason, bool peer_declined);

/* Put the TCP socket in blocking mode (connections use MSG_DONTWAIT for
 * non-blocking calls, so the user's fd flags never matter). */
int conn_make_blocking(struct usmc_conn *c);

/* The handshake's inputs from @c (smcr_clc.h). */
void conn_hs_init(struct usmc_conn *c, struct smcr_hs *hs);

/*
 * conn_apply_handshake() - record what smcr_clc_connect()/_serve() returned
 * as @rc: the mode (0), or the error, mapped to what usmc.h promises.
 */
int conn_apply_handshake(struct usmc_conn *c, int rc, const struct smcr_hs *hs);

/* Close the socket and free; no accounting of the mode (never handed out). */
void conn_destroy(struct usmc_conn *c);

/*
 * conn_dismantle() - conn_destroy() but the socket, which it returns still
 * open (or -1): a caller that must publish the end between the context's
 * count and the peer's EOF (listener_drop()) closes it itself.
 */
int conn_dismantle(struct usmc_conn *c);

#endif
