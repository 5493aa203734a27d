// SPDX-License-Identifier: MIT
/*
 * Kernel-compat mode, the parts that need no BPF: the SMC option bytes, the
 * map keys the program and libusmc must agree on, the socket flags, the
 * USMC_KERNEL_COMPAT modes, the client's DECLINE, and a clean fallback when
 * the program cannot load (docs/kernel-compat.md).
 */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "clc.h"
#include "conn.h"
#include "kcompat.h"

/* Linux writes NOP, NOP, then the option (net/ipv4/tcp_output.c smc_options_write()). */
static const uint8_t linux_smc_option[8] = {0x01, 0x01, 0xFE, 0x06, 0xE2, 0xD4, 0xC3, 0xD9};

static void test_option_bytes(void **state)
{
	uint8_t opt[KC_OPT_LEN];

	kc_opt_fill(opt);
	assert_int_equal(KC_OPT_LEN, 6);
	assert_memory_equal(opt, linux_smc_option + 2, KC_OPT_LEN);
	/* the kernel's parser: kind 254, even length >= 6, magic first */
	assert_int_equal(opt[0], 254);
	assert_true(opt[1] >= 6 && opt[1] % 2 == 0);
}

/* The SYN-ACK (from us) and the ACK (from the client) of one connection
 * give one key; any other connection gives another. */
static void test_flow_keys(void **state)
{
	const uint16_t lport = htons(443), rport = htons(40000);
	const uint32_t isn1 = htonl(0xfffffffeu + 1);
	struct kc_flow_key a, b;

	memset(&a, 0xaa, sizeof(a));
	memset(&b, 0x55, sizeof(b));
	kc_flow_from_synack(&a, 7, lport, rport, isn1);
	kc_flow_from_ack(&b, 7, rport, lport, isn1);
	assert_int_equal(sizeof(a), 16); /* no padding: hashed as bytes */
	assert_memory_equal(&a, &b, sizeof(a));

	kc_flow_from_ack(&b, 7, htons(40001), lport, isn1);
	assert_memory_not_equal(&a, &b, sizeof(a));
	kc_flow_from_ack(&b, 7, rport, lport, htonl(1));
	assert_memory_not_equal(&a, &b, sizeof(a));
	kc_flow_from_ack(&b, 8, rport, lport, isn1); /* another netns */
	assert_memory_not_equal(&a, &b, sizeof(a));
}

/* The program looks listeners up by skops->local_port, in host order. */
static void test_listen_key(void **state)
{
	struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons(18600)};
	struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(18601)};
	struct sockaddr un = {.sa_family = AF_UNIX};
	struct kc_listen_key k, zero;

	memset(&zero, 0, sizeof(zero));
	memset(&k, 0xff, sizeof(k));
	assert_int_equal(kc_listen_key_make(42, (struct sockaddr *)&in4, &k), 0);
	assert_int_equal(k.netns_cookie, 42);
	assert_int_equal(k.port, 18600);
	assert_int_equal(k.pad, 0);
	assert_int_equal(kc_listen_key_make(42, (struct sockaddr *)&in6, &k), 0);
	assert_int_equal(k.port, 18601);
	in4.sin_port = 0;
	assert_int_equal(kc_listen_key_make(42, (struct sockaddr *)&in4, &k), -EINVAL);
	assert_int_equal(kc_listen_key_make(42, &un, &k), -EAFNOSUPPORT);
}

static void test_peer_flags(void **state)
{
	const uint32_t seen = KC_SOCK_USMC | KC_SOCK_SEEN;

	assert_int_equal(kc_peer_from_flags(false, 0), KC_PEER_UNKNOWN);
	/* marked, but the program never ran for it (other cgroup) */
	assert_int_equal(kc_peer_from_flags(true, KC_SOCK_USMC), KC_PEER_UNKNOWN);
	assert_int_equal(kc_peer_from_flags(true, seen), KC_PEER_NOSMC);
	assert_int_equal(kc_peer_from_flags(true, seen | KC_SOCK_PEER_SMC), KC_PEER_SMC);
	assert_int_equal(kc_peer_from_flags(true, seen | KC_SOCK_CONGESTED), KC_PEER_CONGESTED);
}

/* An accepted socket's kind from the program's counts: the one kind with
 * sockets established and not yet taken; none or two: ask the socket. */
static void test_estab_deduce(void **state)
{
	uint64_t est[KC_ESTAB_KINDS] = {0}, taken[KC_ESTAB_KINDS] = {0};

	assert_int_equal(kc_estab_deduce(est, taken), -1); /* not counted */
	est[KC_ESTAB_PLAIN] = 3;
	taken[KC_ESTAB_PLAIN] = 2;
	assert_int_equal(kc_estab_deduce(est, taken), KC_ESTAB_PLAIN);
	est[KC_ESTAB_SMC] = 5, taken[KC_ESTAB_SMC] = 5;
	est[KC_ESTAB_CONGESTED] = 7, taken[KC_ESTAB_CONGESTED] = 7;
	assert_int_equal(kc_estab_deduce(est, taken), KC_ESTAB_PLAIN);
	taken[KC_ESTAB_PLAIN] = 3; /* all taken: this socket is not counted */
	assert_int_equal(kc_estab_deduce(est, taken), -1);
	est[KC_ESTAB_CONGESTED] = 8;
	assert_int_equal(kc_estab_deduce(est, taken), KC_ESTAB_CONGESTED);
	est[KC_ESTAB_SMC] = 6; /* two kinds pending: which is this one? */
	assert_int_equal(kc_estab_deduce(est, taken), -1);
	/* a slot shared with another listener only adds to the counts */
	est[KC_ESTAB_PLAIN] = 100;
	assert_int_equal(kc_estab_deduce(est, taken), -1);
	/* the slot: same key, same slot; in range */
	assert_int_equal(kc_listen_slot(42, 8080), kc_listen_slot(42, 8080));
	for (uint32_t port = 0; port < 70000; port += 7)
		assert_true(kc_listen_slot(0x1234567890abcdefull, port) < KC_LSN_SLOTS);
}

static void test_mode_parse(void **state)
{
	enum kc_mode m;

	assert_int_equal(kcompat_mode_parse(NULL, &m), 0);
	assert_int_equal(m, KC_MODE_AUTO);
	assert_int_equal(kcompat_mode_parse("auto", &m), 0);
	assert_int_equal(m, KC_MODE_AUTO);
	assert_int_equal(kcompat_mode_parse("1", &m), 0);
	assert_int_equal(m, KC_MODE_ON);
	assert_int_equal(kcompat_mode_parse("0", &m), 0);
	assert_int_equal(m, KC_MODE_OFF);
	assert_int_equal(kcompat_mode_parse("yes", &m), -EINVAL);
	assert_int_equal(kcompat_mode_parse("", &m), -EINVAL);
}

/* Whatever this machine allows, the context says which mode it is in, and
 * "1" fails exactly where "auto" falls back. */
static void test_ctx_modes(void **state)
{
	struct usmc_ctx *ctx;
	int autom, rc;

	assert_int_equal(usmc_ctx_kernel_compat(NULL), -EINVAL);

	setenv("USMC_KERNEL_COMPAT", "0", 1);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_ctx_kernel_compat(ctx), 0);
	usmc_ctx_destroy(ctx);

	setenv("USMC_KERNEL_COMPAT", "sometimes", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);

	setenv("USMC_KERNEL_COMPAT", "auto", 1);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	autom = usmc_ctx_kernel_compat(ctx);
	assert_true(autom == 0 || autom == 1);
	usmc_ctx_destroy(ctx);

	setenv("USMC_KERNEL_COMPAT", "1", 1);
	rc = usmc_ctx_create(&ctx);
	if (autom) {
		assert_int_equal(rc, 0);
		assert_int_equal(usmc_ctx_kernel_compat(ctx), 1);
		usmc_ctx_destroy(ctx);
	} else {
		assert_true(rc < 0);
	}
	print_message("kernel-compat mode on this machine: %s\n", autom ? "on" : "off");
	unsetenv("USMC_KERNEL_COMPAT");
}

/* A client that will not propose declines only if the server expects CLC. */
static void test_client_decline(void **state)
{
	struct usmc_conn c = {0};
	struct clc_decline d;
	uint8_t buf[64];
	int sv[2];
	ssize_t n;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	c.fd = sv[0];
	c.kc_peer = KC_PEER_NOSMC;
	assert_int_equal(kcompat_client_decline(c.kc_peer, c.fd, USMC_REASON_NOSMCRDEV), 0);
	c.kc_peer = KC_PEER_UNKNOWN;
	assert_int_equal(kcompat_client_decline(c.kc_peer, c.fd, USMC_REASON_NOSMCRDEV), 0);
	assert_int_equal(recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT), -1); /* nothing sent */
	assert_int_equal(errno, EAGAIN);

	c.kc_peer = KC_PEER_SMC;
	assert_int_equal(kcompat_client_decline(c.kc_peer, c.fd, USMC_REASON_NOSMCRDEV), 0);
	n = recv(sv[1], buf, sizeof(buf), 0);
	assert_int_equal(n, 28); /* a v1 DECLINE */
	assert_int_equal(clc_decline_decode(buf, (size_t)n, &d), 0);
	assert_int_equal(d.version, CLC_V1);
	assert_int_equal(d.diagnosis, USMC_REASON_NOSMCRDEV);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_option_bytes),   cmocka_unit_test(test_flow_keys),
		cmocka_unit_test(test_listen_key),     cmocka_unit_test(test_peer_flags),
		cmocka_unit_test(test_mode_parse),     cmocka_unit_test(test_ctx_modes),
		cmocka_unit_test(test_client_decline), cmocka_unit_test(test_estab_deduce),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
