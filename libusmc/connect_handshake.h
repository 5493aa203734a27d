/* SPDX-License-Identifier: MIT */
/*
 * The client's handshake once its TCP connect is done (net/smc/af_smc.c
 * __smc_connect()): what decides the mode before any CLC (SMC-R disabled, a
 * kernel-compat server whose SYN-ACK had no SMC option, no device), then
 * the CLC handshake (smcr_clc_client.c) with our link groups to the server
 * held meanwhile, waiting or one step per call (USMC_CONNECT_ASYNC). It
 * answers through struct smcr_hs, as smcr_clc does; the connection (conn.c)
 * records the mode.
 */
#ifndef USMC_CONNECT_HANDSHAKE_H
#define USMC_CONNECT_HANDSHAKE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "smcr_clc.h"

struct kcompat;

/* Client link groups to one server held during a handshake (its caps
 * allow USMC_OPT_MAX_LGRS_PER_PEER, default 8). */
#define LGR_HOLD_MAX 16

/*
 * One client handshake: on the caller's stack while it waits, or allocated
 * (connect_hs_new()) from the connect of a USMC_CONNECT_ASYNC connection
 * until its usmc_connect_finish() calls end it. Its owner's alone.
 */
struct conn_client_hs {
	/* in, set by the connection (conn_client_hs_init() in conn.c) */
	struct smcr_hs hs;		     /* fd, sctx, opts; out: the mode */
	struct kcompat *kc;		     /* the context's kernel-compat state */
	uint32_t *kc_ticket;		     /* the connection's kcompat_mark_client() */
	const struct sockaddr_storage *addr; /* what connect() was given, or NULL */
	socklen_t addr_len;
	bool nonblock; /* the socket is O_NONBLOCK until a CLC comes next */
	/* the handshake's own */
	int kc_peer;			    /* enum kc_peer: the SYN-ACK's SMC option */
	enum { CHS_TCP, CHS_ANSWER } state; /* TCP connect; PROPOSAL sent */
	long deadline_ms;		    /* CHS_ANSWER: the answer is due then */
	struct smcr_client cl;
	struct sockaddr_storage peer; /* hs.peer while the CLC runs */
	struct lgr *held[LGR_HOLD_MAX];
	int nheld;
};

/* A zeroed handshake for an asynchronous connect; NULL without memory. */
struct conn_client_hs *connect_hs_new(void);

/* Release @h (NULL: nothing) and the link groups it holds. */
void connect_hs_free(struct conn_client_hs *h);

/* Wait until the TCP connect of @fd ends (POLLOUT); 0 or a negative errno. */
int connect_hs_wait_tcp(int fd);

/* The TCP connect of @fd: 0 when it is done, -EINPROGRESS, or its error. */
int connect_hs_tcp_done(int fd);

/*
 * connect_hs_decide() - the whole handshake, waiting.
 * connect_hs_propose() - its first step, never waiting: the checks, then
 * the PROPOSAL. connect_hs_answer() - the next ones, without waiting for
 * the server's answer.
 * They return SMCR_HS_SMCR or SMCR_HS_TCP (h->hs says which connection or
 * why TCP), SMCR_HS_AWAIT_ANSWER (the last two only: call
 * connect_hs_answer() again later, connect_hs_events() says when), or a
 * negative error.
 */
int connect_hs_decide(struct conn_client_hs *h);
int connect_hs_propose(struct conn_client_hs *h);
int connect_hs_answer(struct conn_client_hs *h);

/*
 * What a connect in progress waits for (poll events) and how long at most
 * (*@timeout_ms, -1: no bound): the TCP connect while @h is NULL or in
 * CHS_TCP, then the server's answer, or a first contact of ours.
 */
int connect_hs_events(const struct conn_client_hs *h, int *timeout_ms);

#endif
