// SPDX-License-Identifier: MIT
/*
 * Kernel-compat mode against the Linux kernel's own SMC (rxe guest with
 * --smc --setup two; root): the BPF program's SMC TCP option makes kernel
 * SMC peers run CLC with usmc, and only them. Every verdict about the
 * kernel side comes from its smc_diag dump (smc_kctl diag).
 *
 *   usage: test_kcompat_rxe <smc_kctl>
 *
 * Host A (USMC_TEST_HOST_A) runs the clients, host B the servers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "ctx.h"
#include "kcompat.h"
#include "listen_core.h"

#include "kernel_peer.h"

#define UEID	  "USMC-KCOMPAT-TEST"
#define BASE_PORT 18700
#define PING	  "ping from the client"
#define PONG	  "pong from the server"

static const char *kctl;
static const char *host_a, *host_b;
static int next_port = BASE_PORT;

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a = kpeer_addr(ip, port);

	assert_int_not_equal(a.sin_addr.s_addr, 0);
	return a;
}

static int local_port(int fd)
{
	int port = kpeer_local_port(fd);

	assert_true(port > 0);
	return port;
}

/* The smc_diag line of the kernel socket local -> peer; fails if none. */
static void kernel_diag(const char *local, int lport, const char *peer, int pport, struct kdiag *d)
{
	if (kpeer_diag(kctl, local, lport, peer, pport, d))
		fail_msg("no smc_diag entry local=%s:%d peer=%s:%d", local, lport, peer, pport);
	print_message("  smc_diag: mode=%s fallback=%#x peer_diagnosis=%#x\n", d->mode, d->fallback,
		      d->peer_diagnosis);
}

static int smc_connect(int port)
{
	int fd = kpeer_connect(host_a, host_b, port);

	assert_true(fd >= 0);
	return fd;
}

static void read_exactly(int fd, const char *want)
{
	char buf[64] = {0};
	size_t len = strlen(want), got = 0;

	while (got < len) {
		ssize_t n = recv(fd, buf + got, len - got, 0);

		assert_true(n > 0);
		got += (size_t)n;
	}
	assert_memory_equal(buf, want, len);
}

static void usmc_read_exactly(struct usmc_conn *c, const char *want)
{
	char buf[64] = {0};
	size_t len = strlen(want);

	assert_int_equal(usmc_recv(c, buf, len, MSG_WAITALL), (ssize_t)len);
	assert_memory_equal(buf, want, len);
}

/* A context whose kernel-compat mode is @mode ("1" must load, "0" off). */
static struct usmc_ctx *ctx_with(const char *mode)
{
	struct usmc_ctx *ctx;

	setenv("USMC_KERNEL_COMPAT", mode, 1);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	unsetenv("USMC_KERNEL_COMPAT");
	assert_int_equal(usmc_ctx_kernel_compat(ctx), strcmp(mode, "0") != 0);
	return ctx;
}

static struct usmc_listener *listen_b(struct usmc_ctx *ctx, int port)
{
	struct sockaddr_in a = addr_of(host_b, port);
	struct usmc_listener *l;

	assert_int_equal(usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 16, 0, &l), 0);
	return l;
}

/*
 * A kernel AF_SMC client against a usmc listener; data both ways over TCP.
 * Returns the kernel client's diag and the usmc server connection's info.
 */
static void kernel_client_run(struct usmc_listener *l, int port, struct kdiag *d,
			      struct usmc_conn_info *si)
{
	struct usmc_conn *sc;
	int fd = smc_connect(port);

	assert_int_equal(send(fd, PING, strlen(PING), 0), (ssize_t)strlen(PING));
	assert_int_equal(usmc_accept(l, 0, &sc), 0);
	/* the first bytes the application sees are the client's, no CLC */
	usmc_read_exactly(sc, PING);
	assert_int_equal(usmc_send(sc, PONG, strlen(PONG), 0), (ssize_t)strlen(PONG));
	read_exactly(fd, PONG);
	assert_int_equal(usmc_conn_info(sc, si), 0);
	kernel_diag(host_a, local_port(fd), host_b, port, d);
	usmc_close(sc);
	close(fd);
}

/* (a) The kernel client sees the SYN-ACK option and runs CLC: it falls
 * back because usmc DECLINEd (PEERDECL + our diagnosis), not because the
 * peer did not indicate SMC. SMC-R, once usmc has it, passes too. */
static void test_kernel_client_kcompat(void **state)
{
	struct usmc_ctx *ctx = ctx_with("1");
	int port = next_port++;
	struct usmc_listener *l = listen_b(ctx, port);
	struct kc_listen_val v;
	struct usmc_conn_info si;
	struct kdiag d;

	assert_true(l->kc.active);
	kernel_client_run(l, port, &d, &si);
	if (strcmp(d.mode, "SMC-R")) {
		assert_string_equal(d.mode, "fallback");
		assert_int_equal(d.fallback, USMC_REASON_PEERDECL);
		assert_int_equal(d.peer_diagnosis, si.reason); /* what usmc declined with */
		assert_int_equal(si.mode, USMC_MODE_TCP);
		assert_int_not_equal(si.reason, USMC_REASON_PEERNOSMC);
	}
	assert_int_equal(kcompat_listener_counters(ctx->kc, &l->kc, &v), 0);
	assert_int_equal(v.echoed, 1);
	assert_int_equal(v.suppressed, 0);
	print_message("  usmc server: %s %s, SYN-ACKs with option %llu\n", usmc_mode_name(si.mode),
		      usmc_reason_name(si.reason), (unsigned long long)v.echoed);
	usmc_listener_close(l);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* The same client against the userspace-only rule: no SYN-ACK option, so
 * the kernel falls back silently with PEERNOSMC. */
static void test_kernel_client_userspace_rule(void **state)
{
	struct usmc_ctx *ctx = ctx_with("0");
	int port = next_port++;
	struct usmc_listener *l = listen_b(ctx, port);
	struct usmc_conn_info si;
	struct kdiag d;

	kernel_client_run(l, port, &d, &si);
	assert_string_equal(d.mode, "fallback");
	assert_int_equal(d.fallback, USMC_REASON_PEERNOSMC);
	assert_int_equal(si.mode, USMC_MODE_TCP);
	usmc_listener_close(l);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* (b) A congested kcompat listener answers the SMC SYN without the option:
 * plain TCP for both, no CLC byte (the application's first bytes are the
 * client's data, which they would not be after a PROPOSAL). */
static void test_kernel_client_congested(void **state)
{
	struct usmc_ctx *ctx = ctx_with("1");
	int port = next_port++;
	struct usmc_listener *l = listen_b(ctx, port);
	struct usmc_listener_stats st;
	struct kc_listen_val v;
	struct usmc_conn_info si;
	struct kdiag d;

	kcompat_listener_set_congested(ctx->kc, &l->kc, true);
	kernel_client_run(l, port, &d, &si);
	assert_string_equal(d.mode, "fallback");
	assert_int_equal(d.fallback, USMC_REASON_PEERNOSMC);
	assert_int_equal(si.mode, USMC_MODE_TCP);
	assert_int_equal(si.reason, USMC_REASON_HS_CONGESTED);
	assert_int_equal(kcompat_listener_counters(ctx->kc, &l->kc, &v), 0);
	assert_int_equal(v.suppressed, 1);
	assert_int_equal(v.echoed, 0);
	usmc_listener_stats(l, &st);
	assert_int_equal(st.congestion_fallbacks, 1);

	/* no longer congested: the next SMC SYN gets the option again */
	kcompat_listener_set_congested(ctx->kc, &l->kc, false);
	kernel_client_run(l, port, &d, &si);
	assert_int_not_equal(d.fallback, USMC_REASON_PEERNOSMC);
	usmc_listener_close(l);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* Does a saved SYN (IPv4 + TCP header) carry the SMC option? */
static bool syn_has_smc_option(const uint8_t *syn, size_t len)
{
	uint8_t opt[KC_OPT_LEN];
	size_t ihl = (size_t)(syn[0] & 0x0f) * 4, doff, i;

	kc_opt_fill(opt);
	assert_true(len >= ihl + 20);
	doff = (size_t)(syn[ihl + 12] >> 4) * 4;
	for (i = ihl + 20; i < ihl + doff && i < len;) {
		if (syn[i] == 0 || syn[i] == 1) { /* EOL, NOP */
			i++;
			continue;
		}
		if (i + 1 >= len || syn[i + 1] < 2)
			return false;
		if (i + KC_OPT_LEN <= len && !memcmp(syn + i, opt, KC_OPT_LEN))
			return true;
		i += syn[i + 1];
	}
	return false;
}

/* (c) A kcompat usmc client against a plain TCP server: its SYN carries the
 * option, the SYN-ACK does not, so it is TCP PEERNOSMC and sends no CLC. */
static void test_usmc_client_plain_server(void **state)
{
	struct usmc_ctx *ctx = ctx_with("1");
	int port = next_port++, one = 1, lfd, fd;
	struct sockaddr_in b = addr_of(host_b, port);
	struct usmc_conn_info ci;
	struct usmc_conn *c;
	uint8_t syn[256];
	socklen_t len = sizeof(syn);

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	assert_int_equal(setsockopt(lfd, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof(one)), 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&b, sizeof(b)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(usmc_connect(ctx, (struct sockaddr *)&b, sizeof(b), 0, &c), 0);
	assert_int_equal(usmc_conn_info(c, &ci), 0);
	assert_int_equal(ci.mode, USMC_MODE_TCP);
	assert_int_equal(ci.reason, USMC_REASON_PEERNOSMC);
	assert_int_equal(usmc_send(c, PING, strlen(PING), 0), (ssize_t)strlen(PING));
	fd = accept(lfd, NULL, NULL);
	assert_true(fd >= 0);
	assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_SAVED_SYN, syn, &len), 0);
	assert_true(syn_has_smc_option(syn, len)); /* the SYN on the wire */
	read_exactly(fd, PING);			   /* and not a CLC byte before it */
	usmc_close(c);
	close(fd);
	close(lfd);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* A kernel AF_SMC listener on host B (the kernel runs the CLC server). */
static int kernel_listen_b(int port)
{
	int lfd = kpeer_listen(host_b, port, 4);

	assert_true(lfd >= 0);
	return lfd;
}

/*
 * A usmc client of @ctx against a kernel AF_SMC server on host B: connect,
 * ping one way, pong back, close. Returns the client's view (@ci) and the
 * kernel server's smc_diag verdict (@d).
 */
static void usmc_client_kernel_server(struct usmc_ctx *ctx, struct usmc_conn_info *ci,
				      struct kdiag *d)
{
	int port = next_port++, lfd = kernel_listen_b(port), fd;
	struct sockaddr_in b = addr_of(host_b, port);
	struct usmc_conn *c;
	int rc = usmc_connect(ctx, (struct sockaddr *)&b, sizeof(b), 0, &c);

	print_message("  usmc client -> kernel server: connect %s\n", usmc_strerror(rc));
	assert_int_equal(rc, 0);
	assert_int_equal(usmc_conn_info(c, ci), 0);
	print_message("  usmc client: %s %s%s\n", usmc_mode_name(ci->mode),
		      usmc_reason_name(ci->reason),
		      ci->peer_declined ? ", declined by the peer" : "");
	assert_int_equal(usmc_send(c, PING, strlen(PING), 0), (ssize_t)strlen(PING));
	fd = accept(lfd, NULL, NULL);
	assert_true(fd >= 0);
	read_exactly(fd, PING);
	assert_int_equal(send(fd, PONG, strlen(PONG), 0), (ssize_t)strlen(PONG));
	usmc_read_exactly(c, PONG);
	kernel_diag(host_b, port, inet_ntoa(((struct sockaddr_in *)&ci->local)->sin_addr),
		    ntohs(((struct sockaddr_in *)&ci->local)->sin_port), d);
	usmc_close(c);
	close(fd);
	close(lfd);
}

/* A kcompat usmc client against a kernel AF_SMC server whose UEID it does
 * not share: the kernel echoes the option, runs CLC and declines the
 * PROPOSAL (no common UEID: NOSMCDEV, net/smc/af_smc.c smc_listen_find_device()
 * after smc_clc_match_eid() in net/smc/smc_clc.c); both ends
 * continue over TCP and each says why. */
static void test_usmc_client_kernel_server_ueid_mismatch(void **state)
{
	struct usmc_ctx *ctx = ctx_with("1");
	struct usmc_conn_info ci;
	struct kdiag d;

	usmc_client_kernel_server(ctx, &ci, &d);
	assert_int_equal(ci.mode, USMC_MODE_TCP);
	assert_int_equal(ci.reason, USMC_REASON_NOSMCDEV);
	assert_int_equal(ci.peer_declined, 1);
	assert_string_equal(d.mode, "fallback");
	assert_int_equal(d.fallback, USMC_REASON_NOSMCDEV);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* With SMC-R off on the client, no SYN option: the kernel server falls back
 * silently (PEERNOSMC) and no CLC byte is exchanged. */
static void test_usmc_client_smc_off_kernel_server(void **state)
{
	struct usmc_ctx *ctx = ctx_with("1");
	struct usmc_conn_info ci;
	struct kdiag d;

	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_SMC, 0), 0);
	usmc_client_kernel_server(ctx, &ci, &d);
	assert_int_equal(ci.mode, USMC_MODE_TCP);
	assert_int_equal(ci.reason, USMC_REASON_DISABLED);
	assert_string_equal(d.mode, "fallback");
	assert_int_equal(d.fallback, USMC_REASON_PEERNOSMC);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* usmc client -> kernel AF_SMC server sharing its UEID: SMC-R between them. */
static void test_usmc_client_kernel_server_smcr(void **state)
{
	struct usmc_ctx *ctx = ctx_with("1");
	struct usmc_conn_info ci;
	struct kdiag d;

	assert_int_equal(usmc_ctx_set_ueid(ctx, UEID), 0);
	usmc_client_kernel_server(ctx, &ci, &d);
	assert_int_equal(ci.mode, USMC_MODE_SMCR);
	assert_string_equal(d.mode, "SMC-R");
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* kernel AF_SMC client -> usmc server sharing its UEID: SMC-R between them. */
static void test_kernel_client_usmc_server_smcr(void **state)
{
	struct usmc_ctx *ctx = ctx_with("1");
	int port = next_port++;
	struct usmc_listener *l;
	struct usmc_conn_info si;
	struct kdiag d;

	assert_int_equal(usmc_ctx_set_ueid(ctx, UEID), 0);
	l = listen_b(ctx, port);
	kernel_client_run(l, port, &d, &si);
	print_message("  kernel client: %s fallback %#x diag %#x; usmc server: %s %s\n", d.mode,
		      d.fallback, d.peer_diagnosis, usmc_mode_name(si.mode),
		      usmc_reason_name(si.reason));
	assert_string_equal(d.mode, "SMC-R");
	assert_int_equal(si.mode, USMC_MODE_SMCR);
	usmc_listener_close(l);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* (issue 37) The same, with a socket that was listening before libusmc
 * had it (the preload's listeners, pre-fork workers, socket activation):
 * usmc_listen_fd() asks the program for its SYN-ACK option, and the
 * kernel client runs SMC-R with it instead of falling back PEERNOSMC. */
static void test_kernel_client_adopted_listener_smcr(void **state)
{
	struct usmc_ctx *ctx = ctx_with("1");
	struct sockaddr_in a = addr_of(host_b, next_port++);
	int port = ntohs(a.sin_port), fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct usmc_listener *l;
	struct usmc_conn_info si;
	struct kdiag d;

	assert_int_equal(usmc_ctx_set_ueid(ctx, UEID), 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(usmc_listen_fd(ctx, fd, 0, 0, &l), 0);
	assert_true(l->kc.active);
	kernel_client_run(l, port, &d, &si);
	print_message("  kernel client: %s fallback %#x diag %#x; adopted usmc listener: %s %s\n",
		      d.mode, d.fallback, d.peer_diagnosis, usmc_mode_name(si.mode),
		      usmc_reason_name(si.reason));
	assert_string_equal(d.mode, "SMC-R");
	assert_int_equal(si.mode, USMC_MODE_SMCR);
	usmc_listener_close(l);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

static int setup(void **state)
{
	char cmd[512];

	/* a kernel client proposes SMC-Rv2 on rxe only with a UEID */
	snprintf(cmd, sizeof(cmd), "'%s' ueid flush && '%s' ueid add %s", kctl, kctl, UEID);
	return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kernel_client_kcompat),
		cmocka_unit_test(test_kernel_client_userspace_rule),
		cmocka_unit_test(test_kernel_client_congested),
		cmocka_unit_test(test_usmc_client_plain_server),
		cmocka_unit_test(test_usmc_client_kernel_server_ueid_mismatch),
		cmocka_unit_test(test_usmc_client_smc_off_kernel_server),
		cmocka_unit_test(test_usmc_client_kernel_server_smcr),
		cmocka_unit_test(test_kernel_client_usmc_server_smcr),
		cmocka_unit_test(test_kernel_client_adopted_listener_smcr),
	};

	kctl = argc > 1 ? argv[1] : NULL;
	host_a = getenv("USMC_TEST_HOST_A");
	host_b = getenv("USMC_TEST_HOST_B");
	if (!kctl || !host_a || !host_b || !strcmp(host_a, host_b)) {
		fprintf(stderr, "usage: test_kcompat_rxe <smc_kctl>, in the guest:\n"
				"  tests/rxe/vm-run.sh --smc --setup two -- <this> <smc_kctl>\n");
		return 1;
	}
	return cmocka_run_group_tests(tests, setup, NULL);
}
