/* SPDX-License-Identifier: MIT */
/*
 * A hostile SMC-Rv2 peer for the rxe tests: it speaks the real
 * wire, not libusmc's internals. CLC over its own TCP socket, LLC and CDC
 * as SENDs on its own RC QP (raw verbs, as test_rxe_write.c), data as RDMA
 * WRITEs into the server's RMB. Messages are built with libusmc's codecs
 * (wire/clc.h, llc.h, cdc.h), so what it sends is well-formed unless a
 * scenario says otherwise.
 *
 * One struct hp_link is one link group seen from the peer: a system ID, a
 * device, one QP. Its first hp_connect() runs a first contact (PROPOSAL,
 * ACCEPT, CONFIRM, LLC CONFIRM_LINK answered); later ones reuse it
 * (CONFIRM_RKEY answered, ACCEPT, CONFIRM). The peer is single-threaded:
 * nothing is received unless the caller calls hp_poll() (hp_connect() and
 * the waits poll for it); LLC requests are answered while polling,
 * according to the link's policy flags.
 *
 * Client role (hp_connect) against a usmc server, and a minimal server role
 * (hp_listen, hp_serve: one first contact per link) against a usmc client.
 * In the server role the srv_* fields of a connection describe the
 * client's RMB: "srv" is always the usmc side.
 */
#ifndef USMC_TEST_HOSTILE_PEER_H
#define USMC_TEST_HOSTILE_PEER_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "cdc.h"
#include "clc.h"
#include "llc.h"

#define HP_RX_WRS     32
#define HP_RX_BUF_LEN 8192
#define HP_TX_BUF_LEN (16 * 1024) /* large enough for an oversized SEND */
#define HP_RMB_CLASS  0		  /* 16 KiB RMB per connection */
#define HP_MAX_CONNS  8

struct hp_link;

/* When hp_link.sock_hook is called. */
enum hp_sock_stage { HP_SOCK_CONNECT, HP_SOCK_LISTEN, HP_SOCK_LISTENING };

struct hp_conn {
	struct hp_link *lk;
	int fd;	       /* TCP: CLC */
	uint16_t port; /* our TCP port (the server's view of the peer) */
	bool established;
	/* CLC outcome: ACCEPT received, or a DECLINE's diagnosis */
	bool declined;
	uint32_t decline_diag;
	struct clc_accept_confirm acc; /* the server's ACCEPT */
	/* the server's RMB (from the ACCEPT) */
	uint32_t srv_token, srv_rkey, srv_len;
	uint64_t srv_addr;
	/* our RMB */
	uint8_t *rmb;
	struct ibv_mr *rmb_mr;
	uint32_t token, rmb_len;
	/* stream state as far as an honest peer would keep it */
	uint16_t seqno;		/* last CDC seqno sent */
	uint64_t tx_prod;	/* bytes written into the server's RMB */
	uint64_t rx_prod;	/* bytes the server wrote into ours (its CDCs) */
	uint64_t rx_cons;	/* bytes we consumed of them */
	struct cdc_msg last_rx; /* the server's last CDC */
	unsigned cdcs_rx;
	unsigned upd_reqs; /* the server's CDCs with CONS_CURS_UPD_REQ */
	/* flags every CDC of hp_cdc_now() carries (Linux keeps them in its
	 * local_tx_ctrl until a write changes them), 0 by default */
	uint8_t tx_prod_flags, tx_state_flags;
	bool srv_abort, srv_closed, srv_done;
};

struct hp_link {
	/* verbs */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *rx_mr, *tx_mr;
	uint8_t *rx_bufs, *tx_buf;
	int gid_index;
	uint8_t gid[16], mac[6];
	enum ibv_mtu mtu;
	uint32_t psn;
	/* who we claim to be */
	uint8_t peer_id[CLC_PEER_ID_LEN];
	uint8_t ueid[CLC_EID_LEN];
	struct sockaddr_in bind; /* source address of the TCP connections (port 0) */
	/* the server's end of the link */
	bool up; /* CONFIRM_LINK done */
	uint32_t srv_qpn;
	uint8_t link_num;
	/* policy */
	bool answer_rkey;     /* answer CONFIRM_RKEY requests (default true) */
	bool answer_testlink; /* answer TEST_LINK requests (default true) */
	/* what arrived */
	unsigned rkey_reqs, testlink_reqs, delete_links, llc_rx, cdc_rx;
	struct llc_msg last_llc; /* the last LLC request or response */
	bool confirm_link_seen;
	struct llc_msg confirm_link;
	int qp_err;	    /* first failed completion's status, else 0 */
	uint64_t wr_next;   /* wr_id of the next send */
	uint64_t wr_done;   /* highest signaled send completed */
	int wr_status_last; /* status of the completion of wr_done */
	struct hp_conn *conns[HP_MAX_CONNS];
	int nconns;
	/* called (if set) with each TCP socket the peer makes: before its
	 * connect() or listen(), and after listen(); e.g. to mark it for
	 * kernel-compat mode, so that the kernel's SMC (and usmc in that
	 * mode) sees an SMC peer in its SYN or SYN-ACK */
	void (*sock_hook)(int fd, enum hp_sock_stage stage, void *arg);
	void *sock_hook_arg;
};

/*
 * Open the device @dev (NULL: USMC_TEST_RXE_A), find the IPv4-mapped RoCE v2
 * GID of @src (the TCP source address), create the QP in INIT with its
 * receives posted; a random system ID, the default UEID "LIBUSMC".
 */
void hp_link_open(struct hp_link *lk, const char *dev, const struct sockaddr_in *src);
void hp_link_close(struct hp_link *lk);

/* TCP connect to @srv from the link's address and send the PROPOSAL; the
 * connection is not established yet. @p (optional) edits the PROPOSAL. */
void hp_propose(struct hp_link *lk, struct hp_conn *c, const struct sockaddr_in *srv,
		void (*edit)(struct clc_proposal *p, void *arg), void *arg);
/* Wait for the ACCEPT or a DECLINE (polling the link meanwhile, so a
 * CONFIRM_RKEY is answered per policy); 0 ACCEPT, 1 DECLINE, -ETIMEDOUT,
 * -EPROTO (EOF or garbage). */
int hp_await_accept(struct hp_conn *c, int timeout_ms);
/* Send the CONFIRM for the ACCEPT (first contact: QP to RTR first, then
 * wait for CONFIRM_LINK, go to RTS and answer it). @edit may lie. Returns 0
 * or a negative errno. */
int hp_confirm(struct hp_conn *c, void (*edit)(struct clc_accept_confirm *m, void *arg), void *arg);
/* The bytes of the CONFIRM hp_confirm() would send (a scenario sends them
 * its own way); their length, or a negative WIRE_E_* code. */
int hp_confirm_bytes(struct hp_conn *c, uint8_t *buf, size_t cap);
/* The bytes of the PROPOSAL hp_propose() would send from @lk. */
int hp_proposal_bytes(const struct hp_link *lk, uint8_t *buf, size_t cap);
/* hp_propose + hp_await_accept + hp_confirm, all must succeed. */
void hp_connect(struct hp_link *lk, struct hp_conn *c, const struct sockaddr_in *srv);
/* Close the TCP socket (no close CDC: a rude peer). */
void hp_conn_drop(struct hp_conn *c);

/* Process completions for up to @ms (0: what is there now). Returns the
 * number of completions handled. */
int hp_poll(struct hp_link *lk, int ms);

/* Post one signaled send WR and wait up to @ms for its completion; returns
 * the completion status (IBV_WC_SUCCESS = 0), or -ETIMEDOUT, or the
 * negative errno of ibv_post_send. */
int hp_post_wait(struct hp_link *lk, struct ibv_send_wr *wr, int ms);

/* RDMA WRITE of @len bytes of @data at byte @off of the server's RMB
 * (no bounds check: callers lie on purpose). @imm: WRITE WITH IMM. */
int hp_write_raw(struct hp_conn *c, uint64_t off, const void *data, uint32_t len, bool imm, int ms);
/* A SEND of @len bytes (from the send buffer) on the link. */
int hp_send_raw(struct hp_link *lk, const void *data, uint32_t len, int ms);
/* A CDC: @m's token/seqno are taken as given. */
int hp_send_cdc(struct hp_conn *c, const struct cdc_msg *m);
/* The CDC an honest peer would send now, seqno advanced. */
struct cdc_msg hp_cdc_now(struct hp_conn *c);
/* An LLC message on the link. */
int hp_send_llc(struct hp_link *lk, const struct llc_msg *m);

/* Honest data: write @len bytes into the server's RMB where the stream
 * is, then a CDC; keeps the window. */
int hp_send_data(struct hp_conn *c, const void *data, uint32_t len);
/* Wait up to @ms until the server has written @len bytes for us beyond
 * what we consumed; copy them out and consume them (a credit CDC follows).
 * Returns the bytes copied. */
uint32_t hp_recv_data(struct hp_conn *c, void *buf, uint32_t len, int ms);

/* Server role: a TCP listener on the link's address (port chosen by the
 * kernel, returned in @bound). */
int hp_listen(struct hp_link *lk, struct sockaddr_in *bound);
/* Accept one usmc client on @lfd and run a first contact: PROPOSAL, ACCEPT
 * with our QP and RMB, CONFIRM, QP to RTS, then (if @confirm_link) the LLC
 * CONFIRM_LINK request and its response. 0 when established (or, without
 * @confirm_link, when the CONFIRM arrived), 1 when the client declined,
 * else a negative errno. */
int hp_serve(struct hp_link *lk, struct hp_conn *c, int lfd, bool confirm_link);

#endif
