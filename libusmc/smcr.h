/* SPDX-License-Identifier: MIT */
/*
 * SMC-Rv2 over verbs: device selection, link groups (one RC QP each), the
 * progress thread, LLC flows and the CDC data path. See docs/smcr.md.
 *
 * Locking order: smcr_conn.lock -> lgr.tx_lock. lgr.lock guards the
 * connection table; it is never held while taking a connection's lock.
 */
#ifndef USMC_SMCR_H
#define USMC_SMCR_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "bufpool.h"
#include "cdc.h"
#include "cdc_cursor.h"
#include "clc.h"
#include "llc.h"
#include "opts.h"

struct usmc_ctx;
struct usmc_conn;

#define SMCR_SYSTEM_ID_LEN  8
#define SMCR_UEID_LEN	    32
#define SMCR_DEFAULT_UEID   "LIBUSMC" /* blank padded to 32 bytes */
#define SMCR_RELEASE	    CLC_RELEASE_1
#define SMCR_MAX_CONNS	    255 /* SMC_CONN_PER_LGR_MAX */
#define SMCR_MIN_CONNS	    16	/* v2.1: fewer is MAXCONNERR */
#define SMCR_MAX_LINKS	    1	/* one link per LGR: no ADD_LINK */
#define SMCR_FEATURE_MASK   0x0001
#define SMCR_RX_WRS	    48	 /* posted receives per link (Linux: 48) */
#define SMCR_RX_BUF_LEN	    8192 /* v2 LLC may be this long (SMC_WR_BUF_V2_SIZE) */
#define SMCR_TX_CDC_WRS	    256	 /* send queue entries data may use */
#define SMCR_TX_LLC_WRS	    16	 /* reserved for LLC (responses must always go) */
#define SMCR_MAX_SEND_WR    (SMCR_TX_CDC_WRS + SMCR_TX_LLC_WRS)
#define SMCR_MAX_INLINE	    64	  /* a 44-byte CDC/LLC always goes inline */
#define SMCR_TX_WRS_PER_CDC 4	  /* up to 3 RDMA WRITEs (split at wraps) + the SEND */
#define SMCR_LLC_WAIT_MS    2000  /* SMC_LLC_WAIT_TIME */
#define SMCR_FLOW_WAIT_MS   20000 /* waiting for a running LLC flow to end */
#define SMCR_CL_WAIT_MS	    4000  /* client: 2 x SMC_LLC_WAIT_TIME for CONFIRM_LINK */
#define SMCR_QP_TIMEOUT	    15
#define SMCR_QP_RETRY	    7
#define SMCR_QP_RNR_RETRY   7 /* infinite: there is no credit scheme for SENDs */
#define SMCR_QP_MIN_RNR	    5
#define SMCR_RMBE_IDX	    1 /* one RMBE per RMB, as Linux */
/* SOCK_MIN_SNDBUF / 2 on x86-64 Linux: floor of the consumer update limit */
#define SMCR_CONS_UPDATE_MIN  2304
#define SMCR_TESTLINK_MS      30000 /* SMC_LLC_TESTLINK_DEFAULT_TIME */
#define SMCR_TCP_EOF_GRACE_MS 1000  /* TCP hung up but no close CDC: the peer died */
#define SMCR_DEV_CACHE	      8

/* The port and GID a connection's local IPv4 address maps to. */
struct smcr_dev {
	char name[64];
	uint8_t port;
	int gid_index;
	uint8_t gid[16];
	uint8_t mac[6];
	enum ibv_mtu active_mtu;
};

/* smcr_dev_find() - the RoCE v2 port whose IPv4-mapped GID is @addr. */
int smcr_dev_find(const struct in_addr *addr, struct smcr_dev *dev);

/* One pending signaled send (completions arrive in posting order). */
struct smcr_conn;
struct smcr_tx_pend {
	struct smcr_conn *conn; /* a CDC's connection (holds a reference), NULL for LLC */
	uint16_t nwr;		/* send queue entries it frees */
	uint64_t mark;		/* CDC: bytes of the connection's stream covered */
};

enum lgr_state { LGR_INIT, LGR_ACTIVE, LGR_DEAD };

struct smcr_conn;

struct lgr {
	struct usmc_ctx *ctx;
	struct lgr *next; /* ctx list */
	bool is_server;
	uint32_t id;
	_Atomic int state;
	uint8_t peer_id[SMCR_SYSTEM_ID_LEN];
	uint8_t peer_gid[16];
	uint8_t peer_mac[6];
	uint32_t peer_qpn;
	uint8_t link_num;
	uint8_t max_conns;
	struct smcr_dev dev;
	uint32_t psn;

	struct ibv_context *ib;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *rx_bufs;
	struct ibv_mr *rx_mr;
	struct bufpool *rmbs, *sndbufs;

	/* connections by alert token slot; guarded by lock */
	pthread_mutex_t lock;
	struct smcr_conn *conns[SMCR_MAX_CONNS + 1];
	int nconns;
	long idle_since_ms; /* when nconns dropped to 0 */

	/* send queue: guarded by tx_lock */
	pthread_mutex_t tx_lock;
	int sq_used;
	struct smcr_tx_pend pend[SMCR_MAX_SEND_WR];
	unsigned int pend_head, pend_tail;

	/* LLC: one locally started flow at a time; the response lands in resp */
	pthread_mutex_t flow_lock;
	pthread_mutex_t llc_lock;
	pthread_cond_t llc_cond;
	struct llc_msg llc_resp;
	bool llc_resp_valid;
	uint8_t llc_wait_type;	    /* response type the flow waits for, 0 none */
	struct llc_msg confirm_req; /* client: the server's CONFIRM_LINK */
	bool confirm_req_valid;
	long last_rx_ms;
	atomic_uint_least64_t test_link_answered, test_link_sent;
	atomic_uint_least64_t rkey_confirmed, rkey_deleted; /* peer requests answered */

	long tl_deadline;	 /* TEST_LINK sent: answer due by then, 0 none */
	atomic_bool any_pending; /* some connection waits for send queue room */
	pthread_t thread;
	atomic_bool stop;
	bool thread_started;
	int stop_fd; /* eventfd: ask the progress thread to stop */
	int ep;	     /* epoll: completion channel, stop_fd, connections' TCP sockets */
	atomic_bool tcp_eof_seen;
	atomic_bool test_now; /* a peer looks dead: TEST_LINK at the next tick */
	bool busy_poll;
	long testlink_ms;
	long idle_ms;
	int users; /* finders between lgr_find() and lgr_conn_add(); ctx lock */
};

/* Per-connection SMC-R state (struct usmc_conn.smcr). */
struct smcr_conn {
	struct lgr *lgr;
	atomic_int refs;
	uint32_t token;	     /* ours: the peer writes it into its CDCs */
	uint32_t peer_token; /* the peer's, written into ours */
	struct bufpool_buf *rmb, *sndbuf;
	uint32_t rmb_len, snd_len;
	uint64_t peer_rmb_addr;
	uint32_t peer_rkey, peer_len;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* receive side, byte totals of the stream */
	uint64_t rx_prod;      /* the peer has written up to here */
	uint64_t rx_cons;      /* the application consumed up to here */
	uint64_t rx_cons_sent; /* consumer cursor last told to the peer */
	uint16_t rx_seq;
	bool rx_seq_seen;
	bool peer_write_blocked, peer_done_writing, peer_closed, peer_abort;
	bool cons_update_due;
	bool early_valid; /* a CDC came before the CLC told us the peer's RMB */
	struct cdc_msg early;
	/* send side */
	uint64_t tx_prep; /* copied into the send buffer */
	uint64_t tx_sent; /* RDMA-written to the peer */
	uint64_t tx_fin;  /* CDC completed: send buffer space free again */
	uint64_t peer_cons;
	uint16_t tx_seq;
	bool tx_pending; /* something to send once send queue space frees */
	bool shut_wr, shut_wr_sent, shut_rd, closed, closed_sent, aborting, abort_sent;
	bool orphan;	    /* usmc_close() done: freed when the peer closes */
	int err;	    /* sticky negative errno (LGR down, protocol error) */
	bool err_after_eof; /* err came after the peer's clean close: reads see EOF */
	/* readiness: the user polls ev[0] (see docs/smcr.md) */
	int ev[2];
	bool rd_sig, wr_blocked_sig;
	int tcp_fd;	 /* watched for the peer's death; -1 once closed */
	long tcp_eof_ms; /* the TCP socket hung up then (0: not) */
};

/* ---- context level (smcr_ctx in ctx.c) ---- */
struct smcr_ctx {
	pthread_mutex_t lock;		/* the LGR list */
	pthread_mutex_t create_lock[2]; /* per role: LGR lookup/creation through CONFIRM_LINK */
	struct lgr *lgrs;
	uint8_t system_id[SMCR_SYSTEM_ID_LEN];
	uint8_t ueid[SMCR_UEID_LEN];
	atomic_uint token_seq;
	atomic_uint lgr_seq;
	atomic_uint_least64_t lgrs_created;
	atomic_int lgrs_open;
	/* last device lookups (address -> port/GID), so that a PROPOSAL leaves
	 * right after the connect instead of after a GID table scan */
	pthread_mutex_t dev_lock;
	struct in_addr dev_addr[SMCR_DEV_CACHE];
	struct smcr_dev dev_cache[SMCR_DEV_CACHE];
	int dev_n;
};

/* smcr_dev_lookup() - smcr_dev_find() through the context's cache. */
int smcr_dev_lookup(struct smcr_ctx *s, const struct in_addr *addr, struct smcr_dev *dev);

int smcr_ctx_init(struct smcr_ctx *s);
/* smcr_ctx_ueid() - a copy of the context's UEID (blank padded). */
void smcr_ctx_ueid(struct usmc_ctx *ctx, uint8_t out[SMCR_UEID_LEN]);
void smcr_ctx_fini(struct smcr_ctx *s);
/* smcr_ueid_pad() - validate and blank-pad a UEID (A-Z 0-9 . -). */
int smcr_ueid_pad(const char *in, uint8_t out[SMCR_UEID_LEN]);

/* ---- link groups (lgr.c) ---- */
int lgr_create(struct usmc_ctx *ctx, bool is_server, const struct smcr_dev *dev, struct lgr **out);
/* QP to RTR (receives already posted) and, with @rts, on to RTS. */
int lgr_qp_rtr(struct lgr *lgr, uint32_t peer_qpn, uint32_t peer_psn, const uint8_t peer_gid[16],
	       enum ibv_mtu mtu);
int lgr_qp_rts(struct lgr *lgr);
int lgr_start(struct lgr *lgr);
/* Publish a handshaken LGR for reuse (ctx list). */
void lgr_publish(struct lgr *lgr);
/* Terminate (abort connections) and free an LGR no one else can reach. */
void lgr_free(struct lgr *lgr);
/* Mark dead and abort every connection (from any thread). */
void lgr_terminate(struct lgr *lgr, int err, bool send_delete);
/* Find an active LGR of @role with that peer (ctx list). */
/* Find an active LGR of @role with that peer; the caller must lgr_unuse()
 * it once its connection is added (an LGR in use is never reaped). */
struct lgr *lgr_find(struct usmc_ctx *ctx, bool is_server, const uint8_t peer_id[8],
		     const uint8_t peer_gid[16], uint32_t peer_qpn, bool match_qpn);
void lgr_unuse(struct lgr *lgr);
int lgr_llc_send(struct lgr *lgr, const struct llc_msg *m);
/* Run one LLC flow: send @req, wait for its response (SMCR_LLC_WAIT_MS). */
int lgr_llc_flow(struct lgr *lgr, const struct llc_msg *req, struct llc_msg *resp);
/* Client: wait for the server's CONFIRM_LINK request. */
int lgr_wait_confirm_link(struct lgr *lgr, int timeout_ms, struct llc_msg *req);
/* Post @n WRs (the last one signaled) recording @pend; -EAGAIN if no room. */
int lgr_post_send(struct lgr *lgr, struct ibv_send_wr *wr, int n, const struct smcr_tx_pend *p,
		  bool llc);
int lgr_conn_add(struct lgr *lgr, struct smcr_conn *sc);
void lgr_conn_del(struct lgr *lgr, struct smcr_conn *sc);
/* The link group's connections, each with a reference the caller drops
 * (smcr_conn_put): a snapshot to work on without holding the LGR lock. */
int lgr_conns_get(struct lgr *lgr, struct smcr_conn *list[SMCR_MAX_CONNS + 1]);
struct smcr_conn *lgr_conn_get(struct lgr *lgr, uint32_t token);
void lgr_destroy_all(struct usmc_ctx *ctx);

/* ---- connections (smcr_conn.c) ---- */
int smcr_conn_new(struct lgr *lgr, const struct usmc_opts *opts, struct smcr_conn **out);
void smcr_conn_put(struct smcr_conn *sc);
void smcr_conn_set_peer(struct smcr_conn *sc, const struct clc_accept_confirm *m);
/* Handlers called by the progress thread. */
void smcr_cdc_rx(struct lgr *lgr, const uint8_t *buf, uint32_t len);
void smcr_tx_done(struct lgr *lgr, const struct smcr_tx_pend *p);
/* Fail @sc; returns true if it is an orphan (closed by the user). */
bool smcr_conn_fail(struct smcr_conn *sc, int err);
/* Watch @sc's TCP socket: a peer that dies closes it (hang-up). */
void lgr_watch_tcp(struct lgr *lgr, struct smcr_conn *sc, int fd);
void lgr_unwatch_tcp(struct lgr *lgr, struct smcr_conn *sc);
/* Progress thread: TCP hang-up of a connection / check the grace times. */
void smcr_tcp_hup(struct lgr *lgr, uint32_t token);
void smcr_tcp_eof_check(struct lgr *lgr);
void smcr_kick_pending(struct lgr *lgr);

ssize_t smcr_sendv(struct usmc_conn *c, const struct iovec *iov, int iovcnt, int flags);
ssize_t smcr_recvv(struct usmc_conn *c, const struct iovec *iov, int iovcnt, int flags);
int smcr_shutdown(struct usmc_conn *c, int how);
void smcr_close(struct usmc_conn *c, bool abort);

/* ---- handshakes (smcr_clc.c) ---- */
/* Client: after the TCP connect. Sets the mode (SMC-R or TCP) or fails. */
int smcr_clc_connect(struct usmc_conn *c);
/* Server: answer the decoded v2 PROPOSAL. */
int smcr_clc_serve(struct usmc_conn *c, const struct clc_proposal *prop);

long smcr_now_ms(void);

#endif
