// SPDX-License-Identifier: MIT
/*
 * LLC codec: v1 and v2 byte examples as Linux's net/smc/smc_llc.c sends
 * them (smc_llc_send_confirm_link(), smc_llc_send_test_link(), ...; on a v2
 * link group the u16 length of struct smc_llc_hdr is in host byte order),
 * v2 length handling, limits,
 * response builders and every malformed variant with its own error.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "llc.h"
#include "wire_err.h"
#include "wire_vectors.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static uint8_t vbuf[LLC_V2_BUF_LEN];
static struct llc_msg m, back;

static size_t vec(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(llc_vectors); i++)
		if (!strcmp(llc_vectors[i].name, name)) {
			int n = wire_hex(llc_vectors[i].hex, vbuf, sizeof(vbuf));

			assert_true(n > 0);
			return (size_t)n;
		}
	fail_msg("no vector %s", name);
	return 0;
}

static void expect_same_bytes(const struct llc_msg *msg, const uint8_t *b, size_t n)
{
	static uint8_t out[LLC_V2_BUF_LEN];

	assert_int_equal(llc_msg_len(msg), n);
	assert_int_equal(llc_encode(msg, out, sizeof(out)), (int)n);
	assert_memory_equal(out, b, n);
}

static void test_all_vectors_roundtrip(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(llc_vectors); i++) {
		size_t n = vec(llc_vectors[i].name);

		assert_int_equal(llc_decode(vbuf, n, &m), 0);
		expect_same_bytes(&m, vbuf, n);
		/* decode(encode(m)) == m */
		assert_int_equal(llc_decode(vbuf, n, &back), 0);
		assert_memory_equal(&m, &back, sizeof(m));
	}
}

static void test_confirm_link(void **state)
{
	size_t n = vec("confirm_link_v1");

	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.version, LLC_V1);
	assert_int_equal(m.type, LLC_CONFIRM_LINK);
	assert_int_equal(m.flags, LLC_FLAG_NO_RMBE_EYEC);
	assert_int_equal(m.confirm_link.mac[5], 2);
	assert_int_equal(m.confirm_link.gid[0], 0xFE);
	assert_int_equal(m.confirm_link.qpn, 0x11);
	assert_int_equal(m.confirm_link.link_num, 1);
	assert_int_equal(m.confirm_link.link_uid, 0x101);
	assert_int_equal(m.confirm_link.max_links, 2);
	assert_int_equal(m.confirm_link.max_conns, 0);
	/* the response is the echo with SMC_LLC_FLAG_RESP (0x80, net/smc/smc_llc.h) */
	llc_make_response(&m);
	n = vec("confirm_link_v1_resp");
	expect_same_bytes(&m, vbuf, n);

	n = vec("confirm_link_v2");
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.version, LLC_V2);
	assert_int_equal(m.confirm_link.max_links, 1);
	assert_int_equal(m.confirm_link.max_conns, 255);
}

static void test_add_link(void **state)
{
	size_t n = vec("add_link_v1");

	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.type, LLC_ADD_LINK);
	assert_int_equal(m.add_link.qpn, 0x22);
	assert_int_equal(m.add_link.link_num, 2);
	assert_int_equal(m.add_link.qp_mtu, 3);
	assert_int_equal(m.add_link.psn, 0xABCDEF);
	assert_false(m.add_link.has_ext);
	llc_add_link_reject(&m);
	n = vec("add_link_v1_rej");
	expect_same_bytes(&m, vbuf, n);
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.rej_reason, LLC_ADD_LNK_REJ_NO_ALT_PATH);

	/* v1 MTU byte: upper nibble reserved */
	n = vec("add_link_v1");
	vbuf[32] = 0xF5;
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.add_link.qp_mtu, 5);
}

static void test_add_link_v2(void **state)
{
	size_t n = vec("add_link_v2");

	assert_int_equal(n, 88);
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.version, LLC_V2);
	assert_true(m.add_link.has_ext);
	assert_true(m.add_link.v2_direct);
	assert_int_equal(m.add_link.client_target_gid[15], 2);
	assert_int_equal(m.add_link.num_rkeys, 1);
	assert_int_equal(m.add_link.rkeys[0].rkey, 0x1234);
	assert_int_equal(m.add_link.rkeys[0].rkey_new, 0x5678);
	assert_int_equal(m.add_link.rkeys[0].vaddr_new, 0x7F0000200000ull);
	/* the reject is 44 bytes, reason lost in the length (x86 Linux) */
	llc_add_link_reject(&m);
	n = vec("add_link_v2_rej");
	expect_same_bytes(&m, vbuf, n);

	/* an 8 KiB buffer with the wire length limiting the parse */
	n = vec("add_link_v2");
	memset(vbuf + n, 0xAA, 100);
	assert_int_equal(llc_decode(vbuf, n + 100, &m), 0);
	assert_int_equal(m.add_link.num_rkeys, 1);
}

static void test_add_link_v2_limits(void **state)
{
	static uint8_t buf[LLC_V2_BUF_LEN];
	int n;

	memset(&m, 0, sizeof(m));
	m.version = LLC_V2;
	m.type = LLC_ADD_LINK;
	m.add_link.qpn = 0xFFFFFF;
	m.add_link.psn = 0xFFFFFF;
	m.add_link.qp_mtu = 15;
	m.add_link.has_ext = true;
	m.add_link.num_rkeys = LLC_V2_MAX_RKEYS;
	for (int i = 0; i < LLC_V2_MAX_RKEYS; i++) {
		m.add_link.rkeys[i].rkey = (uint32_t)i;
		m.add_link.rkeys[i].rkey_new = UINT32_MAX - (uint32_t)i;
		m.add_link.rkeys[i].vaddr_new = UINT64_MAX - (uint64_t)i;
	}
	n = llc_encode(&m, buf, sizeof(buf));
	assert_int_equal(n, 72 + 16 * LLC_V2_MAX_RKEYS);
	assert_int_equal(buf[1], n & 0xFF); /* little-endian length */
	assert_int_equal(buf[2], n >> 8);
	assert_int_equal(buf[70], LLC_V2_MAX_RKEYS);
	assert_int_equal(buf[71], 0);
	assert_int_equal(llc_decode(buf, (size_t)n, &back), 0);
	assert_memory_equal(&m, &back, sizeof(m));

	/* rkey count above 255 (e.g. a big-endian writer's 00 01) */
	buf[70] = 0x00;
	buf[71] = 0x01;
	assert_int_equal(llc_decode(buf, (size_t)n, &back), WIRE_E_RKEY_COUNT);
	/* rkey list longer than the message */
	buf[70] = 2;
	buf[71] = 0;
	assert_int_equal(llc_decode(buf, 72 + 16, &back), WIRE_E_RKEY_LENGTH);
	/* ... or than the wire length, even with a longer completion */
	buf[1] = 72 + 16;
	buf[2] = 0;
	assert_int_equal(llc_decode(buf, (size_t)n, &back), WIRE_E_RKEY_LENGTH);
	/* an extension that is cut off */
	buf[1] = 60;
	assert_int_equal(llc_decode(buf, (size_t)n, &back), WIRE_E_LENGTH);

	m.add_link.num_rkeys = LLC_V2_MAX_RKEYS + 1;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.add_link.num_rkeys = 1;
	m.add_link.qpn = 0x1000000;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.add_link.qpn = 0;
	m.add_link.psn = 0x1000000;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.add_link.psn = 0;
	m.add_link.qp_mtu = 16;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.add_link.qp_mtu = 0;
	memset(buf, 0xEE, sizeof(buf));
	assert_int_equal(llc_encode(&m, buf, 87), -ENOSPC);
	assert_int_equal(buf[0], 0xEE);
	assert_int_equal(llc_encode(&m, buf, 88), 88);
	assert_int_equal(buf[88], 0xEE);
	m.version = LLC_V1; /* v1 has no extension */
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
}

static void test_add_link_cont(void **state)
{
	size_t n = vec("add_link_cont");

	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.add_link_cont.link_num, 2);
	assert_int_equal(m.add_link_cont.num_rkeys, 1);
	assert_int_equal(m.add_link_cont.rkeys[0].rkey_new, 0x5678);
	assert_int_equal(m.add_link_cont.rkeys[1].rkey, 0);
	/* more rkeys to come: two in this message */
	vbuf[5] = 5;
	vbuf[24 + 3] = 0x77;
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.add_link_cont.rkeys[1].rkey, 0x77);
	expect_same_bytes(&m, vbuf, n);
	/* v2 has no ADD_LINK_CONT (Linux drops 0x23) */
	vbuf[0] = 0x23;
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_TYPE);
}

static void test_delete_link(void **state)
{
	size_t n = vec("delete_link_v1");

	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.delete_link.link_num, 2);
	assert_int_equal(m.delete_link.reason, LLC_DEL_LOST_PATH);
	n = vec("delete_link_v2_all");
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.flags, LLC_FLAG_DEL_LINK_ALL | LLC_FLAG_DEL_LINK_ORDERLY);
	assert_int_equal(m.delete_link.reason, LLC_DEL_PROG_INIT_TERM);
}

static void test_req_add_link(void **state)
{
	size_t n = vec("req_add_link_v2");

	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.type, LLC_REQ_ADD_LINK);
	assert_int_equal(m.req_add_link.gid_count, 2);
	assert_int_equal(m.req_add_link.gids[1][14], 1);
	/* the "cannot" response: 25 2C 00 80 + zeros */
	memset(&m.req_add_link, 0, sizeof(m.req_add_link));
	llc_make_response(&m);
	n = vec("req_add_link_v2_resp");
	expect_same_bytes(&m, vbuf, n);

	n = vec("req_add_link_v2");
	vbuf[24] = 9;
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_GID_COUNT);
	vbuf[24] = 3;
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_GIDLIST_LENGTH);
	vbuf[24] = 8;
	memset(vbuf + n, 0, 128);
	vbuf[1] = 28 + 128;
	assert_int_equal(llc_decode(vbuf, n + 128, &m), 0);
	expect_same_bytes(&m, vbuf, 28 + 128);

	memset(&m, 0, sizeof(m));
	m.version = LLC_V1;
	m.type = LLC_REQ_ADD_LINK;
	m.req_add_link.gid_count = 2; /* does not fit 44 bytes */
	assert_int_equal(llc_encode(&m, vbuf, sizeof(vbuf)), -EINVAL);
}

static void test_confirm_rkey(void **state)
{
	size_t n = vec("confirm_rkey_v1");

	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.confirm_rkey.num_extra, 0);
	assert_int_equal(m.confirm_rkey.rkey, 0x1234);
	assert_int_equal(m.confirm_rkey.vaddr, 0x7F0000100000ull);
	m.version = LLC_V2;
	llc_confirm_rkey_response(&m, true);
	n = vec("confirm_rkey_v2_resp");
	expect_same_bytes(&m, vbuf, n);
	llc_confirm_rkey_response(&m, false);
	assert_int_equal(m.flags, LLC_FLAG_RESP | LLC_FLAG_RKEY_NEG | LLC_FLAG_RKEY_RETRY);

	n = vec("confirm_rkey_v1_two");
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.confirm_rkey.num_extra, 2);
	assert_int_equal(m.confirm_rkey.extra[0].link_id, 2);
	assert_int_equal(m.confirm_rkey.extra[1].link_id, 3);
	assert_int_equal(m.confirm_rkey.extra[1].rkey, 0x9ABC);
	vbuf[4] = 3;
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_RKEY_COUNT);

	n = vec("confirm_rkey_cont");
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.confirm_rkey_cont.num_rkeys, 1);
	assert_int_equal(m.confirm_rkey_cont.rt[0].link_id, 2);
	assert_int_equal(m.confirm_rkey_cont.rt[0].rkey, 0x5678);
	vbuf[0] = 0x28; /* no v2 CONFIRM_RKEY_CONT */
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_TYPE);
}

static void test_test_link(void **state)
{
	size_t n = vec("test_link_v1_resp");

	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.flags, LLC_FLAG_RESP);
	assert_int_equal(m.test_link.user_data[15], 0x0F);

	n = vec("test_link_v2");
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	llc_make_response(&m);
	vbuf[3] = 0x80;
	expect_same_bytes(&m, vbuf, n);
}

static void test_delete_rkey(void **state)
{
	static const bool unknown[2] = {false, true};
	size_t n = vec("delete_rkey_v1");

	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.delete_rkey.num_rkeys, 2);
	assert_int_equal(m.delete_rkey.rkeys[1], 0x5678);
	llc_delete_rkey_response(&m, unknown);
	n = vec("delete_rkey_v1_resp");
	expect_same_bytes(&m, vbuf, n);
	vbuf[4] = 9;
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_RKEY_COUNT);

	n = vec("delete_rkey_v2");
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	assert_int_equal(m.delete_rkey.num_rkeys, 1);
	assert_int_equal(m.delete_rkey.rkeys[0], 0x1234);
	llc_delete_rkey_response(&m, &unknown[1]);
	n = vec("delete_rkey_v2_resp");
	expect_same_bytes(&m, vbuf, n);
	assert_int_equal(llc_decode(vbuf, n, &back), 0);
	assert_int_equal(back.delete_rkey.err, 1); /* count, not mask */

	/* v2 request: more than 9 rkeys need a longer message */
	n = vec("delete_rkey_v2");
	vbuf[4] = 10;
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_RKEY_LENGTH);
	memset(vbuf + n, 0, 4);
	vbuf[1] = 48;
	assert_int_equal(llc_decode(vbuf, 48, &m), 0);
	expect_same_bytes(&m, vbuf, 48);
	/* v2 response with a big count is still 44 bytes */
	vbuf[4] = 200;
	vbuf[3] = 0xA0;
	vbuf[1] = 44;
	assert_int_equal(llc_decode(vbuf, 44, &m), 0);
	assert_int_equal(m.delete_rkey.num_rkeys, 200);
	assert_int_equal(llc_msg_len(&m), 44);
}

static void test_header_errors(void **state)
{
	size_t n = vec("test_link_v2");

	assert_int_equal(llc_decode(vbuf, LLC_MSG_LEN - 1, &m), WIRE_E_SHORT);
	assert_int_equal(llc_decode(vbuf, 0, &m), WIRE_E_SHORT);
	/* v2 length: either byte order is >= 44 and accepted */
	vbuf[1] = 0x00;
	vbuf[2] = 0x2C;
	assert_int_equal(llc_decode(vbuf, n, &m), 0);
	vbuf[1] = 43;
	vbuf[2] = 0;
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_LENGTH);

	n = vec("test_link_v1_resp");
	vbuf[1] = 45; /* v1 must say 44 */
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_LENGTH);
	n = vec("test_link_v1_resp");
	for (unsigned int v = 0; v < 16; v++) {
		vbuf[0] = (uint8_t)(v << 4 | LLC_TEST_LINK);
		assert_int_equal(llc_decode(vbuf, n, &m),
				 v == LLC_V1 || v == LLC_V2 ? 0 : WIRE_E_VERSION);
	}
	for (unsigned int t = 0; t < 16; t++) {
		vbuf[0] = (uint8_t)t;
		if (t >= LLC_CONFIRM_LINK && t <= LLC_DELETE_RKEY)
			continue;
		assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_TYPE);
	}
	vbuf[0] = 0xFE; /* a CDC is not an LLC */
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_VERSION);
}

static void test_encode_invalid(void **state)
{
	uint8_t buf[LLC_MSG_LEN];

	memset(&m, 0, sizeof(m));
	m.version = 1;
	m.type = LLC_TEST_LINK;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.version = LLC_V2;
	m.type = LLC_CONFIRM_RKEY_CONT;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.type = 0;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.type = LLC_TEST_LINK;
	m.rej_reason = 1; /* only v1 ADD_LINK has one */
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.rej_reason = 0;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf) - 1), -ENOSPC);
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), LLC_MSG_LEN);
	m.type = LLC_CONFIRM_RKEY;
	m.confirm_rkey.num_extra = 3;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.version = LLC_V1;
	m.type = LLC_DELETE_RKEY;
	m.delete_rkey.num_rkeys = 9;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.type = LLC_CONFIRM_LINK;
	m.confirm_link.qpn = 0x1000000;
	assert_int_equal(llc_encode(&m, buf, sizeof(buf)), -EINVAL);
}

static void test_out_cleared_on_error(void **state)
{
	size_t n = vec("confirm_rkey_v1_two");

	memset(&m, 0x5C, sizeof(m));
	vbuf[4] = 3;
	assert_int_equal(llc_decode(vbuf, n, &m), WIRE_E_RKEY_COUNT);
	assert_int_equal(m.type, 0);
	assert_int_equal(m.confirm_rkey.rkey, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_vectors_roundtrip),
		cmocka_unit_test(test_confirm_link),
		cmocka_unit_test(test_add_link),
		cmocka_unit_test(test_add_link_v2),
		cmocka_unit_test(test_add_link_v2_limits),
		cmocka_unit_test(test_add_link_cont),
		cmocka_unit_test(test_delete_link),
		cmocka_unit_test(test_req_add_link),
		cmocka_unit_test(test_confirm_rkey),
		cmocka_unit_test(test_test_link),
		cmocka_unit_test(test_delete_rkey),
		cmocka_unit_test(test_header_errors),
		cmocka_unit_test(test_encode_invalid),
		cmocka_unit_test(test_out_cleared_on_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
