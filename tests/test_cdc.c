// SPDX-License-Identifier: MIT
/* CDC message codec: a byte example as Linux builds it (net/smc/smc_cdc.h
 * smc_host_msg_to_cdc()), round trips, malformed inputs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "cdc.h"
#include "wire_err.h"

/* After 4096 bytes written into a fresh peer RMBE, nothing consumed: the
 * producer cursor at 4096, consumer cursor 0 (struct smc_cdc_msg,
 * net/smc/smc_cdc.h). */
static const uint8_t cdc_6a[CDC_MSG_LEN] = {
	0xFE, 0x2C, 0x00, 0x01, 0x00, 0x00, 0x12, 0x34, /* hdr, seq 1, token */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, /* prod (0, 4096) */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* cons (0, 0) */
	0x00, 0x00,					/* flags */
};

static void test_cdc_6a_example(void **state)
{
	struct cdc_msg m;
	uint8_t out[64];

	assert_int_equal(cdc_decode(cdc_6a, sizeof(cdc_6a), &m), 0);
	assert_int_equal(m.seqno, 1);
	assert_int_equal(m.token, 0x1234);
	assert_int_equal(m.prod.wrap, 0);
	assert_int_equal(m.prod.count, 4096);
	assert_int_equal(m.cons.wrap, 0);
	assert_int_equal(m.cons.count, 0);
	assert_int_equal(m.prod_flags, 0);
	assert_int_equal(m.conn_state_flags, 0);
	assert_int_equal(cdc_encode(&m, out, sizeof(out)), CDC_MSG_LEN);
	assert_memory_equal(out, cdc_6a, CDC_MSG_LEN);
}

/* Field by field: struct assignment may leave padding bytes undefined. */
static void assert_cdc_equal(const struct cdc_msg *a, const struct cdc_msg *b)
{
	assert_int_equal(a->seqno, b->seqno);
	assert_int_equal(a->token, b->token);
	assert_int_equal(a->prod.wrap, b->prod.wrap);
	assert_int_equal(a->prod.count, b->prod.count);
	assert_int_equal(a->cons.wrap, b->cons.wrap);
	assert_int_equal(a->cons.count, b->cons.count);
	assert_int_equal(a->prod_flags, b->prod_flags);
	assert_int_equal(a->conn_state_flags, b->conn_state_flags);
}

static void test_cdc_limits_roundtrip(void **state)
{
	struct cdc_msg m;
	struct cdc_msg back;
	uint8_t buf[CDC_MSG_LEN];

	memset(&m, 0, sizeof(m));
	m.seqno = 0xFFFF;
	m.token = 0xFFFFFFFF;
	m.prod.wrap = 0xFFFF;
	m.prod.count = 0xFFFFFFFF;
	m.cons.wrap = 0x8001;
	m.cons.count = 0x7FFFFFFF;
	m.prod_flags = CDC_PF_WRITE_BLOCKED | CDC_PF_URG_DATA_PENDING | CDC_PF_URG_DATA_PRESENT |
		       CDC_PF_CONS_CURS_UPD_REQ | CDC_PF_FAILOVER_VALIDATION;
	m.conn_state_flags =
		CDC_CS_PEER_DONE_WRITING | CDC_CS_PEER_CONN_CLOSED | CDC_CS_PEER_CONN_ABORT;

	assert_int_equal(cdc_encode(&m, buf, sizeof(buf)), CDC_MSG_LEN);
	assert_int_equal(buf[24], 0xF8);
	assert_int_equal(buf[25], 0xE0);
	assert_int_equal(cdc_decode(buf, sizeof(buf), &back), 0);
	assert_cdc_equal(&m, &back);
}

static void test_cdc_reserved_ignored(void **state)
{
	uint8_t buf[CDC_MSG_LEN];
	struct cdc_msg a, b;

	memcpy(buf, cdc_6a, sizeof(buf));
	buf[8] = 0xAA; /* cursor reserved bytes */
	buf[17] = 0x55;
	buf[43] = 0xFF; /* trailing reserved */
	assert_int_equal(cdc_decode(cdc_6a, sizeof(cdc_6a), &a), 0);
	assert_int_equal(cdc_decode(buf, sizeof(buf), &b), 0);
	assert_cdc_equal(&a, &b);
}

static void test_cdc_short_completion(void **state)
{
	struct cdc_msg m;

	/* Linux accepts byte_len >= 26 (end of conn_state_flags). */
	assert_int_equal(cdc_decode(cdc_6a, CDC_MIN_RX_LEN, &m), 0);
	assert_int_equal(m.prod.count, 4096);
	assert_int_equal(cdc_decode(cdc_6a, CDC_MIN_RX_LEN - 1, &m), WIRE_E_SHORT);
	assert_int_equal(cdc_decode(cdc_6a, 0, &m), WIRE_E_SHORT);
}

static void test_cdc_bad_type_len(void **state)
{
	uint8_t buf[CDC_MSG_LEN];
	struct cdc_msg m;

	memcpy(buf, cdc_6a, sizeof(buf));
	buf[0] = 0x01; /* an LLC type */
	assert_int_equal(cdc_decode(buf, sizeof(buf), &m), WIRE_E_TYPE);
	buf[0] = 0xFE;
	buf[1] = 43;
	assert_int_equal(cdc_decode(buf, sizeof(buf), &m), WIRE_E_LENGTH);
	buf[1] = 45;
	assert_int_equal(cdc_decode(buf, sizeof(buf), &m), WIRE_E_LENGTH);
}

static void test_cdc_encode_capacity(void **state)
{
	struct cdc_msg m = {.seqno = 7};
	uint8_t buf[CDC_MSG_LEN + 4];

	memset(buf, 0xEE, sizeof(buf));
	assert_int_equal(cdc_encode(&m, buf, CDC_MSG_LEN - 1), -ENOSPC);
	assert_int_equal(buf[0], 0xEE); /* nothing written */
	assert_int_equal(cdc_encode(&m, buf, CDC_MSG_LEN), CDC_MSG_LEN);
	assert_int_equal(buf[CDC_MSG_LEN], 0xEE); /* stayed inside */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cdc_6a_example),
		cmocka_unit_test(test_cdc_limits_roundtrip),
		cmocka_unit_test(test_cdc_reserved_ignored),
		cmocka_unit_test(test_cdc_short_completion),
		cmocka_unit_test(test_cdc_bad_type_len),
		cmocka_unit_test(test_cdc_encode_capacity),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
