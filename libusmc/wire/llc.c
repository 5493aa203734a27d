// SPDX-License-Identifier: MIT
/*
 * LLC codec. Layouts: Linux net/smc/smc_llc.c struct smc_llc_hdr and the
 * struct smc_llc_msg_* (v2: smc_llc_msg_add_link_v2_ext,
 * smc_llc_msg_req_add_link_v2, smc_llc_msg_delete_rkey_v2); what Linux
 * accepts: smc_llc_rx_handler(). Rules and deviations from Linux:
 * docs/wire.md.
 */
#include <errno.h>
#include <string.h>

#include "llc.h"
#include "wire_bytes.h"
#include "wire_err.h"

/* header */
#define LLC_OFF_TYPE	  0
#define LLC_OFF_LEN	  1 /* v1: u8; v2: u16 little-endian over bytes 1-2 */
#define LLC_OFF_REJ	  2
#define LLC_OFF_FLAGS	  3
#define LLC_HDR_LEN	  4
#define LLC_VERSION_SHIFT 4
#define LLC_TYPE_MASK	  0x0F
#define LLC_REJ_MASK	  0x0F

/* CONFIRM_LINK */
#define LLC_CL_OFF_MAC	     4
#define LLC_CL_OFF_GID	     10
#define LLC_CL_OFF_QPN	     26
#define LLC_CL_OFF_LINK	     29
#define LLC_CL_OFF_UID	     30
#define LLC_CL_OFF_MAX_LINKS 34
#define LLC_CL_OFF_MAX_CONNS 35

/* ADD_LINK and its v2 extension */
#define LLC_AL_OFF_MAC	       4
#define LLC_AL_OFF_GID	       12
#define LLC_AL_OFF_QPN	       28
#define LLC_AL_OFF_LINK	       31
#define LLC_AL_OFF_MTU	       32
#define LLC_AL_MTU_MASK	       0x0F
#define LLC_AL_OFF_PSN	       33
#define LLC_AL_OFF_DIRECT      44
#define LLC_AL_DIRECT_BIT      0x80
#define LLC_AL_OFF_TARGET_GID  46
#define LLC_AL_OFF_NUM_RKEYS   70 /* u16, host order (little-endian) */
#define LLC_AL_OFF_RKEYS       72
#define LLC_ADD_LINK_RKEY_SIZE 16

/* ADD_LINK_CONT */
#define LLC_ALC_OFF_LINK  4
#define LLC_ALC_OFF_NUM	  5
#define LLC_ALC_OFF_RKEYS 8

/* DELETE_LINK */
#define LLC_DL_OFF_LINK	  4
#define LLC_DL_OFF_REASON 5

/* REQ_ADD_LINK */
#define LLC_RAL_OFF_COUNT 24
#define LLC_RAL_OFF_GIDS  28

/* CONFIRM_RKEY and _CONT: rtoken = link id / num (1), rkey (4), vaddr (8) */
#define LLC_RTOKEN_SIZE	   13
#define LLC_CR_OFF_NUM	   4
#define LLC_CR_OFF_RKEY	   5
#define LLC_CR_OFF_VADDR   9
#define LLC_CR_OFF_EXTRA   17
#define LLC_CRC_OFF_NUM	   4
#define LLC_CRC_OFF_RTOKEN 5

/* TEST_LINK */
#define LLC_TL_OFF_DATA 4

/* DELETE_RKEY */
#define LLC_DR_OFF_NUM	 4
#define LLC_DR_OFF_ERR	 5
#define LLC_DR_OFF_RKEYS 8
#define LLC_DR_RKEY_SIZE 4
#define LLC_DR_MASK_TOP	 0x80 /* bit for rkey 0 */

#define LLC_U24_MAX	 0xFFFFFFu
#define LLC_NIBBLE_MAX	 0x0F

#define MIN(a, b)	 ((a) < (b) ? (a) : (b))

/* Types Linux has a receive handler for, per version. */
static bool llc_type_known(uint8_t version, uint8_t type)
{
	if (type < LLC_CONFIRM_LINK || type > LLC_DELETE_RKEY)
		return false;
	/* v2 has no continuation messages: rkeys travel in ADD_LINK itself */
	if (version == LLC_V2)
		return type != LLC_ADD_LINK_CONT && type != LLC_CONFIRM_RKEY_CONT;
	return true;
}

static void llc_rtoken_get(const uint8_t *p, struct llc_rtoken *t)
{
	t->link_id = p[0];
	t->rkey = get_be32(p + 1);
	t->vaddr = get_be64(p + 5);
}

static void llc_rtoken_put(uint8_t *p, const struct llc_rtoken *t)
{
	p[0] = t->link_id;
	put_be32(p + 1, t->rkey);
	put_be64(p + 5, t->vaddr);
}

static void llc_al_rkey_get(const uint8_t *p, struct llc_add_link_rkey *r)
{
	r->rkey = get_be32(p);
	r->rkey_new = get_be32(p + 4);
	r->vaddr_new = get_be64(p + 8);
}

static void llc_al_rkey_put(uint8_t *p, const struct llc_add_link_rkey *r)
{
	put_be32(p, r->rkey);
	put_be32(p + 4, r->rkey_new);
	put_be64(p + 8, r->vaddr_new);
}

/* ----------------------------------------------------------------- decode */

static void llc_confirm_link_get(const uint8_t *b, struct llc_confirm_link *c)
{
	memcpy(c->mac, b + LLC_CL_OFF_MAC, sizeof(c->mac));
	memcpy(c->gid, b + LLC_CL_OFF_GID, sizeof(c->gid));
	c->qpn = get_be24(b + LLC_CL_OFF_QPN);
	c->link_num = b[LLC_CL_OFF_LINK];
	c->link_uid = get_be32(b + LLC_CL_OFF_UID);
	c->max_links = b[LLC_CL_OFF_MAX_LINKS];
	c->max_conns = b[LLC_CL_OFF_MAX_CONNS];
}

static int llc_add_link_get(const uint8_t *b, size_t len, uint8_t version, struct llc_add_link *a)
{
	memcpy(a->mac, b + LLC_AL_OFF_MAC, sizeof(a->mac));
	memcpy(a->gid, b + LLC_AL_OFF_GID, sizeof(a->gid));
	a->qpn = get_be24(b + LLC_AL_OFF_QPN);
	a->link_num = b[LLC_AL_OFF_LINK];
	a->qp_mtu = b[LLC_AL_OFF_MTU] & LLC_AL_MTU_MASK;
	a->psn = get_be24(b + LLC_AL_OFF_PSN);
	/* a 44-byte v2 ADD_LINK is a reject (or a request without rkeys) */
	if (version != LLC_V2 || len == LLC_MSG_LEN)
		return 0;
	if (len < LLC_AL_OFF_RKEYS)
		return WIRE_E_LENGTH;
	a->has_ext = true;
	a->v2_direct = b[LLC_AL_OFF_DIRECT] & LLC_AL_DIRECT_BIT;
	memcpy(a->client_target_gid, b + LLC_AL_OFF_TARGET_GID, sizeof(a->client_target_gid));
	a->num_rkeys = get_le16(b + LLC_AL_OFF_NUM_RKEYS);
	if (a->num_rkeys > LLC_V2_MAX_RKEYS)
		return WIRE_E_RKEY_COUNT;
	if (LLC_AL_OFF_RKEYS + (size_t)a->num_rkeys * LLC_ADD_LINK_RKEY_SIZE > len)
		return WIRE_E_RKEY_LENGTH;
	for (unsigned int i = 0; i < a->num_rkeys; i++)
		llc_al_rkey_get(b + LLC_AL_OFF_RKEYS + i * LLC_ADD_LINK_RKEY_SIZE, &a->rkeys[i]);
	return 0;
}

static void llc_add_link_cont_get(const uint8_t *b, struct llc_add_link_cont *c)
{
	unsigned int n;

	c->link_num = b[LLC_ALC_OFF_LINK];
	c->num_rkeys = b[LLC_ALC_OFF_NUM];
	n = MIN(c->num_rkeys, LLC_ADD_LINK_CONT_RKEYS);
	for (unsigned int i = 0; i < n; i++)
		llc_al_rkey_get(b + LLC_ALC_OFF_RKEYS + i * LLC_ADD_LINK_RKEY_SIZE, &c->rkeys[i]);
}

static int llc_req_add_link_get(const uint8_t *b, size_t len, struct llc_req_add_link *r)
{
	r->gid_count = b[LLC_RAL_OFF_COUNT];
	if (r->gid_count > LLC_MAX_GIDS)
		return WIRE_E_GID_COUNT;
	if (LLC_RAL_OFF_GIDS + (size_t)r->gid_count * LLC_GID_LEN > len)
		return WIRE_E_GIDLIST_LENGTH;
	memcpy(r->gids, b + LLC_RAL_OFF_GIDS, (size_t)r->gid_count * LLC_GID_LEN);
	return 0;
}

static int llc_confirm_rkey_get(const uint8_t *b, struct llc_confirm_rkey *c)
{
	c->num_extra = b[LLC_CR_OFF_NUM];
	if (c->num_extra > LLC_CONFIRM_RKEY_EXTRA)
		return WIRE_E_RKEY_COUNT;
	c->rkey = get_be32(b + LLC_CR_OFF_RKEY);
	c->vaddr = get_be64(b + LLC_CR_OFF_VADDR);
	for (unsigned int i = 0; i < c->num_extra; i++)
		llc_rtoken_get(b + LLC_CR_OFF_EXTRA + i * LLC_RTOKEN_SIZE, &c->extra[i]);
	return 0;
}

static void llc_confirm_rkey_cont_get(const uint8_t *b, struct llc_confirm_rkey_cont *c)
{
	unsigned int n;

	c->num_rkeys = b[LLC_CRC_OFF_NUM];
	n = MIN(c->num_rkeys, LLC_RKEY_CONT_RKEYS);
	for (unsigned int i = 0; i < n; i++)
		llc_rtoken_get(b + LLC_CRC_OFF_RTOKEN + i * LLC_RTOKEN_SIZE, &c->rt[i]);
}

/* Number of rkeys listed in a DELETE_RKEY of this version and direction. */
static unsigned int llc_del_rkey_listed(uint8_t version, uint8_t flags, uint8_t num)
{
	/* a v2 response reports a count and carries no rkeys (Linux zeroes them) */
	if (version == LLC_V2 && (flags & LLC_FLAG_RESP))
		return 0;
	return num;
}

static int llc_delete_rkey_get(const uint8_t *b, size_t len, uint8_t version, uint8_t flags,
			       struct llc_delete_rkey *d)
{
	unsigned int n;

	d->num_rkeys = b[LLC_DR_OFF_NUM];
	d->err = b[LLC_DR_OFF_ERR];
	if (version == LLC_V1 && d->num_rkeys > LLC_V1_DEL_RKEY_MAX)
		return WIRE_E_RKEY_COUNT;
	n = llc_del_rkey_listed(version, flags, d->num_rkeys);
	if (LLC_DR_OFF_RKEYS + (size_t)n * LLC_DR_RKEY_SIZE > len)
		return WIRE_E_RKEY_LENGTH;
	for (unsigned int i = 0; i < n; i++)
		d->rkeys[i] = get_be32(b + LLC_DR_OFF_RKEYS + i * LLC_DR_RKEY_SIZE);
	return 0;
}

/* Header checks; *len becomes the length to parse (never above byte_len). */
static int llc_hdr_check(const uint8_t *buf, size_t *len, struct llc_msg *m)
{
	size_t wire_len;

	if (*len < LLC_MSG_LEN)
		return WIRE_E_SHORT;
	m->version = buf[LLC_OFF_TYPE] >> LLC_VERSION_SHIFT;
	m->type = buf[LLC_OFF_TYPE] & LLC_TYPE_MASK;
	m->flags = buf[LLC_OFF_FLAGS];
	if (m->version != LLC_V1 && m->version != LLC_V2)
		return WIRE_E_VERSION;
	if (!llc_type_known(m->version, m->type))
		return WIRE_E_TYPE;
	if (m->version == LLC_V1) {
		if (buf[LLC_OFF_LEN] != LLC_MSG_LEN)
			return WIRE_E_LENGTH;
		*len = LLC_MSG_LEN;
		if (m->type == LLC_ADD_LINK)
			m->rej_reason = buf[LLC_OFF_REJ] & LLC_REJ_MASK;
		return 0;
	}
	wire_len = get_le16(buf + LLC_OFF_LEN);
	if (wire_len < LLC_MSG_LEN)
		return WIRE_E_LENGTH;
	*len = MIN(wire_len, *len);
	return 0;
}

int llc_decode(const uint8_t *buf, size_t byte_len, struct llc_msg *out)
{
	struct llc_msg *m = out;
	size_t len = byte_len;
	int rc;

	/* decode in place (the struct is large); on error *out is cleared */
	memset(m, 0, sizeof(*m));
	rc = llc_hdr_check(buf, &len, m);
	if (rc)
		goto err;
	switch (m->type) {
	case LLC_CONFIRM_LINK:
		llc_confirm_link_get(buf, &m->confirm_link);
		break;
	case LLC_ADD_LINK:
		rc = llc_add_link_get(buf, len, m->version, &m->add_link);
		break;
	case LLC_ADD_LINK_CONT:
		llc_add_link_cont_get(buf, &m->add_link_cont);
		break;
	case LLC_DELETE_LINK:
		m->delete_link.link_num = buf[LLC_DL_OFF_LINK];
		m->delete_link.reason = get_be32(buf + LLC_DL_OFF_REASON);
		break;
	case LLC_REQ_ADD_LINK:
		rc = llc_req_add_link_get(buf, len, &m->req_add_link);
		break;
	case LLC_CONFIRM_RKEY:
		rc = llc_confirm_rkey_get(buf, &m->confirm_rkey);
		break;
	case LLC_CONFIRM_RKEY_CONT:
		llc_confirm_rkey_cont_get(buf, &m->confirm_rkey_cont);
		break;
	case LLC_TEST_LINK:
		memcpy(m->test_link.user_data, buf + LLC_TL_OFF_DATA, LLC_TEST_DATA_LEN);
		break;
	default: /* LLC_DELETE_RKEY, the only type left */
		rc = llc_delete_rkey_get(buf, len, m->version, m->flags, &m->delete_rkey);
		break;
	}
	if (!rc)
		return 0;
err:
	memset(m, 0, sizeof(*m));
	return rc;
}

/* ----------------------------------------------------------------- encode */

size_t llc_msg_len(const struct llc_msg *m)
{
	size_t n;

	if (m->version != LLC_V2)
		return LLC_MSG_LEN;
	switch (m->type) {
	case LLC_ADD_LINK:
		if (!m->add_link.has_ext)
			return LLC_MSG_LEN;
		return LLC_AL_OFF_RKEYS + (size_t)m->add_link.num_rkeys * LLC_ADD_LINK_RKEY_SIZE;
	case LLC_REQ_ADD_LINK:
		n = LLC_RAL_OFF_GIDS + (size_t)m->req_add_link.gid_count * LLC_GID_LEN;
		return n > LLC_MSG_LEN ? n : LLC_MSG_LEN;
	case LLC_DELETE_RKEY:
		n = LLC_DR_OFF_RKEYS +
		    (size_t)llc_del_rkey_listed(m->version, m->flags, m->delete_rkey.num_rkeys) *
			    LLC_DR_RKEY_SIZE;
		return n > LLC_MSG_LEN ? n : LLC_MSG_LEN;
	default:
		return LLC_MSG_LEN;
	}
}

/* Field widths and counts the wire can carry and decode() accepts. */
static bool llc_fields_ok(const struct llc_msg *m)
{
	if ((m->version != LLC_V1 && m->version != LLC_V2) || !llc_type_known(m->version, m->type))
		return false;
	if (m->rej_reason &&
	    (m->version != LLC_V1 || m->type != LLC_ADD_LINK || m->rej_reason > LLC_NIBBLE_MAX))
		return false;
	switch (m->type) {
	case LLC_CONFIRM_LINK:
		return m->confirm_link.qpn <= LLC_U24_MAX;
	case LLC_ADD_LINK:
		return m->add_link.qpn <= LLC_U24_MAX && m->add_link.psn <= LLC_U24_MAX &&
		       m->add_link.qp_mtu <= LLC_NIBBLE_MAX &&
		       m->add_link.num_rkeys <= LLC_V2_MAX_RKEYS &&
		       (m->version == LLC_V2 || !m->add_link.has_ext);
	case LLC_REQ_ADD_LINK:
		return m->req_add_link.gid_count <= LLC_MAX_GIDS &&
		       (m->version == LLC_V2 ||
			LLC_RAL_OFF_GIDS + m->req_add_link.gid_count * LLC_GID_LEN <= LLC_MSG_LEN);
	case LLC_CONFIRM_RKEY:
		return m->confirm_rkey.num_extra <= LLC_CONFIRM_RKEY_EXTRA;
	case LLC_DELETE_RKEY:
		return m->version == LLC_V2 || m->delete_rkey.num_rkeys <= LLC_V1_DEL_RKEY_MAX;
	default:
		return true;
	}
}

static void llc_confirm_link_put(uint8_t *b, const struct llc_confirm_link *c)
{
	memcpy(b + LLC_CL_OFF_MAC, c->mac, sizeof(c->mac));
	memcpy(b + LLC_CL_OFF_GID, c->gid, sizeof(c->gid));
	put_be24(b + LLC_CL_OFF_QPN, c->qpn);
	b[LLC_CL_OFF_LINK] = c->link_num;
	put_be32(b + LLC_CL_OFF_UID, c->link_uid);
	b[LLC_CL_OFF_MAX_LINKS] = c->max_links;
	b[LLC_CL_OFF_MAX_CONNS] = c->max_conns;
}

static void llc_add_link_put(uint8_t *b, const struct llc_add_link *a)
{
	memcpy(b + LLC_AL_OFF_MAC, a->mac, sizeof(a->mac));
	memcpy(b + LLC_AL_OFF_GID, a->gid, sizeof(a->gid));
	put_be24(b + LLC_AL_OFF_QPN, a->qpn);
	b[LLC_AL_OFF_LINK] = a->link_num;
	b[LLC_AL_OFF_MTU] = a->qp_mtu;
	put_be24(b + LLC_AL_OFF_PSN, a->psn);
	if (!a->has_ext)
		return;
	b[LLC_AL_OFF_DIRECT] = a->v2_direct ? LLC_AL_DIRECT_BIT : 0;
	memcpy(b + LLC_AL_OFF_TARGET_GID, a->client_target_gid, sizeof(a->client_target_gid));
	/* little-endian as x86 Linux writes (and reads) it */
	put_le16(b + LLC_AL_OFF_NUM_RKEYS, a->num_rkeys);
	for (unsigned int i = 0; i < a->num_rkeys; i++)
		llc_al_rkey_put(b + LLC_AL_OFF_RKEYS + i * LLC_ADD_LINK_RKEY_SIZE, &a->rkeys[i]);
}

static void llc_add_link_cont_put(uint8_t *b, const struct llc_add_link_cont *c)
{
	unsigned int n = MIN(c->num_rkeys, LLC_ADD_LINK_CONT_RKEYS);

	b[LLC_ALC_OFF_LINK] = c->link_num;
	b[LLC_ALC_OFF_NUM] = c->num_rkeys;
	for (unsigned int i = 0; i < n; i++)
		llc_al_rkey_put(b + LLC_ALC_OFF_RKEYS + i * LLC_ADD_LINK_RKEY_SIZE, &c->rkeys[i]);
}

static void llc_confirm_rkey_put(uint8_t *b, const struct llc_confirm_rkey *c)
{
	b[LLC_CR_OFF_NUM] = c->num_extra;
	put_be32(b + LLC_CR_OFF_RKEY, c->rkey);
	put_be64(b + LLC_CR_OFF_VADDR, c->vaddr);
	for (unsigned int i = 0; i < c->num_extra; i++)
		llc_rtoken_put(b + LLC_CR_OFF_EXTRA + i * LLC_RTOKEN_SIZE, &c->extra[i]);
}

static void llc_confirm_rkey_cont_put(uint8_t *b, const struct llc_confirm_rkey_cont *c)
{
	unsigned int n = MIN(c->num_rkeys, LLC_RKEY_CONT_RKEYS);

	b[LLC_CRC_OFF_NUM] = c->num_rkeys;
	for (unsigned int i = 0; i < n; i++)
		llc_rtoken_put(b + LLC_CRC_OFF_RTOKEN + i * LLC_RTOKEN_SIZE, &c->rt[i]);
}

static void llc_delete_rkey_put(uint8_t *b, const struct llc_msg *m)
{
	const struct llc_delete_rkey *d = &m->delete_rkey;
	unsigned int n = llc_del_rkey_listed(m->version, m->flags, d->num_rkeys);

	b[LLC_DR_OFF_NUM] = d->num_rkeys;
	b[LLC_DR_OFF_ERR] = d->err;
	for (unsigned int i = 0; i < n; i++)
		put_be32(b + LLC_DR_OFF_RKEYS + i * LLC_DR_RKEY_SIZE, d->rkeys[i]);
}

static void llc_hdr_put(uint8_t *b, const struct llc_msg *m, size_t len)
{
	b[LLC_OFF_TYPE] = (uint8_t)(m->version << LLC_VERSION_SHIFT | m->type);
	if (m->version == LLC_V2) {
		put_le16(b + LLC_OFF_LEN, (uint16_t)len);
	} else {
		b[LLC_OFF_LEN] = LLC_MSG_LEN;
		b[LLC_OFF_REJ] = m->rej_reason;
	}
	b[LLC_OFF_FLAGS] = m->flags;
}

int llc_encode(const struct llc_msg *m, uint8_t *buf, size_t cap)
{
	size_t len;

	if (!llc_fields_ok(m))
		return -EINVAL;
	len = llc_msg_len(m);
	if (wire_out_claim(buf, cap, len))
		return -ENOSPC;
	llc_hdr_put(buf, m, len);
	switch (m->type) {
	case LLC_CONFIRM_LINK:
		llc_confirm_link_put(buf, &m->confirm_link);
		break;
	case LLC_ADD_LINK:
		llc_add_link_put(buf, &m->add_link);
		break;
	case LLC_ADD_LINK_CONT:
		llc_add_link_cont_put(buf, &m->add_link_cont);
		break;
	case LLC_DELETE_LINK:
		buf[LLC_DL_OFF_LINK] = m->delete_link.link_num;
		put_be32(buf + LLC_DL_OFF_REASON, m->delete_link.reason);
		break;
	case LLC_REQ_ADD_LINK:
		buf[LLC_RAL_OFF_COUNT] = m->req_add_link.gid_count;
		memcpy(buf + LLC_RAL_OFF_GIDS, m->req_add_link.gids,
		       (size_t)m->req_add_link.gid_count * LLC_GID_LEN);
		break;
	case LLC_CONFIRM_RKEY:
		llc_confirm_rkey_put(buf, &m->confirm_rkey);
		break;
	case LLC_CONFIRM_RKEY_CONT:
		llc_confirm_rkey_cont_put(buf, &m->confirm_rkey_cont);
		break;
	case LLC_TEST_LINK:
		memcpy(buf + LLC_TL_OFF_DATA, m->test_link.user_data, LLC_TEST_DATA_LEN);
		break;
	default:
		llc_delete_rkey_put(buf, m);
		break;
	}
	return (int)len;
}

/* -------------------------------------------------------------- builders */

void llc_make_response(struct llc_msg *m)
{
	m->flags |= LLC_FLAG_RESP;
}

void llc_add_link_reject(struct llc_msg *m)
{
	m->flags = LLC_FLAG_RESP | LLC_FLAG_ADD_LNK_REJ;
	if (m->version == LLC_V1) {
		m->rej_reason = LLC_ADD_LNK_REJ_NO_ALT_PATH;
	} else {
		m->rej_reason = 0;
		m->add_link.has_ext = false;
		m->add_link.v2_direct = false;
		memset(m->add_link.client_target_gid, 0, sizeof(m->add_link.client_target_gid));
		m->add_link.num_rkeys = 0;
	}
}

void llc_confirm_rkey_response(struct llc_msg *m, bool ok)
{
	m->flags = LLC_FLAG_RESP;
	if (!ok)
		m->flags |= LLC_FLAG_RKEY_NEG | LLC_FLAG_RKEY_RETRY;
}

void llc_delete_rkey_response(struct llc_msg *m, const bool *unknown)
{
	struct llc_delete_rkey *d = &m->delete_rkey;
	uint8_t err = 0;

	for (unsigned int i = 0; i < d->num_rkeys; i++) {
		if (!unknown[i])
			continue;
		if (m->version == LLC_V1)
			err |= (uint8_t)(LLC_DR_MASK_TOP >> i);
		else
			err++;
	}
	m->flags = LLC_FLAG_RESP | (err ? LLC_FLAG_RKEY_NEG : 0);
	d->err = err;
	if (m->version == LLC_V2)
		memset(d->rkeys, 0, sizeof(d->rkeys));
}
