// SPDX-License-Identifier: MIT
/*
 * CLC codec. Layouts: Linux net/smc/smc_clc.h (struct smc_clc_msg_hdr and
 * the per-type structs); Linux's validation rules: net/smc/smc_clc.c
 * smc_clc_wait_msg(), smc_clc_msg_hdr_valid() and smc_clc_msg_prop_valid().
 * The rules we apply and where we are stricter: docs/wire.md.
 */
#include <errno.h>
#include <string.h>

#include "clc.h"
#include "wire_bytes.h"
#include "wire_err.h"

/* header */
#define CLC_OFF_TYPE	  4
#define CLC_OFF_LENGTH	  5
#define CLC_OFF_VERSION	  7
#define CLC_VERSION_SHIFT 4
#define CLC_TYPEV2_SHIFT  2
#define CLC_TYPE_BITS	  0x3

/* PROPOSAL fixed part */
#define CLC_P_OFF_PEER_ID 8
#define CLC_P_OFF_GID	  16
#define CLC_P_OFF_MAC	  32
#define CLC_P_OFF_IPAREA  38
#define CLC_P_FIXED_LEN	  40
/* SMC-D info area, at CLC_P_FIXED_LEN */
#define CLC_SMCD_OFF_GID      0
#define CLC_SMCD_OFF_CHID     8
#define CLC_SMCD_OFF_V2EXT    10
#define CLC_SMCD_V2EXT_END    12 /* v2_ext_offset counts from here */
#define CLC_SMCD_OFF_OUI      12
#define CLC_SMCD_OFF_VOPTS    15
#define CLC_SMCD_INFO_LEN     40
#define CLC_IPAREA_OFFSET_MAX CLC_SMCD_INFO_LEN
/* IP prefix area */
#define CLC_PFX_OFF_V4	     0
#define CLC_PFX_OFF_V4LEN    4
#define CLC_PFX_OFF_V6COUNT  7
#define CLC_PFX_LEN	     8
#define CLC_IPV6_PREFIX_SIZE 17
/*
 * Largest v2_ext_offset Linux accepts: the v2 extension may start no later
 * than after a full prefix area (8 + 8 * 17) behind the SMC-D info area.
 */
#define CLC_V2EXT_OFFSET_MAX                                                              \
	(CLC_SMCD_INFO_LEN + CLC_PFX_LEN + CLC_MAX_IPV6_PREFIXES * CLC_IPV6_PREFIX_SIZE - \
	 CLC_SMCD_V2EXT_END)
/* v2 extension */
#define CLC_V2X_OFF_EID_CNT	 0
#define CLC_V2X_OFF_GID_CNT	 1
#define CLC_V2X_OFF_RELEASE	 3
#define CLC_V2X_RELEASE_SHIFT	 4
#define CLC_V2X_SEID_BIT	 0x01
#define CLC_V2X_OFF_SMCD_OFF	 6
#define CLC_V2X_SMCD_OFF_END	 8 /* smcd_v2_ext_offset counts from here */
#define CLC_V2X_OFF_ROCE_GID	 8
#define CLC_V2X_OFF_MAX_CONNS	 24
#define CLC_V2X_OFF_MAX_LINKS	 25
#define CLC_V2X_OFF_FEATURE_MASK 26
#define CLC_V2X_LEN		 40
/* SMC-Dv2 extension */
#define CLC_SMCD2_OFF_SEID    0
#define CLC_SMCD2_LEN	      48
#define CLC_ISM_GID_CHID_SIZE 10

/* ACCEPT / CONFIRM */
#define CLC_AC_OFF_PEER_ID   8
#define CLC_AC_OFF_GID	     16
#define CLC_AC_OFF_MAC	     32
#define CLC_AC_OFF_QPN	     38
#define CLC_AC_OFF_RKEY	     41
#define CLC_AC_OFF_RMBE_IDX  45
#define CLC_AC_OFF_TOKEN     46
#define CLC_AC_OFF_SIZE_MTU  50
#define CLC_AC_SIZE_SHIFT    4
#define CLC_AC_MTU_MASK	     0x0F
#define CLC_AC_OFF_RMB_ADDR  52
#define CLC_AC_OFF_PSN	     61
#define CLC_AC_OFF_EID	     64
#define CLC_AC_OFF_FCE	     104
#define CLC_FCE_OFF_DIRECT   0
#define CLC_FCE_DIRECT_BIT   0x80
#define CLC_FCE_OFF_OS_REL   1
#define CLC_FCE_OS_SHIFT     4
#define CLC_FCE_REL_MASK     0x0F
#define CLC_FCE_OFF_HOSTNAME 4
#define CLC_FCE_OFF_CONNS    36
#define CLC_FCE_OFF_LINKS    37
#define CLC_FCE_OFF_FEATURES 38
#define CLC_FCE_OFF_VOPTS    40
#define CLC_AC_OFF_GID_CNT   156
#define CLC_AC_OFF_GID_LIST  160

/* DECLINE */
#define CLC_D_OFF_PEER_ID  8
#define CLC_D_OFF_DIAG	   16
#define CLC_D_OFF_OS	   20
#define CLC_D_OS_SHIFT	   4
#define CLC_D_OFF_DIAG_EXT 24

#define CLC_NIBBLE_MAX	   0x0F
#define CLC_U24_MAX	   0xFFFFFFu

static bool clc_eye_ok(const uint8_t *p, bool *smcd)
{
	uint32_t eye = get_be32(p);

	*smcd = eye == CLC_EYECATCHER_SMCD;
	return eye == CLC_EYECATCHER_SMCR || eye == CLC_EYECATCHER_SMCD;
}

static bool smcd_indicated(uint8_t t)
{
	return t == CLC_TYPE_D || t == CLC_TYPE_B;
}

/* Smallest valid length of a type/version, for the header peek. */
static uint16_t clc_min_len(uint8_t type, uint8_t version)
{
	switch (type) {
	case CLC_PROPOSAL:
		return version == CLC_V1 ? CLC_PROPOSAL_V1_MIN_LEN : CLC_PROPOSAL_V2_MIN_LEN;
	case CLC_ACCEPT:
	case CLC_CONFIRM:
		return CLC_ACCEPT_V1_LEN;
	default:
		return version == CLC_V1 ? CLC_DECLINE_V1_LEN : CLC_DECLINE_V2_LEN;
	}
}

static uint16_t clc_max_len(uint8_t type)
{
	switch (type) {
	case CLC_PROPOSAL:
		return CLC_PROPOSAL_MAX_LEN;
	case CLC_ACCEPT:
	case CLC_CONFIRM:
		return CLC_ACCEPT_MAX_LEN;
	default:
		return CLC_DECLINE_V2_LEN;
	}
}

int clc_hdr_decode(const uint8_t *buf, size_t len, struct clc_hdr *hdr)
{
	struct clc_hdr h;

	memset(&h, 0, sizeof(h));
	if (len < CLC_HDR_LEN)
		return WIRE_E_SHORT;
	if (!clc_eye_ok(buf, &h.smcd))
		return WIRE_E_EYECATCHER;
	h.type = buf[CLC_OFF_TYPE];
	if (h.type < CLC_PROPOSAL || h.type > CLC_DECLINE)
		return WIRE_E_TYPE;
	h.version = clc_hdr_version(buf);
	if (h.version < CLC_V1)
		return WIRE_E_VERSION;
	h.typev2 = (buf[CLC_OFF_VERSION] >> CLC_TYPEV2_SHIFT) & CLC_TYPE_BITS;
	h.typev1 = buf[CLC_OFF_VERSION] & CLC_TYPE_BITS;
	h.length = get_be16(buf + CLC_OFF_LENGTH);
	if (h.length < clc_min_len(h.type, h.version))
		return WIRE_E_LENGTH;
	if (h.length > clc_max_len(h.type))
		return WIRE_E_TOO_LONG;
	memcpy(hdr, &h, sizeof(h));
	return 0;
}

bool clc_hdr_starts(const uint8_t *buf, size_t len, uint8_t type)
{
	uint8_t start[CLC_OFF_TYPE + 1];

	put_be32(start, CLC_EYECATCHER_SMCR);
	start[CLC_OFF_TYPE] = type;
	return !memcmp(buf, start, len < sizeof(start) ? len : sizeof(start));
}

uint8_t clc_hdr_version(const uint8_t *buf)
{
	return buf[CLC_OFF_VERSION] >> CLC_VERSION_SHIFT;
}

/*
 * Common start of every message decoder: header valid, of the wanted type
 * (accept and confirm share a decoder: want 0 takes either), and the whole
 * message within len.
 */
static int clc_msg_begin(const uint8_t *buf, size_t len, uint8_t want, struct clc_hdr *hdr)
{
	int rc = clc_hdr_decode(buf, len, hdr);

	if (rc)
		return rc;
	if (want ? hdr->type != want : hdr->type != CLC_ACCEPT && hdr->type != CLC_CONFIRM)
		return WIRE_E_TYPE;
	if (hdr->length > len)
		return WIRE_E_SHORT;
	return 0;
}

static int clc_trailer_check(const uint8_t *buf, uint16_t length)
{
	bool smcd;

	return clc_eye_ok(buf + length - CLC_TRL_LEN, &smcd) ? 0 : WIRE_E_TRAILER;
}

static void clc_hdr_put(uint8_t *buf, uint8_t type, size_t length, uint8_t version, uint8_t typev2,
			uint8_t typev1, bool smcd)
{
	uint32_t eye = smcd ? CLC_EYECATCHER_SMCD : CLC_EYECATCHER_SMCR;

	put_be32(buf, eye);
	buf[CLC_OFF_TYPE] = type;
	put_be16(buf + CLC_OFF_LENGTH, (uint16_t)length);
	buf[CLC_OFF_VERSION] =
		(uint8_t)(version << CLC_VERSION_SHIFT |
			  (typev2 & CLC_TYPE_BITS) << CLC_TYPEV2_SHIFT | (typev1 & CLC_TYPE_BITS));
	put_be32(buf + length - CLC_TRL_LEN, eye);
}

/* ---------------------------------------------------------------- PROPOSAL */

static void clc_smcd_info_get(const uint8_t *p, struct clc_proposal *m)
{
	m->has_smcd_info = true;
	m->ism_gid = get_be64(p + CLC_SMCD_OFF_GID);
	m->ism_chid = get_be16(p + CLC_SMCD_OFF_CHID);
	memcpy(m->vendor_oui, p + CLC_SMCD_OFF_OUI, sizeof(m->vendor_oui));
	memcpy(m->vendor_opts, p + CLC_SMCD_OFF_VOPTS, sizeof(m->vendor_opts));
}

static void clc_prefix_get(const uint8_t *p, struct clc_proposal *m)
{
	const uint8_t *e = p + CLC_PFX_LEN;

	m->has_prefix = true;
	memcpy(m->ipv4_subnet, p + CLC_PFX_OFF_V4, sizeof(m->ipv4_subnet));
	m->ipv4_prefix_len = p[CLC_PFX_OFF_V4LEN];
	for (unsigned int i = 0; i < m->ipv6_count; i++, e += CLC_IPV6_PREFIX_SIZE) {
		memcpy(m->ipv6[i].prefix, e, sizeof(m->ipv6[i].prefix));
		m->ipv6[i].prefix_len = e[sizeof(m->ipv6[i].prefix)];
	}
}

static void clc_v2_ext_get(const uint8_t *p, struct clc_proposal *m)
{
	m->has_v2_ext = true;
	m->release = p[CLC_V2X_OFF_RELEASE] >> CLC_V2X_RELEASE_SHIFT;
	m->seid_present = p[CLC_V2X_OFF_RELEASE] & CLC_V2X_SEID_BIT;
	m->smcd_v2_ext_offset = get_be16(p + CLC_V2X_OFF_SMCD_OFF);
	memcpy(m->roce_gid, p + CLC_V2X_OFF_ROCE_GID, sizeof(m->roce_gid));
	m->max_conns = p[CLC_V2X_OFF_MAX_CONNS];
	m->max_links = p[CLC_V2X_OFF_MAX_LINKS];
	m->feature_mask = get_be16(p + CLC_V2X_OFF_FEATURE_MASK);
	memcpy(m->eid, p + CLC_V2X_LEN, (size_t)m->eid_count * CLC_EID_LEN);
}

static void clc_smcd_v2_ext_get(const uint8_t *p, struct clc_proposal *m)
{
	const uint8_t *e = p + CLC_SMCD2_LEN;

	m->has_smcd_v2_ext = true;
	memcpy(m->seid, p + CLC_SMCD2_OFF_SEID, sizeof(m->seid));
	for (unsigned int i = 0; i < m->ism_gid_count; i++, e += CLC_ISM_GID_CHID_SIZE) {
		m->ism_gids[i].gid = get_be64(e);
		m->ism_gids[i].chid = get_be16(e + sizeof(uint64_t));
	}
}

static size_t clc_prefix_len(uint8_t ipv6_count)
{
	return CLC_PFX_LEN + (size_t)ipv6_count * CLC_IPV6_PREFIX_SIZE;
}

static size_t clc_v2_ext_len(uint8_t eid_count)
{
	return CLC_V2X_LEN + (size_t)eid_count * CLC_EID_LEN;
}

static size_t clc_smcd_v2_ext_len(uint8_t gid_count)
{
	return CLC_SMCD2_LEN + (size_t)gid_count * CLC_ISM_GID_CHID_SIZE;
}

/* v1 proposal: prefix area at 40 + iparea_offset, nothing else. */
static int clc_proposal_v1_decode(const uint8_t *buf, uint16_t length, size_t pfx,
				  struct clc_proposal *m)
{
	if (m->typev1 == CLC_TYPE_N)
		return WIRE_E_TYPEV1;
	if (length != pfx + clc_prefix_len(m->ipv6_count) + CLC_TRL_LEN)
		return WIRE_E_LENGTH;
	if (m->iparea_offset == CLC_SMCD_INFO_LEN)
		clc_smcd_info_get(buf + CLC_P_FIXED_LEN, m);
	clc_prefix_get(buf + pfx, m);
	return 0;
}

/*
 * v2 proposal: SMC-D info area at 40, prefix area (if typev1 != N), v2
 * extension (if typev2 != N) and SMC-Dv2 extension (if typev2 has D), each
 * at the offset the message gives; length must match Linux's formula.
 */
static int clc_proposal_v2_decode(const uint8_t *buf, uint16_t length, size_t pfx,
				  struct clc_proposal *m)
{
	size_t end = (size_t)length - CLC_TRL_LEN; /* areas must end before the trailer */
	size_t expect = CLC_P_FIXED_LEN + CLC_SMCD_INFO_LEN + CLC_TRL_LEN;
	size_t v2 = 0;

	clc_smcd_info_get(buf + CLC_P_FIXED_LEN, m);
	m->v2_ext_offset = get_be16(buf + CLC_P_FIXED_LEN + CLC_SMCD_OFF_V2EXT);
	if (m->typev1 != CLC_TYPE_N)
		expect += clc_prefix_len(m->ipv6_count);
	if (m->typev2 != CLC_TYPE_N) {
		if (!m->v2_ext_offset || m->v2_ext_offset > CLC_V2EXT_OFFSET_MAX)
			return WIRE_E_V2EXT_OFFSET;
		v2 = CLC_P_FIXED_LEN + CLC_SMCD_V2EXT_END + m->v2_ext_offset;
		if (v2 + CLC_V2X_LEN > end)
			return WIRE_E_V2EXT_BOUNDS;
		m->eid_count = buf[v2 + CLC_V2X_OFF_EID_CNT];
		m->ism_gid_count = buf[v2 + CLC_V2X_OFF_GID_CNT];
		if (m->eid_count > CLC_MAX_UEIDS)
			return WIRE_E_EID_COUNT;
		if (smcd_indicated(m->typev2) && m->ism_gid_count > CLC_MAX_ISM_GIDS)
			return WIRE_E_ISM_GID_COUNT;
		expect += clc_v2_ext_len(m->eid_count);
		if (smcd_indicated(m->typev2))
			expect += clc_smcd_v2_ext_len(m->ism_gid_count);
	}
	if (length != expect)
		return WIRE_E_LENGTH;

	if (m->typev1 != CLC_TYPE_N) {
		/* iparea_offset <= 40 and the length formula keep it inside */
		if (pfx + clc_prefix_len(m->ipv6_count) > end)
			return WIRE_E_LENGTH;
		clc_prefix_get(buf + pfx, m);
	}
	if (m->typev2 == CLC_TYPE_N)
		return 0;
	if (v2 + clc_v2_ext_len(m->eid_count) > end)
		return WIRE_E_V2EXT_BOUNDS;
	clc_v2_ext_get(buf + v2, m);
	if (smcd_indicated(m->typev2) && m->smcd_v2_ext_offset) {
		size_t d = v2 + CLC_V2X_SMCD_OFF_END + m->smcd_v2_ext_offset;

		if (d + clc_smcd_v2_ext_len(m->ism_gid_count) > end)
			return WIRE_E_SMCDV2_BOUNDS;
		clc_smcd_v2_ext_get(buf + d, m);
	}
	return 0;
}

int clc_proposal_decode(const uint8_t *buf, size_t len, struct clc_proposal *out)
{
	struct clc_proposal m;
	struct clc_hdr hdr;
	size_t pfx;
	int rc;

	/*
	 * memset/memcpy, not = {0} / struct assignment: padding stays zero, so
	 * callers may compare decoded messages with memcmp.
	 */
	memset(&m, 0, sizeof(m));

	rc = clc_msg_begin(buf, len, CLC_PROPOSAL, &hdr);
	if (rc)
		return rc;
	m.version = hdr.version;
	m.typev1 = hdr.typev1;
	m.typev2 = hdr.typev2;
	m.smcd = hdr.smcd;
	memcpy(m.peer_id, buf + CLC_P_OFF_PEER_ID, sizeof(m.peer_id));
	memcpy(m.gid, buf + CLC_P_OFF_GID, sizeof(m.gid));
	memcpy(m.mac, buf + CLC_P_OFF_MAC, sizeof(m.mac));

	m.iparea_offset = get_be16(buf + CLC_P_OFF_IPAREA);
	if (m.iparea_offset > CLC_IPAREA_OFFSET_MAX)
		return WIRE_E_IPAREA_OFFSET;
	/*
	 * Linux checks the IPv6 count byte even when typev1 = N (it then sits
	 * in the SMC-D info area). The message must at least reach it.
	 */
	pfx = CLC_P_FIXED_LEN + m.iparea_offset;
	if (pfx + CLC_PFX_LEN > hdr.length)
		return WIRE_E_LENGTH;
	m.ipv6_count = buf[pfx + CLC_PFX_OFF_V6COUNT];
	if (m.ipv6_count > CLC_MAX_IPV6_PREFIXES)
		return WIRE_E_IPV6_COUNT;

	if (hdr.version == CLC_V1)
		rc = clc_proposal_v1_decode(buf, hdr.length, pfx, &m);
	else
		rc = clc_proposal_v2_decode(buf, hdr.length, pfx, &m);
	if (rc)
		return rc;
	if (!m.has_prefix)
		m.ipv6_count = 0; /* the byte belonged to another area */
	rc = clc_trailer_check(buf, hdr.length);
	if (rc)
		return rc;
	memcpy(out, &m, sizeof(m));
	return 0;
}

/*
 * A v2 proposal without prefix area still has its IPv6 count byte checked
 * at 40 + iparea_offset + 7. Linux sends iparea_offset 0, which puts it on
 * the last ISM GID byte; if that byte is above 8 we point the offset at the
 * reserved (zero) tail of the SMC-D info area instead.
 */
#define CLC_V2_ONLY_ALT_IPAREA (CLC_SMCD_INFO_LEN - CLC_PFX_LEN)

/* Canonical (Linux) layout: where each area goes, 0 = absent. */
struct clc_prop_layout {
	size_t smcd, pfx, v2, smcd2, length;
};

static int clc_proposal_layout(const struct clc_proposal *m, struct clc_prop_layout *l)
{
	bool v1 = m->version == CLC_V1;
	bool d2 = !v1 && smcd_indicated(m->typev2);
	size_t pos = CLC_P_FIXED_LEN;

	if (!m->version || m->version > CLC_NIBBLE_MAX || m->typev1 > CLC_TYPE_B ||
	    m->typev2 > CLC_TYPE_B || m->ipv6_count > CLC_MAX_IPV6_PREFIXES ||
	    m->eid_count > CLC_MAX_UEIDS || (d2 && m->ism_gid_count > CLC_MAX_ISM_GIDS) ||
	    m->release > CLC_NIBBLE_MAX)
		return -EINVAL;
	/* presence flags must match what version and types imply */
	if (m->has_prefix != (v1 || m->typev1 != CLC_TYPE_N) ||
	    m->has_v2_ext != (!v1 && m->typev2 != CLC_TYPE_N) || (!v1 && !m->has_smcd_info) ||
	    (m->has_smcd_v2_ext && !d2) || (v1 && m->typev1 == CLC_TYPE_N))
		return -EINVAL;
	memset(l, 0, sizeof(*l));
	if (m->has_smcd_info) {
		l->smcd = pos;
		pos += CLC_SMCD_INFO_LEN;
	}
	if (m->has_prefix) {
		l->pfx = pos;
		pos += clc_prefix_len(m->ipv6_count);
	}
	if (m->has_v2_ext) {
		l->v2 = pos;
		pos += clc_v2_ext_len(m->eid_count);
	}
	if (d2) {
		l->smcd2 = pos;
		pos += clc_smcd_v2_ext_len(m->ism_gid_count);
	}
	l->length = pos + CLC_TRL_LEN;
	return 0;
}

size_t clc_proposal_len(const struct clc_proposal *m)
{
	struct clc_prop_layout l;

	return clc_proposal_layout(m, &l) ? 0 : l.length;
}

static void clc_smcd_info_put(uint8_t *p, const struct clc_proposal *m, size_t v2_off)
{
	put_be64(p + CLC_SMCD_OFF_GID, m->ism_gid);
	put_be16(p + CLC_SMCD_OFF_CHID, m->ism_chid);
	put_be16(p + CLC_SMCD_OFF_V2EXT, (uint16_t)v2_off);
	memcpy(p + CLC_SMCD_OFF_OUI, m->vendor_oui, sizeof(m->vendor_oui));
	memcpy(p + CLC_SMCD_OFF_VOPTS, m->vendor_opts, sizeof(m->vendor_opts));
}

static void clc_prefix_put(uint8_t *p, const struct clc_proposal *m)
{
	uint8_t *e = p + CLC_PFX_LEN;

	memcpy(p + CLC_PFX_OFF_V4, m->ipv4_subnet, sizeof(m->ipv4_subnet));
	p[CLC_PFX_OFF_V4LEN] = m->ipv4_prefix_len;
	p[CLC_PFX_OFF_V6COUNT] = m->ipv6_count;
	for (unsigned int i = 0; i < m->ipv6_count; i++, e += CLC_IPV6_PREFIX_SIZE) {
		memcpy(e, m->ipv6[i].prefix, sizeof(m->ipv6[i].prefix));
		e[sizeof(m->ipv6[i].prefix)] = m->ipv6[i].prefix_len;
	}
}

static void clc_v2_ext_put(uint8_t *p, const struct clc_proposal *m, size_t smcd2_off)
{
	p[CLC_V2X_OFF_EID_CNT] = m->eid_count;
	p[CLC_V2X_OFF_GID_CNT] = m->ism_gid_count;
	p[CLC_V2X_OFF_RELEASE] = (uint8_t)(m->release << CLC_V2X_RELEASE_SHIFT |
					   (m->seid_present ? CLC_V2X_SEID_BIT : 0));
	put_be16(p + CLC_V2X_OFF_SMCD_OFF, (uint16_t)smcd2_off);
	memcpy(p + CLC_V2X_OFF_ROCE_GID, m->roce_gid, sizeof(m->roce_gid));
	p[CLC_V2X_OFF_MAX_CONNS] = m->max_conns;
	p[CLC_V2X_OFF_MAX_LINKS] = m->max_links;
	put_be16(p + CLC_V2X_OFF_FEATURE_MASK, m->feature_mask);
	memcpy(p + CLC_V2X_LEN, m->eid, (size_t)m->eid_count * CLC_EID_LEN);
}

static void clc_smcd_v2_ext_put(uint8_t *p, const struct clc_proposal *m)
{
	uint8_t *e = p + CLC_SMCD2_LEN;

	memcpy(p + CLC_SMCD2_OFF_SEID, m->seid, sizeof(m->seid));
	for (unsigned int i = 0; i < m->ism_gid_count; i++, e += CLC_ISM_GID_CHID_SIZE) {
		put_be64(e, m->ism_gids[i].gid);
		put_be16(e + sizeof(uint64_t), m->ism_gids[i].chid);
	}
}

int clc_proposal_encode(const struct clc_proposal *m, uint8_t *buf, size_t cap)
{
	struct clc_prop_layout l;
	size_t v2_off = 0, smcd2_off = 0;
	int rc;

	rc = clc_proposal_layout(m, &l);
	if (rc)
		return rc;
	if (wire_out_claim(buf, cap, l.length))
		return -ENOSPC;
	clc_hdr_put(buf, CLC_PROPOSAL, l.length, m->version, m->typev2, m->typev1, m->smcd);
	memcpy(buf + CLC_P_OFF_PEER_ID, m->peer_id, sizeof(m->peer_id));
	memcpy(buf + CLC_P_OFF_GID, m->gid, sizeof(m->gid));
	memcpy(buf + CLC_P_OFF_MAC, m->mac, sizeof(m->mac));
	if (l.pfx)
		put_be16(buf + CLC_P_OFF_IPAREA, (uint16_t)(l.pfx - CLC_P_FIXED_LEN));
	else if ((m->ism_gid & 0xFF) > CLC_MAX_IPV6_PREFIXES)
		put_be16(buf + CLC_P_OFF_IPAREA, CLC_V2_ONLY_ALT_IPAREA);
	if (l.v2)
		v2_off = l.v2 - (CLC_P_FIXED_LEN + CLC_SMCD_V2EXT_END);
	if (l.smcd2 && m->has_smcd_v2_ext)
		smcd2_off = l.smcd2 - (l.v2 + CLC_V2X_SMCD_OFF_END);
	if (l.smcd)
		clc_smcd_info_put(buf + l.smcd, m, v2_off);
	if (l.pfx)
		clc_prefix_put(buf + l.pfx, m);
	if (l.v2)
		clc_v2_ext_put(buf + l.v2, m, smcd2_off);
	if (smcd2_off)
		clc_smcd_v2_ext_put(buf + l.smcd2, m);
	return (int)l.length;
}

/* ------------------------------------------------------- ACCEPT / CONFIRM */

/* Length of the v2 message by Linux's layout, or the v1 constant. */
size_t clc_accept_confirm_len(const struct clc_accept_confirm *m)
{
	if (m->version == CLC_V1)
		return CLC_ACCEPT_V1_LEN;
	if (!m->first_contact)
		return CLC_ACCEPT_V2_LEN;
	if (m->type == CLC_ACCEPT)
		return CLC_ACCEPT_V2_FC_LEN;
	return CLC_CONFIRM_V2_FC_MIN_LEN + (size_t)m->gid_count * CLC_GID_LEN;
}

static void clc_fce_get(const uint8_t *p, struct clc_fce *f)
{
	f->v2_direct = p[CLC_FCE_OFF_DIRECT] & CLC_FCE_DIRECT_BIT;
	f->os_type = p[CLC_FCE_OFF_OS_REL] >> CLC_FCE_OS_SHIFT;
	f->release = p[CLC_FCE_OFF_OS_REL] & CLC_FCE_REL_MASK;
	memcpy(f->hostname, p + CLC_FCE_OFF_HOSTNAME, sizeof(f->hostname));
	f->max_conns = p[CLC_FCE_OFF_CONNS];
	f->max_links = p[CLC_FCE_OFF_LINKS];
	f->feature_mask = get_be16(p + CLC_FCE_OFF_FEATURES);
	memcpy(f->vendor_opts, p + CLC_FCE_OFF_VOPTS, sizeof(f->vendor_opts));
}

static void clc_fce_put(uint8_t *p, const struct clc_fce *f)
{
	p[CLC_FCE_OFF_DIRECT] = f->v2_direct ? CLC_FCE_DIRECT_BIT : 0;
	p[CLC_FCE_OFF_OS_REL] = (uint8_t)(f->os_type << CLC_FCE_OS_SHIFT | f->release);
	memcpy(p + CLC_FCE_OFF_HOSTNAME, f->hostname, sizeof(f->hostname));
	p[CLC_FCE_OFF_CONNS] = f->max_conns;
	p[CLC_FCE_OFF_LINKS] = f->max_links;
	put_be16(p + CLC_FCE_OFF_FEATURES, f->feature_mask);
	memcpy(p + CLC_FCE_OFF_VOPTS, f->vendor_opts, sizeof(f->vendor_opts));
}

/* Length rules: v1 exactly 68; v2 >= 108, FC >= 160, FC CONFIRM fits its GIDs. */
static int clc_ac_length_check(const uint8_t *buf, const struct clc_hdr *hdr, bool fc)
{
	uint8_t n;

	if (hdr->version == CLC_V1)
		return hdr->length == CLC_ACCEPT_V1_LEN ? 0 : WIRE_E_LENGTH;
	if (hdr->length < CLC_ACCEPT_V2_LEN)
		return WIRE_E_LENGTH;
	if (!fc)
		return 0;
	if (hdr->length < CLC_ACCEPT_V2_FC_LEN)
		return WIRE_E_FCE_LENGTH;
	if (hdr->type != CLC_CONFIRM)
		return 0;
	if (hdr->length < CLC_CONFIRM_V2_FC_MIN_LEN)
		return WIRE_E_GIDLIST_LENGTH;
	n = buf[CLC_AC_OFF_GID_CNT];
	if (n > CLC_MAX_GIDS)
		return WIRE_E_GID_COUNT;
	if (hdr->length < CLC_CONFIRM_V2_FC_MIN_LEN + (size_t)n * CLC_GID_LEN)
		return WIRE_E_GIDLIST_LENGTH;
	return 0;
}

int clc_accept_confirm_decode(const uint8_t *buf, size_t len, struct clc_accept_confirm *out)
{
	struct clc_accept_confirm m;
	struct clc_hdr hdr;
	int rc;

	memset(&m, 0, sizeof(m));

	rc = clc_msg_begin(buf, len, 0, &hdr);
	if (rc)
		return rc;
	if (hdr.typev1 != CLC_TYPE_R && hdr.typev1 != CLC_TYPE_D)
		return WIRE_E_TYPEV1;
	if (hdr.typev1 == CLC_TYPE_D)
		return WIRE_E_SMCD;
	m.type = hdr.type;
	m.version = hdr.version;
	m.smcd = hdr.smcd;
	m.first_contact = buf[CLC_OFF_VERSION] & CLC_FLAG_MASK;
	rc = clc_ac_length_check(buf, &hdr, m.first_contact);
	if (rc)
		return rc;
	rc = clc_trailer_check(buf, hdr.length);
	if (rc)
		return rc;

	memcpy(m.peer_id, buf + CLC_AC_OFF_PEER_ID, sizeof(m.peer_id));
	memcpy(m.gid, buf + CLC_AC_OFF_GID, sizeof(m.gid));
	memcpy(m.mac, buf + CLC_AC_OFF_MAC, sizeof(m.mac));
	m.qpn = get_be24(buf + CLC_AC_OFF_QPN);
	m.rmb_rkey = get_be32(buf + CLC_AC_OFF_RKEY);
	m.rmbe_idx = buf[CLC_AC_OFF_RMBE_IDX];
	m.rmbe_alert_token = get_be32(buf + CLC_AC_OFF_TOKEN);
	m.rmbe_size = buf[CLC_AC_OFF_SIZE_MTU] >> CLC_AC_SIZE_SHIFT;
	m.qp_mtu = buf[CLC_AC_OFF_SIZE_MTU] & CLC_AC_MTU_MASK;
	m.rmb_dma_addr = get_be64(buf + CLC_AC_OFF_RMB_ADDR);
	m.psn = get_be24(buf + CLC_AC_OFF_PSN);
	if (hdr.version == CLC_V1) {
		memcpy(out, &m, sizeof(m));
		return 0;
	}
	memcpy(m.eid, buf + CLC_AC_OFF_EID, sizeof(m.eid));
	if (m.first_contact) {
		clc_fce_get(buf + CLC_AC_OFF_FCE, &m.fce);
		if (m.type == CLC_CONFIRM) {
			m.gid_count = buf[CLC_AC_OFF_GID_CNT];
			memcpy(m.gids, buf + CLC_AC_OFF_GID_LIST,
			       (size_t)m.gid_count * CLC_GID_LEN);
		}
	}
	memcpy(out, &m, sizeof(m));
	return 0;
}

static bool clc_ac_fields_ok(const struct clc_accept_confirm *m)
{
	bool gids = m->version != CLC_V1 && m->first_contact && m->type == CLC_CONFIRM;

	return (m->type == CLC_ACCEPT || m->type == CLC_CONFIRM) && m->version &&
	       m->version <= CLC_NIBBLE_MAX && m->qpn <= CLC_U24_MAX && m->psn <= CLC_U24_MAX &&
	       m->rmbe_size <= CLC_NIBBLE_MAX && m->qp_mtu <= CLC_NIBBLE_MAX &&
	       m->fce.os_type <= CLC_NIBBLE_MAX && m->fce.release <= CLC_NIBBLE_MAX &&
	       m->gid_count <= (gids ? CLC_MAX_GIDS : 0);
}

int clc_accept_confirm_encode(const struct clc_accept_confirm *m, uint8_t *buf, size_t cap)
{
	size_t length;

	if (!clc_ac_fields_ok(m))
		return -EINVAL;
	length = clc_accept_confirm_len(m);
	if (wire_out_claim(buf, cap, length))
		return -ENOSPC;
	/* the first-contact flag is the high bit of typev2 */
	clc_hdr_put(buf, m->type, length, m->version,
		    m->first_contact ? CLC_FLAG_MASK >> CLC_TYPEV2_SHIFT : 0, CLC_TYPE_R, m->smcd);
	memcpy(buf + CLC_AC_OFF_PEER_ID, m->peer_id, sizeof(m->peer_id));
	memcpy(buf + CLC_AC_OFF_GID, m->gid, sizeof(m->gid));
	memcpy(buf + CLC_AC_OFF_MAC, m->mac, sizeof(m->mac));
	put_be24(buf + CLC_AC_OFF_QPN, m->qpn);
	put_be32(buf + CLC_AC_OFF_RKEY, m->rmb_rkey);
	buf[CLC_AC_OFF_RMBE_IDX] = m->rmbe_idx;
	put_be32(buf + CLC_AC_OFF_TOKEN, m->rmbe_alert_token);
	buf[CLC_AC_OFF_SIZE_MTU] = (uint8_t)(m->rmbe_size << CLC_AC_SIZE_SHIFT | m->qp_mtu);
	put_be64(buf + CLC_AC_OFF_RMB_ADDR, m->rmb_dma_addr);
	put_be24(buf + CLC_AC_OFF_PSN, m->psn);
	if (m->version == CLC_V1)
		return (int)length;
	memcpy(buf + CLC_AC_OFF_EID, m->eid, sizeof(m->eid));
	if (m->first_contact) {
		clc_fce_put(buf + CLC_AC_OFF_FCE, &m->fce);
		if (m->type == CLC_CONFIRM) {
			buf[CLC_AC_OFF_GID_CNT] = m->gid_count;
			memcpy(buf + CLC_AC_OFF_GID_LIST, m->gids,
			       (size_t)m->gid_count * CLC_GID_LEN);
		}
	}
	return (int)length;
}

/* ---------------------------------------------------------------- DECLINE */

size_t clc_decline_len(const struct clc_decline *m)
{
	return m->version == CLC_V1 ? CLC_DECLINE_V1_LEN : CLC_DECLINE_V2_LEN;
}

/*
 * Like Linux, the DECLINE trailer is not checked and typev1 is not
 * validated: a DECLINE only ever leads to fallback, so accepting a sloppy
 * one keeps the TCP connection usable (see docs/wire.md).
 */
int clc_decline_decode(const uint8_t *buf, size_t len, struct clc_decline *out)
{
	struct clc_decline m;
	struct clc_hdr hdr;
	int rc;

	memset(&m, 0, sizeof(m));

	rc = clc_msg_begin(buf, len, CLC_DECLINE, &hdr);
	if (rc)
		return rc;
	m.version = hdr.version;
	if (hdr.length != clc_decline_len(&m))
		return WIRE_E_LENGTH;
	m.smcd = hdr.smcd;
	m.out_of_sync = buf[CLC_OFF_VERSION] & CLC_FLAG_MASK;
	m.typev1 = hdr.typev1;
	memcpy(m.peer_id, buf + CLC_D_OFF_PEER_ID, sizeof(m.peer_id));
	m.diagnosis = get_be32(buf + CLC_D_OFF_DIAG);
	m.os_type = buf[CLC_D_OFF_OS] >> CLC_D_OS_SHIFT;
	if (hdr.version != CLC_V1)
		for (int i = 0; i < CLC_DECLINE_DIAG_EXT; i++)
			m.diag_ext[i] = get_be32(buf + CLC_D_OFF_DIAG_EXT + 4 * i);
	memcpy(out, &m, sizeof(m));
	return 0;
}

int clc_decline_encode(const struct clc_decline *m, uint8_t *buf, size_t cap)
{
	size_t length = clc_decline_len(m);

	if (!m->version || m->version > CLC_NIBBLE_MAX || m->typev1 > CLC_TYPE_B ||
	    m->os_type > CLC_NIBBLE_MAX)
		return -EINVAL;
	if (wire_out_claim(buf, cap, length))
		return -ENOSPC;
	clc_hdr_put(buf, CLC_DECLINE, length, m->version,
		    m->out_of_sync ? CLC_FLAG_MASK >> CLC_TYPEV2_SHIFT : 0, m->typev1, m->smcd);
	memcpy(buf + CLC_D_OFF_PEER_ID, m->peer_id, sizeof(m->peer_id));
	put_be32(buf + CLC_D_OFF_DIAG, m->diagnosis);
	buf[CLC_D_OFF_OS] = (uint8_t)(m->os_type << CLC_D_OS_SHIFT);
	if (m->version != CLC_V1)
		for (int i = 0; i < CLC_DECLINE_DIAG_EXT; i++)
			put_be32(buf + CLC_D_OFF_DIAG_EXT + 4 * i, m->diag_ext[i]);
	return (int)length;
}

int clc_decline_build(uint8_t *buf, size_t cap, uint8_t version, const uint8_t *peer_id,
		      uint32_t diagnosis, bool out_of_sync)
{
	bool v2 = version >= CLC_V2;
	struct clc_decline d = {
		.version = v2 ? CLC_V2 : CLC_V1,
		.out_of_sync = out_of_sync,
		.typev1 = CLC_TYPE_R,
		.diagnosis = diagnosis,
		.os_type = v2 ? CLC_OS_LINUX : 0, /* Linux sends 0 in a v1 DECLINE */
	};

	if (peer_id)
		memcpy(d.peer_id, peer_id, CLC_PEER_ID_LEN);
	return clc_decline_encode(&d, buf, cap);
}
