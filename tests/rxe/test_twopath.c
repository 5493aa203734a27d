// SPDX-License-Identifier: MIT
/*
 * The guest's two RoCE paths (tests/rxe/vm-run.sh --setup twopath) and the
 * fault helpers that name them (roce_cut.h, fault_net.h):
 *
 *  1. each path's devices hold, at USMC_TEST_GID_INDEX_A/_B (..._A2/_B2), the
 *     IPv4-mapped RoCE v2 GID of that path's address; RC QPs between them
 *     carry RDMA WRITE WITH IMM (checked) over that path's veth pair alone
 *     (the netdevs' packet counters);
 *  2. path 1's netdev down (fnet_link_path()): path 1's ports go DOWN,
 *     path 2's stay ACTIVE and its QPs, connected before, keep working;
 *     path 1's QPs fail. Back up, new QPs on path 1 work;
 *  3. path 1's RoCE dropped by roce_cut() (the callers' path-less form) and
 *     path 2's lost by roce_lose_path(): the other path keeps working.
 *
 * usage: test_twopath (as root in the guest; fails without the topology)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "../common/check.h"
#include "../common/pattern.h"
#include "fault_net.h"
#include "mono_clock.h"
#include "roce_cut.h"

#define BUF_SIZE (1u << 20)
#define WC_WAIT	 10.0 /* seconds for a completion, good or bad */

struct end {
	const char *label;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	unsigned char *buf;
	int gid_index;
	union ibv_gid gid;
	uint32_t psn;
	enum ibv_mtu mtu;
};

struct path {
	int n; /* 1 or 2 */
	char label[2][8];
	const char *dev[2], *netdev[2], *addr[2];
	struct end e[2]; /* host A, host B */
};

static const char *path_env(const char *base, int path)
{
	const char *v = roce_path_env(base, path);

	CHECK(v && *v, "%s%s not set (run me with tests/rxe/vm-run.sh --setup twopath)", base,
	      path > 1 ? "2" : "");
	return v;
}

/* The GID at @index of @ctx's port 1 is the IPv4-mapped RoCE v2 GID of
 * @addr; polled for up to 5 s (a netdev brought back up re-adds its GIDs
 * asynchronously). */
static void expect_gid(struct end *e, int index, const char *addr)
{
	unsigned char want[16] = {[10] = 0xff, [11] = 0xff};
	struct ibv_gid_entry ent;
	double deadline = mono_s() + 5;
	int rc;

	CHECK(inet_pton(AF_INET, addr, want + 12) == 1, "bad address %s", addr);
	for (;;) {
		rc = ibv_query_gid_ex(e->ctx, 1, (uint32_t)index, &ent, 0);
		if (!rc && ent.gid_type == IBV_GID_TYPE_ROCE_V2 && !memcmp(ent.gid.raw, want, 16))
			break;
		CHECK(mono_s() < deadline,
		      "%s: GID %d is not the RoCE v2 GID of %s (query %d, type %u)", e->label,
		      index, addr, rc, rc ? 0 : ent.gid_type);
		usleep(100 * 1000);
	}
	e->gid_index = index;
	e->gid = ent.gid;
}

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int n;

	list = ibv_get_device_list(&n);
	CHECK(list, "ibv_get_device_list: %s", strerror(errno));
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	CHECK(ctx, "cannot open RDMA device %s", name);
	return ctx;
}

static void open_end(struct end *e, const char *label, const char *dev, int gid_index,
		     const char *addr)
{
	struct ibv_port_attr port;

	e->label = label;
	e->ctx = open_dev(dev);
	CHECK(!ibv_query_port(e->ctx, 1, &port), "%s: ibv_query_port", dev);
	CHECK(port.state == IBV_PORT_ACTIVE, "%s: port 1 is %s", dev,
	      ibv_port_state_str(port.state));
	e->mtu = port.active_mtu;
	expect_gid(e, gid_index, addr);
	e->pd = ibv_alloc_pd(e->ctx);
	e->cq = ibv_create_cq(e->ctx, 16, NULL, NULL, 0);
	e->buf = aligned_alloc(4096, BUF_SIZE);
	CHECK(e->pd && e->cq && e->buf, "%s: PD, CQ or buffer", label);
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF_SIZE,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(e->mr, "%s: ibv_reg_mr: %s", label, strerror(errno));
	struct ibv_qp_init_attr init = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
	};
	e->qp = ibv_create_qp(e->pd, &init);
	CHECK(e->qp, "%s: ibv_create_qp: %s", label, strerror(errno));
	e->psn = (uint32_t)(mono_s() * 1e6) & 0xffffff;
}

static void connect_qp(struct end *e, const struct end *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	};
	CHECK(!ibv_modify_qp(e->qp, &a,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "%s: QP to INIT", e->label);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = e->mtu < peer->mtu ? e->mtu : peer->mtu;
	a.dest_qp_num = peer->qp->qp_num;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.sgid_index = (uint8_t)e->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(e->qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				     IBV_QP_MIN_RNR_TIMER),
	      "%s: QP to RTR", e->label);
	/* A short ACK timeout (4.096 us << 12 = 17 ms, 3 retries): a lost
	 * path fails a send in well under a second. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 12;
	a.retry_cnt = 3;
	a.rnr_retry = 7;
	a.sq_psn = e->psn;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(e->qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "%s: QP to RTS", e->label);
}

static void close_end(struct end *e)
{
	CHECK(!ibv_destroy_qp(e->qp) && !ibv_dereg_mr(e->mr) && !ibv_destroy_cq(e->cq) &&
		      !ibv_dealloc_pd(e->pd) && !ibv_close_device(e->ctx),
	      "%s: verbs teardown", e->label);
	free(e->buf);
	memset(e, 0, sizeof(*e));
}

static void path_open(struct path *p, int n)
{
	static const char *const host[2] = {"A", "B"};
	char var[32];

	p->n = n;
	for (int i = 0; i < 2; i++) {
		snprintf(p->label[i], sizeof(p->label[i]), "%s%d", host[i], n);
		snprintf(var, sizeof(var), "USMC_TEST_RXE_%s", host[i]);
		p->dev[i] = path_env(var, n);
		snprintf(var, sizeof(var), "USMC_TEST_NETDEV_%s", host[i]);
		p->netdev[i] = path_env(var, n);
		snprintf(var, sizeof(var), "USMC_TEST_HOST_%s", host[i]);
		p->addr[i] = path_env(var, n);
		snprintf(var, sizeof(var), "USMC_TEST_GID_INDEX_%s", host[i]);
		open_end(&p->e[i], p->label[i], p->dev[i], atoi(path_env(var, n)), p->addr[i]);
	}
	connect_qp(&p->e[0], &p->e[1]);
	connect_qp(&p->e[1], &p->e[0]);
	printf("path %d: %s %s %s gid[%d] <-> %s %s %s gid[%d], QPs 0x%06x <-> 0x%06x\n", n,
	       p->addr[0], p->netdev[0], p->dev[0], p->e[0].gid_index, p->addr[1], p->netdev[1],
	       p->dev[1], p->e[1].gid_index, p->e[0].qp->qp_num, p->e[1].qp->qp_num);
}

static void path_close(struct path *p)
{
	close_end(&p->e[0]);
	close_end(&p->e[1]);
}

/* One completion of @e within WC_WAIT s: its status, or -1 on none. */
static int poll_one(struct end *e, struct ibv_wc *wc)
{
	double deadline = mono_s() + WC_WAIT;
	int n;

	while ((n = ibv_poll_cq(e->cq, 1, wc)) == 0)
		if (mono_s() > deadline)
			return -1;
	CHECK(n == 1, "%s: ibv_poll_cq %d", e->label, n);
	return (int)wc->status;
}

/*
 * WRITE WITH IMM of @len bytes on path @p from host @from to the other,
 * checked at the receiver. Returns 0, or -1 if the write failed (error
 * completion or none): the QPs are then in error, for path_close().
 */
static int xfer(struct path *p, int from, size_t len, uint64_t seed)
{
	struct end *src = &p->e[from], *dst = &p->e[!from];
	struct ibv_recv_wr rwr = {.wr_id = 2}, *bad_rwr;
	struct ibv_sge sge = {
		.addr = (uintptr_t)src->buf, .length = (uint32_t)len, .lkey = src->mr->lkey};
	struct ibv_send_wr swr = {
		.wr_id = 1,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = (uintptr_t)dst->buf, .rkey = dst->mr->rkey},
	};
	struct ibv_send_wr *bad_swr;
	struct ibv_wc wc;
	int st;

	pattern_fill(seed, 0, src->buf, len);
	swr.imm_data = htonl((uint32_t)seed);
	memset(dst->buf, 0, len);
	CHECK(!ibv_post_recv(dst->qp, &rwr, &bad_rwr), "%s: post recv", dst->label);
	st = ibv_post_send(src->qp, &swr, &bad_swr);
	if (st) {
		printf("  path %d %s -> %s: post send: %s\n", p->n, src->label, dst->label,
		       strerror(st));
		return -1;
	}
	st = poll_one(src, &wc);
	if (st != IBV_WC_SUCCESS) {
		printf("  path %d %s -> %s: %s\n", p->n, src->label, dst->label,
		       st < 0 ? "no completion" : ibv_wc_status_str((enum ibv_wc_status)st));
		return -1;
	}
	CHECK(poll_one(dst, &wc) == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM,
	      "%s: no receive completion after the writer's", dst->label);
	CHECK(ntohl(wc.imm_data) == (uint32_t)seed && wc.byte_len == len &&
		      pattern_check(seed, 0, dst->buf, len) < 0,
	      "path %d: %zu bytes %s -> %s arrived corrupted", p->n, len, src->label, dst->label);
	return 0;
}

/* Both directions on path @p work. */
static void expect_works(struct path *p, const char *why)
{
	CHECK(!xfer(p, 0, BUF_SIZE, 0x5eed) && !xfer(p, 1, BUF_SIZE, 0xfeed),
	      "path %d: RDMA failed %s", p->n, why);
	printf("ok: path %d carries RDMA %s\n", p->n, why);
}

/* A write on path @p fails; its QPs are reconnected afterwards by the
 * caller (path_close() + path_open()). */
static void expect_fails(struct path *p, const char *why)
{
	CHECK(xfer(p, 0, 64 << 10, 0xdead), "path %d: RDMA still works %s", p->n, why);
	printf("ok: path %d carries no RDMA %s\n", p->n, why);
}

static long tx_packets(const char *netdev)
{
	char path[128];
	long n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/tx_packets", netdev);
	f = fopen(path, "r");
	CHECK(f && fscanf(f, "%ld", &n) == 1, "cannot read %s", path);
	fclose(f);
	return n;
}

static long path_tx(const struct path *p)
{
	return tx_packets(p->netdev[0]) + tx_packets(p->netdev[1]);
}

/* RDMA on @p crosses its own veth pair, not @other's. */
static void expect_own_wire(struct path *p, struct path *other)
{
	long mine = path_tx(p), theirs = path_tx(other);

	expect_works(p, "between its devices");
	mine = path_tx(p) - mine;
	theirs = path_tx(other) - theirs;
	printf("  path %d: %ld packets on %s/%s, %ld on path %d's %s/%s\n", p->n, mine,
	       p->netdev[0], p->netdev[1], theirs, other->n, other->netdev[0], other->netdev[1]);
	/* 2 MiB in MTU-sized packets (at most 4 KiB) plus ACKs: at least 512;
	 * the other path sees nothing but stray IPv6 neighbour discovery. */
	CHECK(mine >= 512 && theirs <= 16, "path %d's RDMA did not stay on its own veth pair",
	      p->n);
}

/* The port of each device of path @p reaches state @want within 10 s. */
static void expect_ports(const struct path *p, const char *want)
{
	double deadline = mono_s() + 10;
	char st[2][32];

	for (;;) {
		CHECK(!fnet_port_state(p->dev[0], st[0], sizeof(st[0])) &&
			      !fnet_port_state(p->dev[1], st[1], sizeof(st[1])),
		      "cannot read the port states of path %d", p->n);
		if (!strcmp(st[0], want) && !strcmp(st[1], want))
			break;
		CHECK(mono_s() < deadline, "path %d: ports %s/%s, want %s", p->n, st[0], st[1],
		      want);
		usleep(100 * 1000);
	}
	printf("  path %d: %s and %s ports %s\n", p->n, p->dev[0], p->dev[1], want);
}

static void reopen(struct path *p)
{
	int n = p->n;

	path_close(p);
	path_open(p, n);
}

int main(void)
{
	struct path p1, p2;

	setvbuf(stdout, NULL, _IOLBF, 0);
	path_open(&p1, 1);
	path_open(&p2, 2);
	CHECK(strcmp(p1.dev[0], p2.dev[0]) && strcmp(p1.netdev[0], p2.netdev[0]) &&
		      strcmp(p1.addr[0], p2.addr[0]),
	      "the two paths share a device, netdev or address");

	/* 1. Each path on its own wire. */
	expect_own_wire(&p1, &p2);
	expect_own_wire(&p2, &p1);

	/* 2. Path 1's port down for a while, then up again. */
	CHECK(!fnet_link_path(1, true), "path 1 down");
	expect_ports(&p1, "DOWN");
	expect_ports(&p2, "ACTIVE");
	expect_works(&p2, "with path 1 down (QPs connected before)");
	expect_fails(&p1, "with its netdev down");
	CHECK(!fnet_link_path(1, false), "path 1 up");
	expect_ports(&p1, "ACTIVE");
	reopen(&p1);
	expect_works(&p1, "up again (new QPs)");
	expect_works(&p2, "after path 1 came back");

	/* 3. RoCE dropped on path 1 (roce_cut(): path 1 only), then lost on
	 * path 2 alone. */
	CHECK(!roce_cut(true), "roce_cut");
	expect_works(&p2, "with path 1's RoCE dropped");
	expect_fails(&p1, "with its RoCE dropped (roce_cut)");
	roce_cut(false);
	reopen(&p1);
	expect_works(&p1, "with its RoCE restored");

	CHECK(!roce_lose_path(2, true), "roce_lose_path 2");
	expect_works(&p1, "with path 2's RoCE lost");
	expect_fails(&p2, "with its RoCE lost (roce_lose_path)");
	roce_cut_path(2, false);
	reopen(&p2);
	expect_works(&p2, "with its RoCE restored");

	path_close(&p1);
	path_close(&p2);
	printf("PASS: two independent RoCE paths; a path down or cut leaves the other working\n");
	return 0;
}
