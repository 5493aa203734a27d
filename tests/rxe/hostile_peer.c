// SPDX-License-Identifier: MIT
/*
 * The hostile SMC-Rv2 peer (hostile_peer.h): raw verbs and libusmc's codecs.
 * Every verbs call is checked; the peer dies (test failure) on a local
 * error, and reports the server's answers (completion status, DECLINE,
 * silence) to the scenario, which judges them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/check.h"
#include "hostile_peer.h"
#include "mono_clock.h"

#define HP_CQE	      128
#define HP_SEND_WRS   64
#define HP_WAIT_MS    5000
#define HP_CL_WAIT_MS 4000 /* CONFIRM_LINK, as libusmc's client */
#define HP_RX_TAG     (1ull << 62)

#define HP_PTR(expr)                                         \
	({                                                   \
		__typeof__(expr) _p = (expr);                \
		CHECK(_p, "%s: %s", #expr, strerror(errno)); \
		_p;                                          \
	})
#define HP_RC(expr)                                                            \
	do {                                                                   \
		int _rc = (expr);                                              \
		CHECK(!_rc, "%s: %s", #expr, strerror(_rc < 0 ? errno : _rc)); \
	} while (0)

/* ---- device ---------------------------------------------------------- */

static struct ibv_context *open_dev(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;

	CHECK(list && n > 0, "no RDMA device (run in the guest)");
	for (int i = 0; i < n && !ctx; i++)
		if (!name || !*name || !strcmp(ibv_get_device_name(list[i]), name))
			ctx = HP_PTR(ibv_open_device(list[i]));
	ibv_free_device_list(list);
	CHECK(ctx, "no RDMA device named %s", name);
	return ctx;
}

/* The IPv4-mapped RoCE v2 GID of @addr on port 1, its netdev's MAC. */
static void find_gid(struct hp_link *lk, struct in_addr addr)
{
	struct ibv_port_attr port;
	struct ibv_gid_entry *e;
	ssize_t n;

	HP_RC(ibv_query_port(lk->ctx, 1, &port));
	CHECK(port.state == IBV_PORT_ACTIVE, "port 1 not active");
	lk->mtu = port.active_mtu;
	e = HP_PTR(calloc(port.gid_tbl_len, sizeof(*e)));
	n = ibv_query_gid_table(lk->ctx, e, (size_t)port.gid_tbl_len, 0);
	CHECK(n >= 0, "ibv_query_gid_table: %s", strerror((int)-n));
	lk->gid_index = -1;
	for (ssize_t i = 0; i < n; i++) {
		static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		char ifname[IF_NAMESIZE];
		struct ifreq ifr = {0};
		int s;

		if (e[i].port_num != 1 || e[i].gid_type != IBV_GID_TYPE_ROCE_V2 ||
		    memcmp(e[i].gid.raw, v4, 12) || memcmp(e[i].gid.raw + 12, &addr, 4))
			continue;
		lk->gid_index = (int)e[i].gid_index;
		memcpy(lk->gid, e[i].gid.raw, 16);
		if (if_indextoname(e[i].ndev_ifindex, ifname)) {
			s = socket(AF_INET, SOCK_DGRAM, 0);
			snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
			if (s >= 0 && !ioctl(s, SIOCGIFHWADDR, &ifr))
				memcpy(lk->mac, ifr.ifr_hwaddr.sa_data, 6);
			if (s >= 0)
				close(s);
		}
		break;
	}
	free(e);
	CHECK(lk->gid_index >= 0, "no RoCE v2 GID for %s on %s", inet_ntoa(addr),
	      ibv_get_device_name(lk->ctx->device));
}

static void post_recv(struct hp_link *lk, uint32_t idx)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(lk->rx_bufs + (size_t)idx * HP_RX_BUF_LEN),
			      .length = HP_RX_BUF_LEN,
			      .lkey = lk->rx_mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = HP_RX_TAG | idx, .sg_list = &sge, .num_sge = 1}, *bad;

	HP_RC(ibv_post_recv(lk->qp, &wr, &bad));
}

void hp_link_open(struct hp_link *lk, const char *dev, const struct sockaddr_in *src)
{
	struct ibv_qp_init_attr ia = {0};
	struct ibv_qp_attr a = {0};

	memset(lk, 0, sizeof(*lk));
	lk->ctx = open_dev(dev ? dev : getenv("USMC_TEST_RXE_A"));
	lk->bind = *src;
	lk->bind.sin_port = 0;
	find_gid(lk, src->sin_addr);
	lk->pd = HP_PTR(ibv_alloc_pd(lk->ctx));
	lk->cq = HP_PTR(ibv_create_cq(lk->ctx, HP_CQE, NULL, NULL, 0));
	lk->rx_bufs = HP_PTR(aligned_alloc(4096, (size_t)HP_RX_WRS * HP_RX_BUF_LEN));
	lk->rx_mr = HP_PTR(ibv_reg_mr(lk->pd, lk->rx_bufs, (size_t)HP_RX_WRS * HP_RX_BUF_LEN,
				      IBV_ACCESS_LOCAL_WRITE));
	lk->tx_buf = HP_PTR(aligned_alloc(4096, HP_TX_BUF_LEN));
	memset(lk->tx_buf, 0, HP_TX_BUF_LEN);
	lk->tx_mr = HP_PTR(ibv_reg_mr(lk->pd, lk->tx_buf, HP_TX_BUF_LEN, IBV_ACCESS_LOCAL_WRITE));
	ia.send_cq = lk->cq;
	ia.recv_cq = lk->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = HP_SEND_WRS;
	ia.cap.max_recv_wr = HP_RX_WRS;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = 64;
	lk->qp = HP_PTR(ibv_create_qp(lk->pd, &ia));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	HP_RC(ibv_modify_qp(lk->qp, &a,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	for (uint32_t i = 0; i < HP_RX_WRS; i++)
		post_recv(lk, i);
	CHECK(getrandom(lk->peer_id, sizeof(lk->peer_id), 0) == sizeof(lk->peer_id), "getrandom");
	CHECK(getrandom(&lk->psn, sizeof(lk->psn), 0) == sizeof(lk->psn), "getrandom");
	lk->psn &= 0xffffff;
	memset(lk->ueid, ' ', sizeof(lk->ueid));
	memcpy(lk->ueid, "LIBUSMC", 7);
	lk->answer_rkey = true;
	lk->answer_testlink = true;
}

void hp_link_close(struct hp_link *lk)
{
	for (int i = 0; i < lk->nconns; i++) {
		struct hp_conn *c = lk->conns[i];

		if (c->fd >= 0)
			close(c->fd);
		c->fd = -1;
	}
	if (lk->qp)
		ibv_destroy_qp(lk->qp);
	for (int i = 0; i < lk->nconns; i++) {
		struct hp_conn *c = lk->conns[i];

		if (c->rmb_mr)
			ibv_dereg_mr(c->rmb_mr);
		free(c->rmb);
		c->rmb_mr = NULL;
		c->rmb = NULL;
	}
	ibv_dereg_mr(lk->rx_mr);
	ibv_dereg_mr(lk->tx_mr);
	ibv_destroy_cq(lk->cq);
	ibv_dealloc_pd(lk->pd);
	ibv_close_device(lk->ctx);
	free(lk->rx_bufs);
	free(lk->tx_buf);
	lk->qp = NULL;
}

/* ---- send ------------------------------------------------------------ */

static uint64_t hp_post(struct hp_link *lk, struct ibv_send_wr *wr, int *err)
{
	struct ibv_send_wr *bad;

	wr->wr_id = ++lk->wr_next;
	wr->send_flags |= IBV_SEND_SIGNALED;
	wr->next = NULL;
	*err = ibv_post_send(lk->qp, wr, &bad);
	return wr->wr_id;
}

int hp_post_wait(struct hp_link *lk, struct ibv_send_wr *wr, int ms)
{
	int err;
	uint64_t id = hp_post(lk, wr, &err);
	double deadline = mono_s() + ms / 1e3;

	if (err)
		return -err;
	while (lk->wr_done < id) {
		if (mono_s() > deadline)
			return -ETIMEDOUT;
		hp_poll(lk, 5);
	}
	return lk->wr_status_last;
}

static int send_inline(struct hp_link *lk, const uint8_t *buf, uint32_t len, bool wait)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len};
	struct ibv_send_wr wr = {.sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_INLINE | IBV_SEND_SOLICITED};
	int err;

	if (wait)
		return hp_post_wait(lk, &wr, HP_WAIT_MS);
	hp_post(lk, &wr, &err);
	return -err;
}

int hp_send_llc(struct hp_link *lk, const struct llc_msg *m)
{
	uint8_t buf[LLC_MSG_LEN];
	int len = llc_encode(m, buf, sizeof(buf));

	CHECK(len > 0, "llc_encode: %d", len);
	return send_inline(lk, buf, (uint32_t)len, true);
}

int hp_send_raw(struct hp_link *lk, const void *data, uint32_t len, int ms)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)lk->tx_buf, .length = len, .lkey = lk->tx_mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};

	CHECK(len <= HP_TX_BUF_LEN, "send of %u bytes", len);
	memcpy(lk->tx_buf, data, len);
	return hp_post_wait(lk, &wr, ms);
}

int hp_write_raw(struct hp_conn *c, uint64_t off, const void *data, uint32_t len, bool imm, int ms)
{
	struct hp_link *lk = c->lk;
	struct ibv_sge sge = {
		.addr = (uintptr_t)lk->tx_buf, .length = len, .lkey = lk->tx_mr->lkey};
	struct ibv_send_wr wr = {
		.sg_list = len ? &sge : NULL,
		.num_sge = len ? 1 : 0,
		.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
		.imm_data = htonl(0x5ca1ab1e),
		.wr.rdma = {.remote_addr = c->srv_addr + off, .rkey = c->srv_rkey}};

	CHECK(len <= HP_TX_BUF_LEN, "write of %u bytes", len);
	if (len)
		memcpy(lk->tx_buf, data, len);
	return hp_post_wait(lk, &wr, ms);
}

int hp_send_cdc(struct hp_conn *c, const struct cdc_msg *m)
{
	uint8_t buf[CDC_MSG_LEN];

	CHECK(cdc_encode(m, buf, sizeof(buf)) == CDC_MSG_LEN, "cdc_encode");
	return send_inline(c->lk, buf, CDC_MSG_LEN, true);
}

struct cdc_msg hp_cdc_now(struct hp_conn *c)
{
	return (struct cdc_msg){
		.seqno = ++c->seqno,
		.token = c->srv_token,
		.prod = cdc_curs_add((struct cdc_cursor){0, 0}, c->tx_prod, c->srv_len),
		.cons = cdc_curs_add((struct cdc_cursor){0, 0}, c->rx_cons, c->rmb_len),
		.prod_flags = c->tx_prod_flags,
		.conn_state_flags = c->tx_state_flags};
}

int hp_send_data(struct hp_conn *c, const void *data, uint32_t len)
{
	uint32_t off = (uint32_t)(c->tx_prod % c->srv_len), n1 = len;
	struct cdc_msg m;
	int rc;

	if (n1 > c->srv_len - off)
		n1 = c->srv_len - off;
	rc = hp_write_raw(c, off, data, n1, false, HP_WAIT_MS);
	if (!rc && len > n1)
		rc = hp_write_raw(c, 0, (const uint8_t *)data + n1, len - n1, false, HP_WAIT_MS);
	if (rc)
		return rc;
	c->tx_prod += len;
	m = hp_cdc_now(c);
	return hp_send_cdc(c, &m);
}

uint32_t hp_recv_data(struct hp_conn *c, void *buf, uint32_t len, int ms)
{
	double deadline = mono_s() + ms / 1e3;
	struct cdc_msg m;

	while (c->rx_prod - c->rx_cons < len && mono_s() < deadline && !c->lk->qp_err)
		hp_poll(c->lk, 5);
	if (c->rx_prod - c->rx_cons < len)
		len = (uint32_t)(c->rx_prod - c->rx_cons);
	for (uint32_t i = 0; i < len; i++)
		((uint8_t *)buf)[i] = c->rmb[(c->rx_cons + i) % c->rmb_len];
	c->rx_cons += len;
	if (len) {
		m = hp_cdc_now(c);
		hp_send_cdc(c, &m);
	}
	return len;
}

/* ---- receive --------------------------------------------------------- */

static void rx_cdc(struct hp_link *lk, const uint8_t *buf, uint32_t len)
{
	struct cdc_msg m;

	lk->cdc_rx++;
	if (cdc_decode(buf, len, &m))
		return;
	for (int i = 0; i < lk->nconns; i++) {
		struct hp_conn *c = lk->conns[i];
		uint64_t ahead;

		if (c->token != m.token)
			continue;
		c->cdcs_rx++;
		c->last_rx = m;
		if (m.prod_flags & CDC_PF_CONS_CURS_UPD_REQ)
			c->upd_reqs++;
		/* the server's producer cursor, as a stream total near ours */
		ahead = cdc_curs_diff(
			cdc_curs_add((struct cdc_cursor){0, 0}, c->rx_prod, c->rmb_len), m.prod,
			c->rmb_len);
		c->rx_prod += ahead;
		if (m.conn_state_flags & CDC_CS_PEER_CONN_ABORT)
			c->srv_abort = true;
		if (m.conn_state_flags & CDC_CS_PEER_CONN_CLOSED)
			c->srv_closed = true;
		if (m.conn_state_flags & CDC_CS_PEER_DONE_WRITING)
			c->srv_done = true;
	}
}

static void rx_llc(struct hp_link *lk, const uint8_t *buf, uint32_t len)
{
	struct llc_msg m;

	lk->llc_rx++;
	if (llc_decode(buf, len, &m))
		return;
	lk->last_llc = m;
	if (m.flags & LLC_FLAG_RESP)
		return;
	switch (m.type) {
	case LLC_CONFIRM_LINK:
		lk->confirm_link = m;
		lk->confirm_link_seen = true;
		return;
	case LLC_CONFIRM_RKEY:
		lk->rkey_reqs++;
		if (!lk->answer_rkey)
			return;
		llc_confirm_rkey_response(&m, true);
		break;
	case LLC_TEST_LINK:
		lk->testlink_reqs++;
		if (!lk->answer_testlink)
			return;
		llc_make_response(&m);
		break;
	case LLC_DELETE_RKEY: {
		bool unknown[LLC_V2_DEL_RKEY_MAX] = {false};

		llc_delete_rkey_response(&m, unknown);
		break;
	}
	case LLC_DELETE_LINK:
		lk->delete_links++;
		return;
	default:
		return;
	}
	{
		uint8_t out[LLC_MSG_LEN];
		int n = llc_encode(&m, out, sizeof(out));

		if (n > 0)
			send_inline(lk, out, (uint32_t)n, false);
	}
}

int hp_poll(struct hp_link *lk, int ms)
{
	double deadline = mono_s() + ms / 1e3;
	int total = 0;

	for (;;) {
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(lk->cq, 16, wc);

		CHECK(n >= 0, "ibv_poll_cq: %d", n);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS && !lk->qp_err) {
				lk->qp_err = wc[i].status;
				fprintf(stderr, "hostile peer: completion %s (opcode %d)\n",
					ibv_wc_status_str(wc[i].status), wc[i].opcode);
			}
			if (wc[i].wr_id & HP_RX_TAG) {
				uint32_t idx = (uint32_t)(wc[i].wr_id & ~HP_RX_TAG);
				const uint8_t *b = lk->rx_bufs + (size_t)idx * HP_RX_BUF_LEN;

				if (wc[i].status != IBV_WC_SUCCESS)
					continue;
				if (wc[i].byte_len >= 1 && b[0] == CDC_MSG_TYPE)
					rx_cdc(lk, b, wc[i].byte_len);
				else
					rx_llc(lk, b, wc[i].byte_len);
				post_recv(lk, idx);
			} else {
				lk->wr_done = wc[i].wr_id;
				lk->wr_status_last = (int)wc[i].status;
			}
		}
		total += n;
		if (n)
			continue;
		if (mono_s() >= deadline)
			return total;
		usleep(500);
	}
}

/* ---- CLC ------------------------------------------------------------- */

static void send_all_fd(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		CHECK(n > 0, "hostile peer: TCP send: %s", strerror(errno));
		buf += n;
		len -= (size_t)n;
	}
}

/* A connection's RMB and token; it joins the link's table. */
static void conn_init(struct hp_link *lk, struct hp_conn *c)
{
	CHECK(lk->nconns < HP_MAX_CONNS, "too many hostile connections");
	memset(c, 0, sizeof(*c));
	c->lk = lk;
	c->fd = -1;
	c->rmb_len = 16384u << HP_RMB_CLASS;
	c->rmb = HP_PTR(aligned_alloc(4096, c->rmb_len));
	memset(c->rmb, 0, c->rmb_len);
	c->rmb_mr = HP_PTR(ibv_reg_mr(lk->pd, c->rmb, c->rmb_len,
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	c->token = 0x4800u + (uint32_t)lk->nconns + 1;
	lk->conns[lk->nconns++] = c;
}

/* The PROPOSAL of an honest SMC-Rv2 client on @lk. */
static void build_proposal(const struct hp_link *lk, struct clc_proposal *pp)
{
	struct clc_proposal p = {0};

	p.version = CLC_V2;
	p.typev1 = CLC_TYPE_N;
	p.typev2 = CLC_TYPE_R;
	memcpy(p.peer_id, lk->peer_id, CLC_PEER_ID_LEN);
	memcpy(p.gid, lk->gid, CLC_GID_LEN);
	memcpy(p.mac, lk->mac, CLC_MAC_LEN);
	p.has_smcd_info = true;
	p.has_v2_ext = true;
	p.eid_count = 1;
	memcpy(p.eid[0], lk->ueid, CLC_EID_LEN);
	p.release = CLC_RELEASE_1;
	memcpy(p.roce_gid, lk->gid, CLC_GID_LEN);
	p.max_conns = 255;
	p.max_links = 1;
	p.feature_mask = 1;
	*pp = p;
}

int hp_proposal_bytes(const struct hp_link *lk, uint8_t *buf, size_t cap)
{
	struct clc_proposal p;

	build_proposal(lk, &p);
	return clc_proposal_encode(&p, buf, cap);
}

void hp_propose(struct hp_link *lk, struct hp_conn *c, const struct sockaddr_in *srv,
		void (*edit)(struct clc_proposal *p, void *arg), void *arg)
{
	struct clc_proposal p = {0};
	struct sockaddr_in me;
	socklen_t sl = sizeof(me);
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	struct timeval tv = {.tv_sec = 8};
	int len;

	conn_init(lk, c);
	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(c->fd >= 0, "socket");
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	CHECK(!bind(c->fd, (const struct sockaddr *)&lk->bind, sizeof(lk->bind)),
	      "hostile peer: bind %s: %s", inet_ntoa(lk->bind.sin_addr), strerror(errno));
	if (lk->sock_hook)
		lk->sock_hook(c->fd, HP_SOCK_CONNECT, lk->sock_hook_arg);
	CHECK(!connect(c->fd, (const struct sockaddr *)srv, sizeof(*srv)),
	      "hostile peer: connect: %s", strerror(errno));
	CHECK(!getsockname(c->fd, (struct sockaddr *)&me, &sl), "getsockname");
	c->port = ntohs(me.sin_port);

	build_proposal(lk, &p);
	if (edit)
		edit(&p, arg);
	len = clc_proposal_encode(&p, buf, sizeof(buf));
	CHECK(len > 0, "clc_proposal_encode: %d", len);
	send_all_fd(c->fd, buf, (size_t)len);
}

static int recv_full(int fd, uint8_t *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = recv(fd, buf + got, len - got, 0);

		if (n <= 0)
			return -EPROTO;
		got += (size_t)n;
	}
	return 0;
}

int hp_await_accept(struct hp_conn *c, int timeout_ms)
{
	double deadline = mono_s() + timeout_ms / 1e3;
	uint8_t buf[CLC_MAX_LEN];
	struct clc_hdr hdr;

	for (;;) {
		struct pollfd pfd = {.fd = c->fd, .events = POLLIN};

		if (poll(&pfd, 1, 5) > 0)
			break;
		hp_poll(c->lk, 0);
		if (mono_s() > deadline)
			return -ETIMEDOUT;
	}
	if (recv_full(c->fd, buf, CLC_HDR_LEN) || clc_hdr_decode(buf, CLC_HDR_LEN, &hdr) ||
	    recv_full(c->fd, buf + CLC_HDR_LEN, hdr.length - CLC_HDR_LEN))
		return -EPROTO;
	if (hdr.type == CLC_DECLINE) {
		struct clc_decline d;

		if (clc_decline_decode(buf, hdr.length, &d))
			return -EPROTO;
		c->declined = true;
		c->decline_diag = d.diagnosis;
		return 1;
	}
	if (hdr.type != CLC_ACCEPT || clc_accept_confirm_decode(buf, hdr.length, &c->acc))
		return -EPROTO;
	c->srv_token = c->acc.rmbe_alert_token;
	c->srv_rkey = c->acc.rmb_rkey;
	c->srv_len = 16384u << c->acc.rmbe_size;
	c->srv_addr = c->acc.rmb_dma_addr + (uint64_t)(c->acc.rmbe_idx - 1) * c->srv_len;
	return 0;
}

static void qp_rtr(struct hp_link *lk, const struct clc_accept_confirm *a)
{
	struct ibv_qp_attr q = {0};

	q.qp_state = IBV_QPS_RTR;
	q.path_mtu =
		a->qp_mtu && (enum ibv_mtu)a->qp_mtu < lk->mtu ? (enum ibv_mtu)a->qp_mtu : lk->mtu;
	q.dest_qp_num = a->qpn;
	q.rq_psn = a->psn;
	q.max_dest_rd_atomic = 1;
	q.min_rnr_timer = 5;
	q.ah_attr.is_global = 1;
	memcpy(q.ah_attr.grh.dgid.raw, a->gid, 16);
	q.ah_attr.grh.sgid_index = (uint8_t)lk->gid_index;
	q.ah_attr.grh.hop_limit = 64;
	q.ah_attr.port_num = 1;
	HP_RC(ibv_modify_qp(lk->qp, &q,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER));
	lk->srv_qpn = a->qpn;
}

static void qp_rts(struct hp_link *lk)
{
	struct ibv_qp_attr q = {0};

	q.qp_state = IBV_QPS_RTS;
	q.timeout = 14;
	q.retry_cnt = 7;
	q.rnr_retry = 7;
	q.sq_psn = lk->psn;
	q.max_rd_atomic = 1;
	HP_RC(ibv_modify_qp(lk->qp, &q,
			    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

/* Our half of an ACCEPT or CONFIRM: the link and @c's RMB. */
static void fill_ac(struct clc_accept_confirm *m, uint8_t type, const struct hp_conn *c, bool fc)
{
	const struct hp_link *lk = c->lk;

	m->type = type;
	m->version = CLC_V2;
	m->first_contact = fc;
	memcpy(m->peer_id, lk->peer_id, CLC_PEER_ID_LEN);
	memcpy(m->gid, lk->gid, CLC_GID_LEN);
	memcpy(m->mac, lk->mac, CLC_MAC_LEN);
	m->qpn = lk->qp->qp_num;
	m->rmb_rkey = c->rmb_mr->rkey;
	m->rmbe_idx = 1;
	m->rmbe_alert_token = c->token;
	m->rmbe_size = HP_RMB_CLASS;
	m->qp_mtu = (uint8_t)lk->mtu;
	m->rmb_dma_addr = (uintptr_t)c->rmb;
	m->psn = lk->psn;
}

/* The CONFIRM an honest peer answers @c's ACCEPT with (@edit may lie). */
static void build_confirm(struct hp_conn *c, struct clc_accept_confirm *m,
			  void (*edit)(struct clc_accept_confirm *m, void *arg), void *arg)
{
	struct hp_link *lk = c->lk;
	const struct clc_accept_confirm *a = &c->acc;

	memset(m, 0, sizeof(*m));
	fill_ac(m, CLC_CONFIRM, c, a->first_contact);
	memcpy(m->eid, a->eid, CLC_EID_LEN);
	if (a->first_contact) {
		m->fce.v2_direct = true;
		m->fce.os_type = CLC_OS_LINUX;
		m->fce.release = a->fce.release > CLC_RELEASE_1 ? CLC_RELEASE_1 : a->fce.release;
		memset(m->fce.hostname, ' ', sizeof(m->fce.hostname));
		memcpy(m->fce.hostname, "hostile", 7);
		m->fce.max_conns = a->fce.max_conns;
		m->fce.max_links = a->fce.max_links;
		m->fce.feature_mask = a->fce.feature_mask & 1;
		m->gid_count = 1;
		memcpy(m->gids[0], lk->gid, CLC_GID_LEN);
	}
	if (edit)
		edit(m, arg);
}

int hp_confirm_bytes(struct hp_conn *c, uint8_t *buf, size_t cap)
{
	struct clc_accept_confirm m;

	build_confirm(c, &m, NULL, NULL);
	return clc_accept_confirm_encode(&m, buf, cap);
}

int hp_confirm(struct hp_conn *c, void (*edit)(struct clc_accept_confirm *m, void *arg), void *arg)
{
	struct hp_link *lk = c->lk;
	const struct clc_accept_confirm *a = &c->acc;
	struct clc_accept_confirm m;
	uint8_t buf[CLC_ACCEPT_MAX_LEN];
	double deadline;
	struct llc_msg r;
	int len, rc;

	build_confirm(c, &m, edit, arg);
	if (a->first_contact)
		qp_rtr(lk, a);
	len = clc_accept_confirm_encode(&m, buf, sizeof(buf));
	CHECK(len > 0, "clc_accept_confirm_encode: %d", len);
	send_all_fd(c->fd, buf, (size_t)len);
	if (a->first_contact) {
		deadline = mono_s() + HP_CL_WAIT_MS / 1e3;
		while (!lk->confirm_link_seen && mono_s() < deadline && !lk->qp_err)
			hp_poll(lk, 5);
		if (!lk->confirm_link_seen)
			return -ETIMEDOUT;
		qp_rts(lk);
		r = lk->confirm_link;
		llc_make_response(&r);
		memcpy(r.confirm_link.mac, lk->mac, LLC_MAC_LEN);
		memcpy(r.confirm_link.gid, lk->gid, LLC_GID_LEN);
		r.confirm_link.qpn = lk->qp->qp_num;
		lk->link_num = r.confirm_link.link_num;
		rc = hp_send_llc(lk, &r);
		if (rc)
			return -EIO;
		lk->up = true;
	}
	c->established = true;
	return 0;
}

void hp_connect(struct hp_link *lk, struct hp_conn *c, const struct sockaddr_in *srv)
{
	int rc;

	hp_propose(lk, c, srv, NULL, NULL);
	rc = hp_await_accept(c, 8000);
	CHECK(rc == 0, "hostile peer: no ACCEPT (%d%s, diagnosis 0x%08x)", rc,
	      rc == 1 ? ": DECLINE" : "", c->decline_diag);
	rc = hp_confirm(c, NULL, NULL);
	CHECK(rc == 0, "hostile peer: CONFIRM/CONFIRM_LINK failed: %d", rc);
}

void hp_conn_drop(struct hp_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* ---- server role ------------------------------------------------------ */

int hp_listen(struct hp_link *lk, struct sockaddr_in *bound)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	socklen_t sl = sizeof(*bound);

	CHECK(fd >= 0, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(!bind(fd, (const struct sockaddr *)&lk->bind, sizeof(lk->bind)),
	      "hostile server: bind: %s", strerror(errno));
	if (lk->sock_hook)
		lk->sock_hook(fd, HP_SOCK_LISTEN, lk->sock_hook_arg);
	CHECK(!listen(fd, 8), "hostile server: listen: %s", strerror(errno));
	if (lk->sock_hook)
		lk->sock_hook(fd, HP_SOCK_LISTENING, lk->sock_hook_arg);
	CHECK(!getsockname(fd, (struct sockaddr *)bound, &sl), "getsockname");
	return fd;
}

/* Read one CLC message of at most @cap bytes; its type, or -EPROTO. */
static int recv_clc(int fd, uint8_t *buf, size_t cap, int timeout_ms, struct clc_hdr *hdr)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	if (poll(&pfd, 1, timeout_ms) <= 0)
		return -ETIMEDOUT;
	if (recv_full(fd, buf, CLC_HDR_LEN) || clc_hdr_decode(buf, CLC_HDR_LEN, hdr) ||
	    hdr->length > cap || recv_full(fd, buf + CLC_HDR_LEN, hdr->length - CLC_HDR_LEN))
		return -EPROTO;
	return hdr->type;
}

int hp_serve(struct hp_link *lk, struct hp_conn *c, int lfd, bool confirm_link)
{
	struct pollfd pfd = {.fd = lfd, .events = POLLIN};
	struct clc_accept_confirm m = {0};
	struct clc_proposal p;
	struct clc_hdr hdr;
	uint8_t buf[CLC_MAX_LEN];
	struct timeval tv = {.tv_sec = 8};
	struct llc_msg req = {
		.version = LLC_V2, .type = LLC_CONFIRM_LINK, .flags = LLC_FLAG_NO_RMBE_EYEC};
	double deadline;
	int len, rc;

	conn_init(lk, c);
	CHECK(poll(&pfd, 1, 8000) == 1, "hostile server: no client");
	c->fd = accept(lfd, NULL, NULL);
	CHECK(c->fd >= 0, "accept: %s", strerror(errno));
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	rc = recv_clc(c->fd, buf, sizeof(buf), 8000, &hdr);
	if (rc != CLC_PROPOSAL || clc_proposal_decode(buf, hdr.length, &p) || !p.has_v2_ext)
		return -EPROTO;
	/* a first-contact ACCEPT with our link and RMB */
	fill_ac(&m, CLC_ACCEPT, c, true);
	memcpy(m.eid, p.eid[0], CLC_EID_LEN);
	m.fce.v2_direct = true;
	m.fce.os_type = CLC_OS_LINUX;
	m.fce.release = CLC_RELEASE_1;
	memset(m.fce.hostname, ' ', sizeof(m.fce.hostname));
	memcpy(m.fce.hostname, "hostile", 7);
	m.fce.max_conns = p.max_conns;
	m.fce.max_links = 1;
	m.fce.feature_mask = 1;
	len = clc_accept_confirm_encode(&m, buf, sizeof(buf));
	CHECK(len > 0, "encode ACCEPT: %d", len);
	send_all_fd(c->fd, buf, (size_t)len);
	/* the client's CONFIRM: its link and RMB */
	rc = recv_clc(c->fd, buf, sizeof(buf), 8000, &hdr);
	if (rc == CLC_DECLINE)
		return 1;
	if (rc != CLC_CONFIRM || clc_accept_confirm_decode(buf, hdr.length, &c->acc))
		return -EPROTO;
	c->srv_token = c->acc.rmbe_alert_token;
	c->srv_rkey = c->acc.rmb_rkey;
	c->srv_len = 16384u << c->acc.rmbe_size;
	c->srv_addr = c->acc.rmb_dma_addr + (uint64_t)(c->acc.rmbe_idx - 1) * c->srv_len;
	qp_rtr(lk, &c->acc);
	qp_rts(lk);
	if (!confirm_link)
		return 0; /* the client waits for a CONFIRM_LINK that never comes */
	memcpy(req.confirm_link.mac, lk->mac, LLC_MAC_LEN);
	memcpy(req.confirm_link.gid, lk->gid, LLC_GID_LEN);
	req.confirm_link.qpn = lk->qp->qp_num;
	req.confirm_link.link_num = 1;
	req.confirm_link.link_uid = 0x101;
	req.confirm_link.max_links = 1;
	req.confirm_link.max_conns = p.max_conns;
	lk->link_num = 1;
	if (hp_send_llc(lk, &req))
		return -EIO;
	deadline = mono_s() + HP_CL_WAIT_MS / 1e3;
	while (!(lk->last_llc.type == LLC_CONFIRM_LINK && (lk->last_llc.flags & LLC_FLAG_RESP)) &&
	       mono_s() < deadline && !lk->qp_err)
		hp_poll(lk, 5);
	if (!(lk->last_llc.type == LLC_CONFIRM_LINK && (lk->last_llc.flags & LLC_FLAG_RESP)))
		return -ETIMEDOUT;
	lk->up = true;
	c->established = true;
	return 0;
}
