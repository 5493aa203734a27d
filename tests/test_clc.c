// SPDX-License-Identifier: MIT
/*
 * CLC codec: the documented byte examples decode to their fields and
 * re-encode to the same bytes; limits; Linux's length rules; every
 * malformed variant with its own error code.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "clc.h"
#include "reason.h"
#include "wire_err.h"
#include "wire_vectors.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static uint8_t vbuf[CLC_MAX_LEN + 64];

/* Load a named vector into vbuf; returns its length. */
static size_t vec(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(clc_vectors); i++)
		if (!strcmp(clc_vectors[i].name, name)) {
			int n = wire_hex(clc_vectors[i].hex, vbuf, sizeof(vbuf));

			assert_true(n > 0);
			return (size_t)n;
		}
	fail_msg("no vector %s", name);
	return 0;
}

/* Decode b with the decoder for its type, re-encode, expect the same bytes. */
static void roundtrip_bytes(const uint8_t *b, size_t n)
{
	uint8_t out[CLC_MAX_LEN];
	struct clc_proposal p;
	struct clc_accept_confirm a;
	struct clc_decline d;
	int rc;

	switch (b[4]) {
	case CLC_PROPOSAL:
		assert_int_equal(clc_proposal_decode(b, n, &p), 0);
		assert_int_equal(clc_proposal_len(&p), n);
		rc = clc_proposal_encode(&p, out, sizeof(out));
		break;
	case CLC_ACCEPT:
	case CLC_CONFIRM:
		assert_int_equal(clc_accept_confirm_decode(b, n, &a), 0);
		assert_int_equal(clc_accept_confirm_len(&a), n);
		rc = clc_accept_confirm_encode(&a, out, sizeof(out));
		break;
	default:
		assert_int_equal(clc_decline_decode(b, n, &d), 0);
		rc = clc_decline_encode(&d, out, sizeof(out));
		break;
	}
	assert_int_equal(rc, (int)n);
	assert_memory_equal(out, b, n);
}

static void test_all_vectors_roundtrip(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(clc_vectors); i++) {
		size_t n = vec(clc_vectors[i].name);
		struct clc_hdr h;

		assert_int_equal(clc_hdr_decode(vbuf, n, &h), 0);
		assert_int_equal(h.length, n);
		roundtrip_bytes(vbuf, n);
	}
}

static void test_hdr_peek(void **state)
{
	struct clc_hdr h;
	size_t n = vec("prop_v2_linux");

	/* the 8-byte peek alone is enough */
	assert_int_equal(clc_hdr_decode(vbuf, CLC_HDR_LEN, &h), 0);
	assert_int_equal(h.type, CLC_PROPOSAL);
	assert_int_equal(h.length, 156);
	assert_int_equal(h.version, CLC_V2);
	assert_int_equal(h.typev2, CLC_TYPE_R);
	assert_int_equal(h.typev1, CLC_TYPE_N);
	assert_false(h.smcd);
	assert_int_equal(n, 156);
	assert_int_equal(clc_hdr_decode(vbuf, CLC_HDR_LEN - 1, &h), WIRE_E_SHORT);
}

static void test_hdr_errors(void **state)
{
	struct clc_hdr h;

	vec("decl_v1");
	vbuf[3] = 0xC4; /* "SMCD" is fine */
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), 0);
	assert_true(h.smcd);
	vbuf[3] = 0xC5;
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_EYECATCHER);
	vec("decl_v1");
	vbuf[4] = 0;
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_TYPE);
	vbuf[4] = 5;
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_TYPE);
	vec("decl_v1");
	vbuf[7] = 0x08; /* version 0 */
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_VERSION);
	vec("decl_v1");
	vbuf[6] = 27; /* below the smallest DECLINE */
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_LENGTH);
	vbuf[6] = 45; /* above the largest DECLINE */
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_TOO_LONG);
	vec("prop_v1_ipv4");
	vbuf[5] = (CLC_PROPOSAL_MAX_LEN + 1) >> 8;
	vbuf[6] = (CLC_PROPOSAL_MAX_LEN + 1) & 0xFF;
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_TOO_LONG);
	vbuf[5] = 0;
	vbuf[6] = 51;
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_LENGTH);
	vec("prop_v2_linux");
	vbuf[6] = 83; /* v2 proposal minimum is 84 */
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_LENGTH);
	vec("acc_v1_fc");
	vbuf[6] = 67;
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_LENGTH);
	vbuf[5] = CLC_ACCEPT_MAX_LEN >> 8;
	vbuf[6] = (CLC_ACCEPT_MAX_LEN + 1) & 0xFF;
	assert_int_equal(clc_hdr_decode(vbuf, 8, &h), WIRE_E_TOO_LONG);
}

static void test_prop_v1_fields(void **state)
{
	static const uint8_t subnet[4] = {10, 1, 2, 0};
	struct clc_proposal p;
	size_t n = vec("prop_v1_ipv4");

	assert_int_equal(clc_proposal_decode(vbuf, n, &p), 0);
	assert_int_equal(p.version, CLC_V1);
	assert_int_equal(p.typev1, CLC_TYPE_R);
	assert_int_equal(p.peer_id[0], 0x5A);
	assert_int_equal(p.gid[0], 0xFE);
	assert_int_equal(p.mac[5], 0x01);
	assert_int_equal(p.iparea_offset, 0);
	assert_false(p.has_smcd_info);
	assert_true(p.has_prefix);
	assert_memory_equal(p.ipv4_subnet, subnet, 4);
	assert_int_equal(p.ipv4_prefix_len, 24);
	assert_int_equal(p.ipv6_count, 0);
	assert_false(p.has_v2_ext);
}

static void test_prop_v2_linux_fields(void **state)
{
	static const uint8_t gid[16] = {[10] = 0xFF, 0xFF, 10, 0, 0, 1};
	static const char eid[] = "RXEVM-SMC-TEST                  ";
	static const uint8_t zero[16];
	struct clc_proposal p;
	size_t n = vec("prop_v2_linux");

	assert_int_equal(clc_proposal_decode(vbuf, n, &p), 0);
	assert_int_equal(p.version, CLC_V2);
	assert_int_equal(p.typev1, CLC_TYPE_N);
	assert_int_equal(p.typev2, CLC_TYPE_R);
	assert_memory_equal(p.peer_id, zero, 8);
	assert_true(p.has_smcd_info);
	assert_false(p.has_prefix);
	assert_true(p.has_v2_ext);
	assert_int_equal(p.v2_ext_offset, 28);
	assert_int_equal(p.eid_count, 1);
	assert_int_equal(p.release, CLC_RELEASE_1);
	assert_false(p.seid_present);
	assert_memory_equal(p.roce_gid, gid, 16);
	assert_int_equal(p.max_conns, 255);
	assert_int_equal(p.max_links, 2);
	assert_int_equal(p.feature_mask, 1);
	assert_memory_equal(p.eid[0], eid, 32);
	assert_false(p.has_smcd_v2_ext);
}

static void test_prop_v2_variants(void **state)
{
	struct clc_proposal p;
	size_t n;

	n = vec("prop_v2_v1only");
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), 0);
	assert_int_equal(p.iparea_offset, 40);
	assert_true(p.has_prefix);
	assert_false(p.has_v2_ext);
	assert_int_equal(p.ipv4_prefix_len, 24);

	n = vec("prop_v2_both_ipv6");
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), 0);
	assert_int_equal(p.ipv6_count, 1);
	assert_int_equal(p.ipv6[0].prefix[0], 0x20);
	assert_int_equal(p.ipv6[0].prefix[3], 0xB8);
	assert_int_equal(p.ipv6[0].prefix_len, 64);
	assert_int_equal(p.v2_ext_offset, 28 + 8 + 17);
	assert_int_equal(p.max_links, 1);

	n = vec("prop_v2_smcd2");
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), 0);
	assert_int_equal(p.typev2, CLC_TYPE_B);
	assert_true(p.has_smcd_v2_ext);
	assert_int_equal(p.smcd_v2_ext_offset, 32 + 32);
	assert_int_equal(p.ism_gid_count, 2);
	assert_int_equal(p.ism_gids[0].gid, 7);
	assert_int_equal(p.ism_gids[1].gid, 8);
	assert_int_equal(p.ism_gids[1].chid, 0xFFFF);
}

/* A v2 proposal with every count at its limit: 652 bytes, Linux's maximum. */
static void fill_max_proposal(struct clc_proposal *p)
{
	memset(p, 0, sizeof(*p));
	p->version = CLC_V2;
	p->typev1 = CLC_TYPE_B;
	p->typev2 = CLC_TYPE_B;
	memset(p->peer_id, 0xFF, sizeof(p->peer_id));
	memset(p->gid, 0xFF, sizeof(p->gid));
	memset(p->mac, 0xFF, sizeof(p->mac));
	p->has_smcd_info = true;
	p->ism_gid = UINT64_MAX;
	p->ism_chid = UINT16_MAX;
	memset(p->vendor_oui, 0xFF, 3);
	memset(p->vendor_opts, 0xFF, 5);
	p->has_prefix = true;
	memset(p->ipv4_subnet, 0xFF, 4);
	p->ipv4_prefix_len = 0xFF;
	p->ipv6_count = CLC_MAX_IPV6_PREFIXES;
	for (int i = 0; i < CLC_MAX_IPV6_PREFIXES; i++) {
		memset(p->ipv6[i].prefix, 0xF0 + i, 16);
		p->ipv6[i].prefix_len = 128;
	}
	p->has_v2_ext = true;
	p->eid_count = CLC_MAX_UEIDS;
	p->ism_gid_count = CLC_MAX_ISM_GIDS;
	p->release = 15;
	p->seid_present = true;
	memset(p->roce_gid, 0xEE, 16);
	p->max_conns = 255;
	p->max_links = 255;
	p->feature_mask = 0xFFFF;
	for (int i = 0; i < CLC_MAX_UEIDS; i++)
		memset(p->eid[i], 'A' + i, CLC_EID_LEN);
	p->has_smcd_v2_ext = true;
	memset(p->seid, 'S', CLC_EID_LEN);
	for (int i = 0; i < CLC_MAX_ISM_GIDS; i++) {
		p->ism_gids[i].gid = UINT64_MAX - i;
		p->ism_gids[i].chid = (uint16_t)(0xFFFF - i);
	}
}

/* canonical offsets the encoder writes for p */
static void set_canonical_offsets(struct clc_proposal *p)
{
	p->iparea_offset = p->has_prefix && p->has_smcd_info ? 40 : 0;
	p->v2_ext_offset = p->has_v2_ext ? 28 + (p->has_prefix ? 8 + 17 * p->ipv6_count : 0) : 0;
	p->smcd_v2_ext_offset = p->has_smcd_v2_ext ? 32 + 32 * p->eid_count : 0;
}

static void test_prop_limits(void **state)
{
	struct clc_proposal p, back;
	uint8_t buf[CLC_MAX_LEN];

	fill_max_proposal(&p);
	set_canonical_offsets(&p);
	assert_int_equal(clc_proposal_len(&p), CLC_PROPOSAL_MAX_LEN);
	assert_int_equal(clc_proposal_encode(&p, buf, sizeof(buf)), CLC_PROPOSAL_MAX_LEN);
	assert_int_equal(p.v2_ext_offset, 172); /* the largest Linux accepts */
	assert_int_equal(clc_proposal_decode(buf, sizeof(buf), &back), 0);
	assert_memory_equal(&p, &back, sizeof(p));

	/* one more IPv6 prefix / UEID / ISM GID: encoder refuses */
	p.ipv6_count++;
	assert_int_equal(clc_proposal_encode(&p, buf, sizeof(buf)), -EINVAL);
	p.ipv6_count--;
	p.eid_count++;
	assert_int_equal(clc_proposal_encode(&p, buf, sizeof(buf)), -EINVAL);
	p.eid_count--;
	p.ism_gid_count++;
	assert_int_equal(clc_proposal_encode(&p, buf, sizeof(buf)), -EINVAL);
}

/* A proposal built from fields, no decoded layout involved. */
static void test_prop_struct_roundtrip(void **state)
{
	struct clc_proposal p, back;
	uint8_t buf[CLC_MAX_LEN];
	int n;

	memset(&p, 0, sizeof(p)); /* compared with memcmp: padding too */

	/* v1 with the SMC-D area (pre-v2 Linux offering SMC-D) and 3 IPv6 */
	p.version = CLC_V1;
	p.typev1 = CLC_TYPE_B;
	p.has_smcd_info = true;
	p.ism_gid = 0x1122334455667788ull;
	p.ism_chid = 0x99AA;
	p.has_prefix = true;
	p.ipv6_count = 3;
	p.ipv6[2].prefix[15] = 0x42;
	p.ipv6[2].prefix_len = 48;
	set_canonical_offsets(&p);
	n = clc_proposal_encode(&p, buf, sizeof(buf));
	assert_int_equal(n, 40 + 40 + 8 + 3 * 17 + 4);
	assert_int_equal(buf[39], 40);
	assert_int_equal(clc_proposal_decode(buf, (size_t)n, &back), 0);
	assert_memory_equal(&p, &back, sizeof(p));

	/* v2, typev2 D without SMC-Dv2 extension offset: area zero, flag off */
	memset(&p, 0, sizeof(p));
	p.version = CLC_V2;
	p.typev1 = CLC_TYPE_N;
	p.typev2 = CLC_TYPE_D;
	p.has_smcd_info = true;
	p.has_v2_ext = true;
	p.ism_gid_count = 1;
	set_canonical_offsets(&p);
	n = clc_proposal_encode(&p, buf, sizeof(buf));
	assert_int_equal(n, 40 + 40 + 40 + 48 + 10 + 4);
	assert_int_equal(clc_proposal_decode(buf, (size_t)n, &back), 0);
	assert_memory_equal(&p, &back, sizeof(p));
}

static void test_prop_encode_invalid(void **state)
{
	struct clc_proposal p;
	uint8_t buf[CLC_MAX_LEN];

	memset(buf, 0xEE, sizeof(buf));
	fill_max_proposal(&p);
	assert_int_equal(clc_proposal_encode(&p, buf, CLC_PROPOSAL_MAX_LEN - 1), -ENOSPC);
	assert_int_equal(buf[0], 0xEE);
	p.version = 0;
	assert_int_equal(clc_proposal_encode(&p, buf, sizeof(buf)), -EINVAL);
	fill_max_proposal(&p);
	p.has_prefix = false; /* typev1 B needs the prefix area */
	assert_int_equal(clc_proposal_encode(&p, buf, sizeof(buf)), -EINVAL);
	fill_max_proposal(&p);
	p.version = CLC_V1;
	p.typev1 = CLC_TYPE_N; /* Linux rejects a v1 proposal without v1 type */
	p.has_v2_ext = false;
	p.has_smcd_v2_ext = false;
	assert_int_equal(clc_proposal_encode(&p, buf, sizeof(buf)), -EINVAL);
	fill_max_proposal(&p);
	p.typev1 = CLC_TYPE_N;
	p.has_prefix = false;
	p.ism_gid = 8; /* byte 47 doubles as IPv6 count: 8 is fine */
	assert_true(clc_proposal_encode(&p, buf, sizeof(buf)) > 0);
	assert_int_equal(buf[39], 0);
}

/* v2-only with an ISM GID whose last byte would read as > 8 IPv6 prefixes */
static void test_prop_v2_only_alt_iparea(void **state)
{
	struct clc_proposal p, back;
	uint8_t buf[CLC_MAX_LEN];
	int n;

	fill_max_proposal(&p);
	p.typev1 = CLC_TYPE_N;
	p.has_prefix = false;
	p.ipv6_count = 0;
	memset(p.ipv4_subnet, 0, 4);
	p.ipv4_prefix_len = 0;
	memset(p.ipv6, 0, sizeof(p.ipv6));
	p.ism_gid = 0xFFF9;
	set_canonical_offsets(&p);
	p.iparea_offset = 32;
	n = clc_proposal_encode(&p, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(buf[39], 32); /* count byte moved to reserved byte 79 */
	assert_int_equal(buf[79], 0);
	assert_int_equal(clc_proposal_decode(buf, (size_t)n, &back), 0);
	assert_memory_equal(&p, &back, sizeof(p));
}

static void test_prop_malformed(void **state)
{
	struct clc_proposal p;
	size_t n;

	/* v1 */
	n = vec("prop_v1_ipv4");
	vbuf[7] = 0x12; /* v1 with typev1 N */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_TYPEV1);
	n = vec("prop_v1_ipv4");
	vbuf[39] = 41;
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_IPAREA_OFFSET);
	n = vec("prop_v1_ipv4");
	vbuf[47] = 9;
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_IPV6_COUNT);
	n = vec("prop_v1_ipv4");
	vbuf[47] = 1; /* claims an IPv6 prefix the length has no room for */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_LENGTH);
	n = vec("prop_v1_ipv4");
	vbuf[39] = 4; /* prefix area pushed into the trailer: count reads 0xD9 */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_IPV6_COUNT);
	n = vec("prop_v1_ipv4");
	vbuf[39] = 40; /* prefix area beyond the end of the message */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_LENGTH);
	n = vec("prop_v1_ipv4");
	vbuf[n - 1] = 0;
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_TRAILER);
	n = vec("prop_v1_ipv4");
	assert_int_equal(clc_proposal_decode(vbuf, n - 1, &p), WIRE_E_SHORT);
	assert_int_equal(clc_proposal_decode(vbuf, 0, &p), WIRE_E_SHORT);
	n = vec("decl_v1");
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_TYPE);

	/* v2 */
	n = vec("prop_v2_linux");
	vbuf[51] = 0;
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_V2EXT_OFFSET);
	vbuf[50] = 0;
	vbuf[51] = 173;
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_V2EXT_OFFSET);
	vbuf[51] = 172; /* accepted by Linux, but points past the message */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_V2EXT_BOUNDS);
	n = vec("prop_v2_linux");
	vbuf[51] = 51; /* ext at 103 (e = 1 there): UEID list past the trailer */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_V2EXT_BOUNDS);
	n = vec("prop_v2_linux");
	vbuf[80] = 9;
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_EID_COUNT);
	n = vec("prop_v2_linux");
	vbuf[80] = 2; /* length says one UEID */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_LENGTH);
	n = vec("prop_v2_linux");
	vbuf[47] = 9; /* IPv6 count byte checked even with typev1 N */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_IPV6_COUNT);
	n = vec("prop_v2_linux");
	vbuf[n - 4] = 0;
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_TRAILER);
	n = vec("prop_v2_linux");
	vbuf[n - 1] = 0xC4; /* "SMCD" trailer is accepted, as Linux */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), 0);
	n = vec("prop_v2_linux");
	vbuf[39] = 40; /* v2-only with iparea 40: count byte at 87 (0) */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), 0);

	n = vec("prop_v2_smcd2");
	vbuf[81] = 9;
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_ISM_GID_COUNT);
	n = vec("prop_v2_smcd2");
	vbuf[87] = 0x40 + 10; /* SMC-Dv2 extension shifted into the trailer */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_SMCDV2_BOUNDS);
	n = vec("prop_v2_smcd2");
	vbuf[7] = 0x26; /* typev2 D|R=B -> D: same layout, still fine */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), 0);
	vbuf[7] = 0x22; /* typev2 R: length now too long for the formula */
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_LENGTH);

	/* only SMC-R v2 offered: GID count is not limited (Linux) */
	n = vec("prop_v2_linux");
	vbuf[81] = 200;
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), 0);
	assert_int_equal(p.ism_gid_count, 200);
}

static void test_accept_v1_fields(void **state)
{
	struct clc_accept_confirm a;
	size_t n = vec("acc_v1_fc");

	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), 0);
	assert_int_equal(a.type, CLC_ACCEPT);
	assert_int_equal(a.version, CLC_V1);
	assert_true(a.first_contact);
	assert_int_equal(a.qpn, 0x11);
	assert_int_equal(a.rmb_rkey, 0x1234);
	assert_int_equal(a.rmbe_idx, 1);
	assert_int_equal(a.rmbe_alert_token, 5);
	assert_int_equal(a.rmbe_size, 2); /* 64 KiB */
	assert_int_equal(a.qp_mtu, 3);	  /* 1024 */
	assert_int_equal(a.rmb_dma_addr, 0x7f0000100000ull);
	assert_int_equal(a.psn, 0x123456);

	n = vec("conf_v1");
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), 0);
	assert_int_equal(a.type, CLC_CONFIRM);
	assert_false(a.first_contact);
}

static void test_accept_v2_fields(void **state)
{
	static const char host[] = "vm2                             ";
	struct clc_accept_confirm a;
	size_t n = vec("acc_v2_fc");

	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), 0);
	assert_int_equal(a.version, CLC_V2);
	assert_true(a.first_contact);
	assert_int_equal(a.eid[0], 'R');
	assert_true(a.fce.v2_direct);
	assert_int_equal(a.fce.os_type, CLC_OS_LINUX);
	assert_int_equal(a.fce.release, CLC_RELEASE_1);
	assert_memory_equal(a.fce.hostname, host, 32);
	assert_int_equal(a.fce.max_conns, 255);
	assert_int_equal(a.fce.max_links, 1);
	assert_int_equal(a.fce.feature_mask, 1);
	assert_int_equal(a.gid_count, 0);

	n = vec("conf_v2_fc");
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), 0);
	assert_int_equal(a.type, CLC_CONFIRM);
	assert_int_equal(a.gid_count, 1);
	assert_int_equal(a.gids[0][15], 1);

	n = vec("acc_v2");
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), 0);
	assert_false(a.first_contact);
	assert_int_equal(a.fce.max_conns, 0);
}

static void test_accept_limits(void **state)
{
	struct clc_accept_confirm a, back;
	uint8_t buf[CLC_ACCEPT_MAX_LEN + 8];
	int n;

	memset(&a, 0, sizeof(a));

	a.type = CLC_CONFIRM;
	a.version = CLC_V2;
	a.first_contact = true;
	a.qpn = 0xFFFFFF;
	a.psn = 0xFFFFFF;
	a.rmb_rkey = UINT32_MAX;
	a.rmbe_idx = 255;
	a.rmbe_alert_token = UINT32_MAX;
	a.rmbe_size = 15;
	a.qp_mtu = 15;
	a.rmb_dma_addr = UINT64_MAX;
	a.fce.os_type = 15;
	a.fce.release = 15;
	a.fce.max_conns = 255;
	a.fce.max_links = 255;
	a.fce.feature_mask = 0xFFFF;
	a.gid_count = CLC_MAX_GIDS;
	memset(a.gids, 0xAB, sizeof(a.gids));
	n = clc_accept_confirm_encode(&a, buf, sizeof(buf));
	assert_int_equal(n, CLC_ACCEPT_MAX_LEN);
	assert_int_equal(clc_accept_confirm_decode(buf, (size_t)n, &back), 0);
	assert_memory_equal(&a, &back, sizeof(a));

	a.qpn = 0x1000000;
	assert_int_equal(clc_accept_confirm_encode(&a, buf, sizeof(buf)), -EINVAL);
	a.qpn = 0;
	a.psn = 0x1000000;
	assert_int_equal(clc_accept_confirm_encode(&a, buf, sizeof(buf)), -EINVAL);
	a.psn = 0;
	a.rmbe_size = 16;
	assert_int_equal(clc_accept_confirm_encode(&a, buf, sizeof(buf)), -EINVAL);
	a.rmbe_size = 0;
	a.gid_count = CLC_MAX_GIDS + 1;
	assert_int_equal(clc_accept_confirm_encode(&a, buf, sizeof(buf)), -EINVAL);
	a.gid_count = 1;
	a.type = CLC_ACCEPT; /* only a CONFIRM carries GIDs */
	assert_int_equal(clc_accept_confirm_encode(&a, buf, sizeof(buf)), -EINVAL);
	a.gid_count = 0;
	a.type = CLC_DECLINE;
	assert_int_equal(clc_accept_confirm_encode(&a, buf, sizeof(buf)), -EINVAL);
	a.type = CLC_ACCEPT;
	memset(buf, 0xEE, sizeof(buf));
	assert_int_equal(clc_accept_confirm_encode(&a, buf, CLC_ACCEPT_V2_FC_LEN - 1), -ENOSPC);
	assert_int_equal(buf[0], 0xEE);
	assert_int_equal(clc_accept_confirm_encode(&a, buf, CLC_ACCEPT_V2_FC_LEN),
			 CLC_ACCEPT_V2_FC_LEN);
	assert_int_equal(buf[CLC_ACCEPT_V2_FC_LEN], 0xEE);
}

static void set_len(size_t n)
{
	vbuf[5] = (uint8_t)(n >> 8);
	vbuf[6] = (uint8_t)n;
	memcpy(vbuf + n - 4, "\xE2\xD4\xC3\xD9", 4);
}

static void test_accept_malformed(void **state)
{
	struct clc_accept_confirm a;
	size_t n;

	n = vec("acc_v1_fc");
	vbuf[7] = 0x1A; /* typev1 N */
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), WIRE_E_TYPEV1);
	vbuf[7] = 0x1B; /* typev1 B */
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), WIRE_E_TYPEV1);
	vbuf[7] = 0x19; /* SMC-D */
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), WIRE_E_SMCD);
	n = vec("acc_v1_fc");
	vbuf[n - 2] = 0;
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), WIRE_E_TRAILER);
	n = vec("acc_v1_fc");
	assert_int_equal(clc_accept_confirm_decode(vbuf, n - 1, &a), WIRE_E_SHORT);
	/* v1 must be exactly 68 */
	n = vec("acc_v1_fc");
	memset(vbuf + n, 0, 8);
	set_len(n + 4);
	assert_int_equal(clc_accept_confirm_decode(vbuf, n + 4, &a), WIRE_E_LENGTH);
	/* v2 at least 108 */
	n = vec("acc_v2");
	set_len(104);
	assert_int_equal(clc_accept_confirm_decode(vbuf, 104, &a), WIRE_E_LENGTH);
	/* v2 longer than needed: accepted like Linux, extra ignored */
	n = vec("acc_v2");
	memset(vbuf + n - 4, 0, 8);
	set_len(n + 8);
	assert_int_equal(clc_accept_confirm_decode(vbuf, n + 8, &a), 0);
	/* first contact without room for the extension */
	n = vec("acc_v2");
	vbuf[7] = 0x28;
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), WIRE_E_FCE_LENGTH);
	/* FC CONFIRM: GID count above 8, list past the message, no count */
	n = vec("conf_v2_fc");
	vbuf[156] = 9;
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), WIRE_E_GID_COUNT);
	vbuf[156] = 2;
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), WIRE_E_GIDLIST_LENGTH);
	n = vec("conf_v2_fc");
	set_len(160);
	assert_int_equal(clc_accept_confirm_decode(vbuf, 160, &a), WIRE_E_GIDLIST_LENGTH);
	/* an FC ACCEPT of 160 bytes has no GID list: fine */
	n = vec("acc_v2_fc");
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), 0);
	/* wrong type for this decoder */
	n = vec("prop_v1_ipv4");
	assert_int_equal(clc_accept_confirm_decode(vbuf, n, &a), WIRE_E_TYPE);
}

static void test_decline(void **state)
{
	struct clc_decline d;
	size_t n;

	n = vec("decl_v1");
	assert_int_equal(clc_decline_decode(vbuf, n, &d), 0);
	assert_int_equal(d.version, CLC_V1);
	assert_false(d.out_of_sync);
	assert_int_equal(d.diagnosis, SMC_CLC_DECL_DIFFPREFIX);
	assert_int_equal(d.os_type, 0);
	assert_int_equal(d.peer_id[0], 0x5A);

	n = vec("decl_v1_sync");
	assert_int_equal(clc_decline_decode(vbuf, n, &d), 0);
	assert_true(d.out_of_sync);
	assert_int_equal(d.diagnosis, SMC_CLC_DECL_SYNCERR);

	n = vec("decl_v2");
	assert_int_equal(clc_decline_decode(vbuf, n, &d), 0);
	assert_int_equal(d.version, CLC_V2);
	assert_int_equal(d.diagnosis, SMC_CLC_DECL_NOSMCDEV);
	assert_int_equal(d.os_type, CLC_OS_LINUX);

	/* trailer not checked, typev1 not checked (as Linux 6.18) */
	n = vec("decl_v2");
	memset(vbuf + n - 4, 0, 4);
	vbuf[7] = 0x23;
	assert_int_equal(clc_decline_decode(vbuf, n, &d), 0);
	assert_int_equal(d.typev1, CLC_TYPE_B);

	/* exact lengths: 28 for v1, 44 for v2 */
	n = vec("decl_v2");
	vbuf[7] = 0x10;
	assert_int_equal(clc_decline_decode(vbuf, n, &d), WIRE_E_LENGTH);
	n = vec("decl_v1");
	vbuf[7] = 0x20;
	assert_int_equal(clc_decline_decode(vbuf, n, &d), WIRE_E_LENGTH);
	n = vec("decl_v1");
	vbuf[6] = 30;
	assert_int_equal(clc_decline_decode(vbuf, 30, &d), WIRE_E_LENGTH);
	n = vec("decl_v1");
	assert_int_equal(clc_decline_decode(vbuf, n - 1, &d), WIRE_E_SHORT);
	n = vec("acc_v1_fc");
	assert_int_equal(clc_decline_decode(vbuf, n, &d), WIRE_E_TYPE);
}

static void test_decline_encode(void **state)
{
	struct clc_decline d, back;
	uint8_t buf[CLC_DECLINE_V2_LEN];

	memset(&d, 0, sizeof(d));

	d.version = CLC_V2;
	d.out_of_sync = true;
	d.diagnosis = SMC_CLC_DECL_SYNCERR;
	d.os_type = 15;
	memset(d.peer_id, 0xFF, sizeof(d.peer_id));
	for (int i = 0; i < CLC_DECLINE_DIAG_EXT; i++)
		d.diag_ext[i] = UINT32_MAX - (uint32_t)i;
	assert_int_equal(clc_decline_encode(&d, buf, sizeof(buf)), CLC_DECLINE_V2_LEN);
	assert_int_equal(buf[7], 0x28);
	assert_int_equal(clc_decline_decode(buf, sizeof(buf), &back), 0);
	assert_memory_equal(&d, &back, sizeof(d));
	assert_int_equal(clc_decline_encode(&d, buf, CLC_DECLINE_V2_LEN - 1), -ENOSPC);
	d.os_type = 16;
	assert_int_equal(clc_decline_encode(&d, buf, sizeof(buf)), -EINVAL);
	d.os_type = 0;
	d.version = 0;
	assert_int_equal(clc_decline_encode(&d, buf, sizeof(buf)), -EINVAL);
}

/* Every malformed byte string must leave the output untouched. */
static void test_out_untouched_on_error(void **state)
{
	struct clc_proposal p;
	size_t n = vec("prop_v2_linux");

	memset(&p, 0x5C, sizeof(p));
	vbuf[80] = 9;
	assert_int_equal(clc_proposal_decode(vbuf, n, &p), WIRE_E_EID_COUNT);
	assert_int_equal(p.version, 0x5C);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_vectors_roundtrip),
		cmocka_unit_test(test_hdr_peek),
		cmocka_unit_test(test_hdr_errors),
		cmocka_unit_test(test_prop_v1_fields),
		cmocka_unit_test(test_prop_v2_linux_fields),
		cmocka_unit_test(test_prop_v2_variants),
		cmocka_unit_test(test_prop_limits),
		cmocka_unit_test(test_prop_struct_roundtrip),
		cmocka_unit_test(test_prop_encode_invalid),
		cmocka_unit_test(test_prop_v2_only_alt_iparea),
		cmocka_unit_test(test_prop_malformed),
		cmocka_unit_test(test_accept_v1_fields),
		cmocka_unit_test(test_accept_v2_fields),
		cmocka_unit_test(test_accept_limits),
		cmocka_unit_test(test_accept_malformed),
		cmocka_unit_test(test_decline),
		cmocka_unit_test(test_decline_encode),
		cmocka_unit_test(test_out_untouched_on_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
