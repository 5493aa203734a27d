/* SPDX-License-Identifier: MIT */
/*
 * The SMC-Rv2 CLC handshake over a connection's TCP socket, both roles
 * (net/smc/af_smc.c smc_connect_rdma() and smc_listen_work()): PROPOSAL,
 * ACCEPT, CONFIRM, then LLC CONFIRM_LINK on a new link group or
 * CONFIRM_RKEY on a reused one. It answers through struct smcr_hs; the
 * caller (the API object) records the mode. The client is
 * smcr_clc_client.c, the server smcr_clc_server.c, what both use
 * smcr_clc.c.
 */
#ifndef USMC_SMCR_CLC_H
#define USMC_SMCR_CLC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <netinet/in.h>

#include "clc.h"
#include "lgr.h"
#include "smcr_dev.h"
#include "opts.h"
#include "smcr_ctx.h"

struct smcr_conn;

/* How a handshake ended, when it did not fail (negative errno). */
enum smcr_hs_result {
	SMCR_HS_SMCR = 1,     /* on SMC-R: hs->sc is the connection */
	SMCR_HS_TCP,	      /* on TCP: a DECLINE went or came, hs->reason says why */
	SMCR_HS_NODEV,	      /* client: no SMC-R device for the local address, no CLC sent */
	SMCR_HS_AWAIT_READ,   /* server: smcr_clc_serve() again once the client's
			       * next bytes are there (the CONFIRM, or a DECLINE),
			       * or at st->wait_until_ms */
	SMCR_HS_AWAIT_EVENT,  /* server: smcr_clc_serve() again after a handshake
			       * event of the context (smcr_serve_event_ready()),
			       * or at st->wait_until_ms: a first contact with the
			       * peer or an LLC flow is in progress */
	SMCR_HS_AWAIT_ANSWER, /* client, not waiting: the server's answer is not
			       * (all) there yet: smcr_clc_answer() again once
			       * the socket is readable */
	SMCR_HS_AWAIT_LGR,    /* client, not waiting: the link group the ACCEPT
			       * names is still being set up by a first contact of
			       * ours with that server, or an LLC step runs (the
			       * server's CONFIRM_LINK, our CONFIRM_RKEY's answer):
			       * smcr_clc_answer() again a little later, by
			       * cl->due_ms at the latest */
};

struct smcr_hs {
	/* in */
	int fd;			      /* the connected TCP socket, blocking */
	struct smcr_ctx *sctx;	      /* the context's SMC-R state */
	const struct usmc_opts *opts; /* CLC timeout, buffer sizes */
	bool have_device;	      /* server: some port can carry SMC-R at all */
	long deadline_ms;	      /* server: the whole handshake ends by then
				       * (clock_now_ms()), 0 = only per-message bounds */
	size_t waiting;		      /* server: the length of a whole CLC message seen waiting
				       * on @fd, which the next read takes at once; 0 = wait */
	/* the peer's address if the caller has it already (the connection
	 * kept it, conn.h), or NULL: getpeername() is asked */
	const struct sockaddr_storage *peer;
	/* out */
	struct smcr_conn *sc; /* SMCR_HS_SMCR */
	uint32_t reason;      /* SMCR_HS_TCP: USMC_REASON_* / CLC decline code */
	bool peer_declined;   /* SMCR_HS_TCP: the peer sent the DECLINE */
};

/* The IPv4 address in @ss (an IPv4-mapped IPv6 one too), or -EAFNOSUPPORT. */
int smcr_addr_ipv4(const struct sockaddr_storage *ss, struct in_addr *addr);

/* What the server's ACCEPT negotiated from the PROPOSAL. */
struct serve_neg {
	uint8_t release, max_conns, max_links;
	const uint8_t *eid;	  /* the common UEID, in the PROPOSAL */
	struct in_addr peer_addr; /* the client's TCP address */
};

/* Where a server handshake stands between its steps (smcr_clc_serve()). */
enum smcr_serve_phase {
	SERVE_NEW = 0,	     /* the PROPOSAL: negotiate, claim or reuse (again while
			      * a first contact with the peer is in progress) */
	SERVE_RKEY,	     /* reuse: our RMB's CONFIRM_RKEY, then the ACCEPT */
	SERVE_CONFIRM,	     /* the ACCEPT went: the client's CONFIRM */
	SERVE_CONFIRM_LINK,  /* first contact: the answer to our CONFIRM_LINK */
	SERVE_PEER_DECLINE,  /* it failed: the client's DECLINE, before ours */
	SERVE_CROSS_DECLINE, /* ours went: one that crossed it */
};

/*
 * A server handshake from the PROPOSAL to its end. Between its steps it
 * holds a connection (and, on a first contact, a link group that is not
 * yet published and the claim on its peer) while the listener waits for
 * what it needs without a worker: no step waits for the peer.
 */
struct smcr_serve {
	struct clc_proposal prop; /* in: the client's, decoded */
	struct smcr_ctx *sctx;
	enum smcr_serve_phase phase;
	struct serve_neg neg;
	struct smcr_dev dev;
	struct smcr_conn *sc; /* the new connection */
	struct lgr *lgr;      /* first contact: ours, until published */
	bool claimed;	      /* first contact: @pending is registered */
	/* SMCR_HS_AWAIT_*: the step is due again by then (clock_now_ms()) */
	long wait_until_ms;
	bool waits_event; /* the last step returned SMCR_HS_AWAIT_EVENT */
	/* smcr_ctx_hs_events() before the step looked at what it waits for:
	 * SMCR_HS_AWAIT_EVENT is worth a step once it moved on */
	unsigned int events_seen;
	uint32_t flow; /* the LLC flow it runs (smcr_llc_flow_start()), 0 none */
	long flow_due_ms;
	long confirmed_ms;	    /* first contact: when the client's CONFIRM came */
	struct lgr_pending pending; /* first contact: the claim on the peer */
};

/*
 * A client handshake between its steps (smcr_clc_propose(), then
 * smcr_clc_answer() until it ends): what the PROPOSAL offered and what
 * came back so far.
 */
struct smcr_client {
	struct smcr_ctx *sctx;
	struct smcr_dev dev;		/* the local device the PROPOSAL offered */
	struct in_addr server;		/* the server's TCP address */
	uint8_t rx[CLC_ACCEPT_MAX_LEN]; /* the server's answer, read so far */
	size_t rx_have;			/* ... this many bytes of it (not waiting) */
	bool accepted;			/* @accept holds the server's ACCEPT */
	struct clc_accept_confirm accept;
	/* after the ACCEPT, what the handshake waits for (not waiting) */
	enum {
		CL_LGR,		   /* the link group a reuse ACCEPT names */
		CL_SETUP,	   /* first contact: our link group set up on its thread */
		CL_RKEY,	   /* reuse: our CONFIRM_RKEY's flow, then its answer */
		CL_CONFIRM_LINK,   /* first contact: the server's CONFIRM_LINK */
		CL_SERVER_DECLINE, /* ... which did not come: the server's DECLINE */
	} phase;
	long due_ms; /* the phase ends by then (0: not started) */
	/* the link group and connection being set up, and what they hold */
	struct lgr *lgr;	    /* first contact: ours, until published */
	struct smcr_conn *sc;	    /* the new connection */
	bool reserved;		    /* first contact: @pending is registered */
	struct lgr_pending pending; /* ... the reservation (lgr_reserve()) */
	uint8_t release;	    /* first contact: negotiated */
	uint32_t flow;		    /* CL_RKEY: our flow (smcr_llc_flow_start()), 0 none */
	/* not waiting: the handshake's thread, which sets the link group up
	 * (CL_SETUP) or frees it after a failed CONFIRM_LINK */
	pthread_t setup_th;
	bool setup_running;		/* setup_th is to be joined */
	atomic_bool setup_done;		/* its job is done (a set-up's setup_rc is there) */
	int setup_rc;			/* 0, a decline reason, or an error */
	const struct smcr_hs *setup_hs; /* what it sets up for */
};

/*
 * smcr_clc_propose() - client, right after the TCP connect: send the
 * PROPOSAL. 0 (smcr_clc_answer() next), SMCR_HS_NODEV (no device for the
 * local address: nothing sent, hs->reason says NOSMCRDEV), or an error.
 * @cl is initialised here.
 * smcr_clc_answer() - client: the server's answer (ACCEPT or DECLINE),
 * then the link group (found, or created by a first contact: CONFIRM, QP,
 * CONFIRM_LINK) and the CONFIRM. With @wait it blocks for the answer
 * (USMC_OPT_CLC_TIMEOUT_MS) and for a concurrent first contact of ours;
 * without, it reads only what is there (one recv()) and returns
 * SMCR_HS_AWAIT_ANSWER or SMCR_HS_AWAIT_LGR instead of waiting: call it
 * again (the caller keeps the deadline). The LLC steps of a first contact
 * (CONFIRM_LINK, at most SMCR_CL_WAIT_MS, and if it fails the server's
 * DECLINE, at most SMCR_CL_DECLINE_WAIT_MS more) and a CONFIRM_RKEY on
 * reuse: with @wait they run to their end, without it each call looks
 * and returns SMCR_HS_AWAIT_LGR while they are not over (never waits).
 * smcr_clc_client_abort() - release what an unfinished client handshake
 * holds (the connection is being closed). Safe after it ended.
 * smcr_clc_connect() - both, waiting: the blocking client.
 * smcr_clc_serve() - server, one step: first with the client's decoded
 * PROPOSAL in @st->prop (negotiate, claim or reuse a link group, the
 * ACCEPT), then from where the last step returned SMCR_HS_AWAIT_READ or
 * SMCR_HS_AWAIT_EVENT (the CONFIRM, the link's LLC steps, a failed first
 * contact's DECLINEs). It never waits for the peer: an LLC flow runs as
 * events, and every step honours hs->deadline_ms. Once it ended, @st holds
 * nothing.
 * They return an enum smcr_hs_result, or a negative errno /
 * USMC_EPROTO_CLC (a malformed or unexpected CLC message): then the
 * connection is unusable.
 */
int smcr_clc_propose(struct smcr_hs *hs, struct smcr_client *cl);
int smcr_clc_answer(struct smcr_hs *hs, struct smcr_client *cl, bool wait);
void smcr_clc_client_abort(struct smcr_client *cl);
int smcr_clc_connect(struct smcr_hs *hs);
int smcr_clc_serve(struct smcr_hs *hs, struct smcr_serve *st);

/* smcr_serve_first_contact() - @st runs a first contact (a new link
 * group), not a reuse. */
bool smcr_serve_first_contact(const struct smcr_serve *st);

/* smcr_serve_event_ready() - after SMCR_HS_AWAIT_EVENT: what @st waits for
 * may have happened (a hint, cheap: the listener's accept thread asks). */
bool smcr_serve_event_ready(const struct smcr_serve *st);

/* smcr_clc_serve_abort() - release @st without a word to the peer (the
 * connection is being dropped). Safe on a released @st. */
void smcr_clc_serve_abort(struct smcr_serve *st);

/* ---- between the CLC files (smcr_clc.c and its two roles) --------------- */

#define SMCR_RELEASE	  CLC_RELEASE_1
#define SMCR_MIN_CONNS	  16 /* v2.1: fewer is MAXCONNERR */
#define SMCR_MAX_LINKS	  2  /* links we take (Linux's v2.1 SMC_LINKS_ADD_LNK_MAX) */
#define SMCR_FEATURE_MASK 0x0001

/*
 * A first contact whose CONFIRM_LINK failed, timed as Linux 6.12 (net/smc
 * af_smc.c smcr_clnt_conf_first_link(), smcr_serv_conf_first_link();
 * smc_llc.h SMC_LLC_WAIT_TIME 2 s, smc_clc.h CLC_WAIT_TIME_SHORT 1 s) so
 * that the server's DECLINE is the one that goes; the figures measured
 * against Linux are in docs/smcr.md (tests/rxe/test_fc_decline.c checks
 * the order they rely on).
 */
#define SMCR_CL_WAIT_MS	  4000 /* client: CONFIRM_LINK, 2 x SMC_LLC_WAIT_TIME */
#define CLC_WAIT_SHORT_MS 1000 /* server: the client's DECLINE before ours */
/* client, after SMCR_CL_WAIT_MS: the server's DECLINE. Linux 6.12's
 * server sent it 3.1 s after the CONFIRM, 5.1 s when its CONFIRM_LINK send
 * hung until its QP gave up (measured); ours at most 3 s after. */
#define SMCR_CL_DECLINE_WAIT_MS 4000
/* server, after its DECLINE and until this long after the client's
 * CONFIRM came: a client's DECLINE that crossed ours. Linux's client
 * sends one about 5.3 s after its CONFIRM if ours reached it late. */
#define SMCR_SRV_CROSS_WAIT_MS 7000

/* What the next CLC message turned out to be (values apart from enum
 * smcr_hs_result, so that neither is taken for the other). */
enum clc_rx {
	CLC_RX_MSG = 0,		    /* the expected ACCEPT or CONFIRM, decoded */
	CLC_RX_DECLINED = 100,	    /* a DECLINE: hs says why, TCP from here */
	CLC_RX_DECLINED_SYNC = 101, /* a DECLINE with the out-of-sync bit: the
				       peer lost our link group */
};

/* The smaller of our MTU and the peer's (0: the peer named none). */
static inline enum ibv_mtu mtu_min(enum ibv_mtu a, uint8_t b)
{
	return b && (enum ibv_mtu)b < a ? (enum ibv_mtu)b : a;
}

/* The peer's IPv4 address, as the connection kept it or as the socket says. */
int smcr_hs_peer_ipv4(const struct smcr_hs *hs, struct in_addr *addr);

/* The SMC-R device of the socket's local address; -ENODEV if none. */
int smcr_hs_find_dev(const struct smcr_hs *hs, struct smcr_dev *dev);

/* The peer's RoCE GID is its TCP address, mapped (SMC-Rv2 direct). */
bool smcr_clc_gid_is_addr(const uint8_t gid[SMCR_GID_LEN], struct in_addr addr);

/* The link group settings the options ask for. */
struct lgr_config smcr_clc_lgr_config(const struct usmc_opts *o);

/* A connection on @lgr with the options' buffer sizes (warns when out of them). */
int smcr_hs_conn_new(const struct smcr_hs *hs, struct lgr *lgr, struct smcr_conn **sc);

/*
 * The max_links we offer: USMC_OPT_MAX_LINKS (at most SMCR_MAX_LINKS),
 * whatever the ports, as Linux offers smcr_max_links_per_lgr: a server
 * with one port offers an asymmetric second link, so a Linux client told
 * 2, which waits for the ADD_LINK, gets one.
 */
uint8_t smcr_clc_max_links(const struct usmc_opts *opts);
/* The first-contact extension of an ACCEPT or CONFIRM. */
void smcr_clc_fill_fce(struct clc_fce *f, uint8_t release, uint8_t max_conns, uint8_t max_links);

/* Our half of an ACCEPT or CONFIRM (@type): link, RMB, token. */
void smcr_clc_fill_ac(struct clc_accept_confirm *m, uint8_t type, struct lgr *lgr,
		      struct smcr_conn *sc, bool fc);

/* Encode and send an ACCEPT or CONFIRM. */
int smcr_clc_send_ac(int fd, const struct clc_accept_confirm *m);

/*
 * smcr_clc_rkey_request() - our CONFIRM_RKEY request for @sc's RMB: its
 * rkey and address for the link the flow goes over, and an additional
 * entry {link number, rkey, address} for each other active link of the
 * group (at most LLC_CONFIRM_RKEY_EXTRA).
 */
void smcr_clc_rkey_request(const struct smcr_conn *sc, struct llc_msg *req);

/* The peer's RMB as its ACCEPT or CONFIRM describes it: 0, or -ENOSPC
 * when the link group has no rtoken left for it (smcr_conn_set_peer()). */
int smcr_clc_set_peer_rmb(struct smcr_conn *sc, const struct clc_accept_confirm *m);

/*
 * CONFIRM_RKEY for @sc's RMB on a reused link group, unless the peer holds
 * its rkey already (0 at once).
 * smcr_clc_confirm_rkey() - waiting for the flow and its answer.
 * smcr_clc_rkey_start() - as events: the flow started (*@flow), or 0 with
 * *@flow 0 (nothing to confirm), or smcr_llc_flow_start()'s error; then
 * smcr_clc_rkey_answered() with smcr_llc_flow_result()'s @rc and @resp:
 * 0 once the peer took it, else an error.
 */
int smcr_clc_confirm_rkey(struct lgr *lgr, struct smcr_conn *sc);
int smcr_clc_rkey_start(struct lgr *lgr, struct smcr_conn *sc, uint32_t *flow);
int smcr_clc_rkey_answered(struct smcr_conn *sc, int rc, const struct llc_msg *resp);

/*
 * smcr_hs_classify() - the CLC message in @buf (@len bytes, or the error of
 * reading it): the @want type decoded into @ac (CLC_RX_MSG), a DECLINE
 * (recorded in @hs: CLC_RX_DECLINED*), or a negative error.
 * smcr_hs_recv() - the same for the next message, read waiting up to
 * @timeout_ms (it takes hs->waiting bytes at once if the caller saw them).
 */
int smcr_hs_classify(struct smcr_hs *hs, const uint8_t *buf, int len, const struct clc_hdr *hdr,
		     uint8_t want, struct clc_accept_confirm *ac);
int smcr_hs_recv(struct smcr_hs *hs, uint8_t *buf, size_t cap, uint8_t want,
		 struct clc_accept_confirm *ac, int timeout_ms);

/* @ms from now, or the handshake's deadline if that comes first. */
long smcr_hs_deadline(const struct smcr_hs *hs, long ms);

/* How long the next CLC message may take (USMC_OPT_CLC_TIMEOUT_MS, within
 * the deadline). */
int smcr_hs_wait_ms(const struct smcr_hs *hs);

/* Send a DECLINE of @reason: SMCR_HS_TCP, or the error sending it. */
int smcr_hs_decline(struct smcr_hs *hs, uint32_t reason, bool out_of_sync);

/* The handshake ends on TCP for @reason: SMCR_HS_TCP. */
int smcr_hs_tcp(struct smcr_hs *hs, uint32_t reason, bool peer_declined);

/* A step's result is a DECLINE received (CLC_RX_DECLINED*). */
static inline bool smcr_hs_rx_declined(int rc)
{
	return rc == CLC_RX_DECLINED || rc == CLC_RX_DECLINED_SYNC;
}

/*
 * smcr_hs_await_decline() - wait up to @timeout_ms (within the deadline; 0:
 * only look) for a DECLINE at the start of the stream and take it
 * (CLC_RX_DECLINED*, @hs records it). 0 when the stream starts with
 * anything else: the peer is on TCP already and those bytes are its
 * application's, left for ours. Else -ETIMEDOUT or an error.
 * smcr_hs_await_server_decline() - client, after a first contact's
 * CONFIRM_LINK did not come: the server's DECLINE, waited for up to
 * @window_ms; never one of ours (docs/smcr.md "A failed first contact").
 * SMCR_HS_TCP, or an error.
 */
int smcr_hs_await_decline(struct smcr_hs *hs, int timeout_ms);
int smcr_hs_await_server_decline(struct smcr_hs *hs, uint32_t reason, int window_ms);
/* What smcr_hs_await_decline()'s @rc means for such a client. */
int smcr_hs_server_declined(struct smcr_hs *hs, uint32_t reason, int rc);

/* After a step: a DECLINE received (CLC_RX_DECLINED*) is SMCR_HS_TCP. */
int smcr_hs_declined_or(struct smcr_hs *hs, int rc);

/* @sc is established on the handshake's socket: SMCR_HS_SMCR. */
int smcr_hs_established(struct smcr_hs *hs, struct smcr_conn *sc);

#endif
