// SPDX-License-Identifier: MIT
/*
 * rxe smoke test in the project's own C: RDMA WRITE WITH IMM of checksummed
 * patterns between two RC QPs, one on device A and one on device B
 * (USMC_TEST_RXE_A/_B, default: the first device for both, i.e. loopback).
 * The QPs are connected in-process by exchanging QPN, PSN and GID directly,
 * over the IPv4-mapped RoCE v2 GID found with ibv_query_gid_table().
 * Every verbs call is checked; no device is a failure, not a skip.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "../common/check.h"
#include "mono_clock.h"

#define BUF_SIZE   (4u << 20)
#define GUARD_BYTE 0xa5
#define WC_TIMEOUT 10.0 /* seconds */

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

/* Calls that return NULL and set errno. */
#define CHECK_PTR(expr)                                                                   \
	({                                                                                \
		__typeof__(expr) _p = (expr);                                             \
		if (!_p)                                                                  \
			die("%s:%d: %s: %s", __FILE__, __LINE__, #expr, strerror(errno)); \
		_p;                                                                       \
	})
/* Calls that return 0 or an errno value (ibv_modify_qp, ibv_post_*...). */
#define CHECK_RC(expr)                                                  \
	do {                                                            \
		int _rc = (expr);                                       \
		if (_rc)                                                \
			die("%s:%d: %s: %s", __FILE__, __LINE__, #expr, \
			    strerror(_rc < 0 ? errno : _rc));           \
	} while (0)

static uint64_t fnv1a64(const unsigned char *p, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (len--) {
		h ^= *p++;
		h *= 0x100000001b3ull;
	}
	return h;
}

static void fill_pattern(unsigned char *p, size_t len, uint64_t seed)
{
	uint64_t x = seed | 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)(x >> 24);
	}
}

static int is_v4_mapped(const union ibv_gid *gid)
{
	static const unsigned char prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return !memcmp(gid->raw, prefix, sizeof(prefix));
}

/* Index of the IPv4-mapped RoCE v2 GID of port 1, or -1. */
static int find_v4_roce2_gid(struct ibv_context *ctx, int tbl_len, union ibv_gid *gid)
{
	struct ibv_gid_entry *entries = CHECK_PTR(calloc(tbl_len, sizeof(*entries)));
	ssize_t n = ibv_query_gid_table(ctx, entries, tbl_len, 0);
	int index = -1;

	if (n < 0)
		die("ibv_query_gid_table: %s", strerror((int)-n));
	for (ssize_t i = 0; i < n; i++) {
		if (entries[i].port_num != 1 || entries[i].gid_type != IBV_GID_TYPE_ROCE_V2 ||
		    !is_v4_mapped(&entries[i].gid))
			continue;
		index = (int)entries[i].gid_index;
		*gid = entries[i].gid;
		break;
	}
	free(entries);
	return index;
}

static struct ibv_device *find_device(struct ibv_device **list, int n, const char *name)
{
	if (!n)
		die("no RDMA device (run me with tests/rxe/vm-run.sh)");
	if (!name || !*name)
		return list[0];
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			return list[i];
	die("no RDMA device named %s", name);
}

static void open_end(struct end *e, const char *label, const char *name)
{
	struct ibv_device **list;
	struct ibv_port_attr port;
	char gidstr[INET6_ADDRSTRLEN];
	int n;

	e->label = label;
	list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list: %s (no RDMA subsystem?)", strerror(errno));
	e->ctx = CHECK_PTR(ibv_open_device(find_device(list, n, name)));
	ibv_free_device_list(list);

	CHECK_RC(ibv_query_port(e->ctx, 1, &port));
	if (port.state != IBV_PORT_ACTIVE)
		die("%s: port 1 is %s", ibv_get_device_name(e->ctx->device),
		    ibv_port_state_str(port.state));
	if (port.link_layer != IBV_LINK_LAYER_ETHERNET)
		die("%s: not a RoCE device", ibv_get_device_name(e->ctx->device));
	e->mtu = port.active_mtu;
	e->gid_index = find_v4_roce2_gid(e->ctx, port.gid_tbl_len, &e->gid);
	if (e->gid_index < 0)
		die("%s: no IPv4-mapped RoCE v2 GID", ibv_get_device_name(e->ctx->device));

	e->pd = CHECK_PTR(ibv_alloc_pd(e->ctx));
	e->cq = CHECK_PTR(ibv_create_cq(e->ctx, 16, NULL, NULL, 0));
	e->buf = CHECK_PTR(aligned_alloc(4096, BUF_SIZE));
	e->mr = CHECK_PTR(ibv_reg_mr(e->pd, e->buf, BUF_SIZE,
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));

	struct ibv_qp_init_attr init = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
	};
	e->qp = CHECK_PTR(ibv_create_qp(e->pd, &init));
	e->psn = (uint32_t)(mono_s() * 1e6) & 0xffffff;

	inet_ntop(AF_INET6, e->gid.raw, gidstr, sizeof(gidstr));
	printf("%s: %s gid[%d] %s qpn 0x%06x mtu %d\n", label, ibv_get_device_name(e->ctx->device),
	       e->gid_index, gidstr, e->qp->qp_num, 128 << e->mtu);
}

static void connect_qp(struct end *e, const struct end *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	};
	CHECK_RC(ibv_modify_qp(
		e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));

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
	CHECK_RC(ibv_modify_qp(e->qp, &a,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = e->psn;
	a.max_rd_atomic = 1;
	CHECK_RC(ibv_modify_qp(e->qp, &a,
			       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

static void poll_one(struct end *e, enum ibv_wc_opcode want, struct ibv_wc *wc)
{
	double deadline = mono_s() + WC_TIMEOUT;
	int n;

	while ((n = ibv_poll_cq(e->cq, 1, wc)) == 0) {
		if (mono_s() > deadline)
			die("%s: no completion after %.0f s", e->label, WC_TIMEOUT);
	}
	if (n < 0)
		die("%s: ibv_poll_cq failed (%d)", e->label, n);
	if (wc->status != IBV_WC_SUCCESS)
		die("%s: completion %s (vendor error 0x%x)", e->label,
		    ibv_wc_status_str(wc->status), wc->vendor_err);
	if (wc->opcode != want)
		die("%s: completion opcode %d, expected %d", e->label, wc->opcode, want);
}

/* WRITE WITH IMM of len bytes at off from src to dst, then verify dst. */
static void write_and_verify(struct end *src, struct end *dst, size_t off, size_t len,
			     uint64_t seed)
{
	unsigned char *from = src->buf + off, *to = dst->buf + off;
	struct ibv_wc wc;
	uint64_t sum;
	double t0, us;

	fill_pattern(from, len, seed);
	sum = fnv1a64(from, len);
	memset(dst->buf, GUARD_BYTE, BUF_SIZE);

	struct ibv_recv_wr rwr = {.wr_id = 2}, *bad_rwr;
	CHECK_RC(ibv_post_recv(dst->qp, &rwr, &bad_rwr));

	struct ibv_sge sge = {
		.addr = (uintptr_t)from, .length = (uint32_t)len, .lkey = src->mr->lkey};
	struct ibv_send_wr swr = {
		.wr_id = 1,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl((uint32_t)sum),
		.wr.rdma = {.remote_addr = (uintptr_t)to, .rkey = dst->mr->rkey},
	};
	struct ibv_send_wr *bad_swr;
	t0 = mono_s();
	CHECK_RC(ibv_post_send(src->qp, &swr, &bad_swr));
	poll_one(src, IBV_WC_RDMA_WRITE, &wc);
	poll_one(dst, IBV_WC_RECV_RDMA_WITH_IMM, &wc);
	us = (mono_s() - t0) * 1e6;

	if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != (uint32_t)sum)
		die("%s: immediate data 0x%08x, expected 0x%08x", dst->label, ntohl(wc.imm_data),
		    (uint32_t)sum);
	if (wc.byte_len != len)
		die("%s: byte_len %u, expected %zu", dst->label, wc.byte_len, len);
	if (fnv1a64(to, len) != sum)
		die("%s: %zu bytes at offset %zu arrived corrupted", dst->label, len, off);
	/* Nothing written outside [off, off + len). */
	for (size_t i = 0; i < BUF_SIZE; i++) {
		if (i == off) {
			i += len - 1;
			continue;
		}
		if (dst->buf[i] != GUARD_BYTE)
			die("%s: byte %zu outside the write was modified", dst->label, i);
	}
	printf("ok: %s -> %s %8zu bytes at offset %5zu, checksum %016" PRIx64 ", %.0f us\n",
	       src->label, dst->label, len, off, sum, us);
}

int main(void)
{
	static const struct {
		size_t off, len;
	} cases[] = {
		{0, 1}, {1, 63}, {4095, 4097}, {0, 65536}, {3, 1u << 20}, {0, BUF_SIZE},
	};
	struct end a = {0}, b = {0};
	uint64_t seed = 0x5eed;

	open_end(&a, "A", getenv("USMC_TEST_RXE_A"));
	open_end(&b, "B",
		 getenv("USMC_TEST_RXE_B") ? getenv("USMC_TEST_RXE_B") : getenv("USMC_TEST_RXE_A"));
	connect_qp(&a, &b);
	connect_qp(&b, &a);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_and_verify(&a, &b, cases[i].off, cases[i].len, seed++);
		write_and_verify(&b, &a, cases[i].off, cases[i].len, seed++);
	}

	struct end *ends[] = {&a, &b};
	for (int i = 0; i < 2; i++) {
		struct end *e = ends[i];
		CHECK_RC(ibv_destroy_qp(e->qp));
		CHECK_RC(ibv_dereg_mr(e->mr));
		CHECK_RC(ibv_destroy_cq(e->cq));
		CHECK_RC(ibv_dealloc_pd(e->pd));
		CHECK_RC(ibv_close_device(e->ctx));
		free(e->buf);
	}
	printf("PASS: RDMA WRITE WITH IMM verified in both directions\n");
	return 0;
}
