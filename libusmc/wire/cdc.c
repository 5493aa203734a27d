// SPDX-License-Identifier: MIT
#include <errno.h>
#include <string.h>

#include "cdc.h"
#include "wire_bytes.h"
#include "wire_err.h"

/* Field offsets of the 44-byte message. */
#define CDC_OFF_TYPE	0
#define CDC_OFF_LEN	1
#define CDC_OFF_SEQNO	2
#define CDC_OFF_TOKEN	4
#define CDC_OFF_PROD	8
#define CDC_OFF_CONS	16
#define CDC_OFF_PFLAGS	24
#define CDC_OFF_CSFLAGS 25

/* Cursor on the wire: 2 reserved, wrap BE16, count BE32. */
#define CDC_CURS_OFF_WRAP  2
#define CDC_CURS_OFF_COUNT 4

/* Field by field, so the padding of @c keeps the zeros of its memset and
 * decoded messages compare equal byte for byte. */
static void cdc_curs_get(const uint8_t *p, struct cdc_cursor *c)
{
	c->wrap = get_be16(p + CDC_CURS_OFF_WRAP);
	c->count = get_be32(p + CDC_CURS_OFF_COUNT);
}

static void cdc_curs_put(uint8_t *p, struct cdc_cursor c)
{
	put_be16(p + CDC_CURS_OFF_WRAP, c.wrap);
	put_be32(p + CDC_CURS_OFF_COUNT, c.count);
}

int cdc_decode(const uint8_t *buf, size_t byte_len, struct cdc_msg *out)
{
	if (byte_len < CDC_MIN_RX_LEN)
		return WIRE_E_SHORT;
	if (buf[CDC_OFF_TYPE] != CDC_MSG_TYPE)
		return WIRE_E_TYPE;
	if (buf[CDC_OFF_LEN] != CDC_MSG_LEN)
		return WIRE_E_LENGTH;

	memset(out, 0, sizeof(*out));
	out->seqno = get_be16(buf + CDC_OFF_SEQNO);
	out->token = get_be32(buf + CDC_OFF_TOKEN);
	cdc_curs_get(buf + CDC_OFF_PROD, &out->prod);
	cdc_curs_get(buf + CDC_OFF_CONS, &out->cons);
	out->prod_flags = buf[CDC_OFF_PFLAGS];
	out->conn_state_flags = buf[CDC_OFF_CSFLAGS];
	return 0;
}

int cdc_encode(const struct cdc_msg *m, uint8_t *buf, size_t cap)
{
	if (wire_out_claim(buf, cap, CDC_MSG_LEN))
		return -ENOSPC;
	buf[CDC_OFF_TYPE] = CDC_MSG_TYPE;
	buf[CDC_OFF_LEN] = CDC_MSG_LEN;
	put_be16(buf + CDC_OFF_SEQNO, m->seqno);
	put_be32(buf + CDC_OFF_TOKEN, m->token);
	cdc_curs_put(buf + CDC_OFF_PROD, m->prod);
	cdc_curs_put(buf + CDC_OFF_CONS, m->cons);
	buf[CDC_OFF_PFLAGS] = m->prod_flags;
	buf[CDC_OFF_CSFLAGS] = m->conn_state_flags;
	return CDC_MSG_LEN;
}
