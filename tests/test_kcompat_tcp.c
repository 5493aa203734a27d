// SPDX-License-Identifier: MIT
/*
 * Kernel-compat mode over loopback, usmc on both ends and plain sockets
 * (docs/kernel-compat.md). Needs the BPF program to load (root, cgroup v2):
 * where it cannot, every test is reported skipped.
 */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "common/hold_workers.h"
#include "common/loopback.h"
#include "ctx.h"
#include "kcompat.h"
#include "linux_proposal.h"
#include "listen_core.h"
#include "mono_clock.h"

#define LONG_PROBE_MS 5000 /* a probe would be unmistakable */
#define MSG	      "hello over TCP"

struct fixture {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	struct sockaddr_storage addr;
	socklen_t alen;
};

static int setup(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	struct fixture *f = calloc(1, sizeof(*f));

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setenv("USMC_KERNEL_COMPAT", "auto", 1);
	if (!f || usmc_ctx_create(&f->ctx))
		return -1;
	*state = f;
	if (!usmc_ctx_kernel_compat(f->ctx))
		return 0; /* the tests skip */
	usmc_ctx_setopt(f->ctx, USMC_OPT_PROBE_MS, LONG_PROBE_MS);
	if (usmc_listen(f->ctx, (struct sockaddr *)&a, sizeof(a), 64, 0, &f->l))
		return -1;
	f->alen = sizeof(f->addr);
	return usmc_listener_addr(f->l, &f->addr, &f->alen);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (f->l)
		usmc_listener_close(f->l);
	usmc_ctx_destroy(f->ctx);
	free(f);
	return 0;
}

static struct fixture *need_kcompat(void **state)
{
	struct fixture *f = *state;

	if (!f->l) {
		print_message("kernel-compat mode unavailable here (not root, no BPF or "
			      "no cgroup v2): skipped\n");
		skip();
	}
	assert_true(f->l->kc.active);
	return f;
}

static int plain_connect(const struct fixture *f)
{
	return plain_connect_to(&f->addr, f->alen);
}

/* A plain client that waits for the server to speak is TCP at once: its
 * SYN had no option, so there is nothing to probe. */
static void test_silent_plain_client_not_probed(void **state)
{
	struct fixture *f = need_kcompat(state);
	struct usmc_conn_info info;
	struct usmc_conn *c;
	long t0 = mono_ms();
	int fd = plain_connect(f);

	assert_int_equal(usmc_accept(f->l, 0, &c), 0);
	assert_true(mono_ms() - t0 < LONG_PROBE_MS / 10);
	assert_int_equal(usmc_conn_info(c, &info), 0);
	assert_int_equal(info.mode, USMC_MODE_TCP);
	assert_int_equal(info.reason, USMC_REASON_PEERNOSMC);
	assert_int_equal(usmc_send(c, MSG, strlen(MSG), 0), (ssize_t)strlen(MSG));
	usmc_close(c);
	close(fd);
}

/* Plain sockets cannot signal SMC any more: CLC bytes from one are data. */
static void test_plain_client_clc_bytes_are_data(void **state)
{
	static const uint8_t proposal_hdr[8] = {0xE2, 0xD4, 0xC3, 0xD9, 0x01, 0x00, 0x5c, 0x20};
	struct fixture *f = need_kcompat(state);
	struct usmc_conn_info info;
	struct usmc_conn *c;
	uint8_t buf[8];
	int fd = plain_connect(f);

	assert_int_equal(send(fd, proposal_hdr, sizeof(proposal_hdr), 0), 8);
	assert_int_equal(usmc_accept(f->l, 0, &c), 0);
	assert_int_equal(usmc_conn_info(c, &info), 0);
	assert_int_equal(info.reason, USMC_REASON_PEERNOSMC);
	assert_int_equal(usmc_recv(c, buf, sizeof(buf), MSG_WAITALL), 8);
	assert_memory_equal(buf, proposal_hdr, 8);
	usmc_close(c);
	close(fd);
}

/* usmc to usmc: both signal SMC; the client cannot propose (no SMC-R client
 * yet) and declines, the listener takes the DECLINE; then data. */
static void test_usmc_pair_declines(void **state)
{
	struct fixture *f = need_kcompat(state);
	struct usmc_conn_info ci, si;
	struct usmc_conn *c, *s;
	struct kc_listen_val v0, v1;
	char buf[sizeof(MSG)] = {0};

	assert_int_equal(kcompat_listener_counters(f->ctx->kc, &f->l->kc, &v0), 0);
	assert_int_equal(usmc_connect(f->ctx, (struct sockaddr *)&f->addr, f->alen, 0, &c), 0);
	assert_int_equal(usmc_send(c, MSG, strlen(MSG), 0), (ssize_t)strlen(MSG));
	assert_int_equal(usmc_accept(f->l, 0, &s), 0);
	assert_int_equal(usmc_recv(s, buf, strlen(MSG), MSG_WAITALL), (ssize_t)strlen(MSG));
	assert_string_equal(buf, MSG); /* the DECLINE was not handed over */
	assert_int_equal(usmc_conn_info(c, &ci), 0);
	assert_int_equal(usmc_conn_info(s, &si), 0);
	assert_int_equal(ci.mode, USMC_MODE_TCP);
	assert_int_not_equal(ci.reason, USMC_REASON_PEERNOSMC);
	assert_int_equal(si.mode, USMC_MODE_TCP);
	assert_int_equal(si.reason, ci.reason);
	assert_int_equal(si.peer_declined, 1);
	assert_int_equal(kcompat_listener_counters(f->ctx->kc, &f->l->kc, &v1), 0);
	assert_int_equal(v1.echoed, v0.echoed + 1);
	usmc_close(s);
	usmc_close(c);
}

/* Congested: the SYN-ACK goes without the option, both ends know it. */
static void test_congested_listener(void **state)
{
	struct fixture *f = need_kcompat(state);
	struct usmc_listener_stats st;
	struct usmc_conn_info ci, si;
	struct usmc_conn *c, *s;
	struct kc_listen_val v0, v1;
	char buf[sizeof(MSG)] = {0};

	assert_int_equal(kcompat_listener_counters(f->ctx->kc, &f->l->kc, &v0), 0);
	kcompat_listener_set_congested(f->ctx->kc, &f->l->kc, true);
	assert_int_equal(usmc_connect(f->ctx, (struct sockaddr *)&f->addr, f->alen, 0, &c), 0);
	assert_int_equal(usmc_send(c, MSG, strlen(MSG), 0), (ssize_t)strlen(MSG));
	assert_int_equal(usmc_accept(f->l, 0, &s), 0);
	assert_int_equal(usmc_recv(s, buf, strlen(MSG), MSG_WAITALL), (ssize_t)strlen(MSG));
	assert_string_equal(buf, MSG);
	assert_int_equal(usmc_conn_info(c, &ci), 0);
	assert_int_equal(usmc_conn_info(s, &si), 0);
	assert_int_equal(ci.reason, USMC_REASON_PEERNOSMC);
	assert_int_equal(si.reason, USMC_REASON_HS_CONGESTED);
	assert_int_equal(kcompat_listener_counters(f->ctx->kc, &f->l->kc, &v1), 0);
	assert_int_equal(v1.suppressed, v0.suppressed + 1);
	assert_int_equal(v1.echoed, v0.echoed);
	usmc_listener_stats(f->l, &st);
	assert_true(st.congestion_fallbacks >= 1);
	kcompat_listener_set_congested(f->ctx->kc, &f->l->kc, false);
	usmc_close(s);
	usmc_close(c);
}

/* A client socket that signals SMC (marked for the program) and starts a
 * PROPOSAL it never finishes: its handshake holds a worker or a queue slot
 * for USMC_OPT_CLC_TIMEOUT_MS. */
static int stalled_smc_client(const struct fixture *f, const struct sockaddr *to, socklen_t len)
{
	int fd = socket(to->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	uint32_t ticket;

	assert_true(fd >= 0);
	ticket = kcompat_mark_client(f->ctx->kc, fd);
	assert_int_not_equal(ticket, 0); /* a slot of the mapped usmc_peers */
	assert_int_equal(connect(fd, to, len), 0);
	assert_int_equal(kcompat_client_peer(f->ctx->kc, fd, &ticket), KC_PEER_SMC);
	assert_int_equal(ticket, 0); /* consumed */
	/* without a slot, the socket's storage (a bpf() lookup) agrees */
	assert_int_equal(kcompat_client_peer(f->ctx->kc, fd, &ticket), KC_PEER_SMC);
	assert_int_equal(send(fd, linux_v2_proposal, sizeof(linux_v2_proposal), 0),
			 (ssize_t)sizeof(linux_v2_proposal));
	return fd;
}

static void wait_hs_depth(struct usmc_listener *l, unsigned int in_hs, unsigned int depth)
{
	struct usmc_listener_stats st;
	long t0 = mono_ms();

	do {
		usmc_listener_stats(l, &st);
		if (st.in_handshake == in_hs && st.hs_queue_depth == depth)
			return;
		usleep(1000);
	} while (mono_ms() - t0 < LONG_PROBE_MS);
	fail_msg("in_handshake %u depth %u, expected %u %u", st.in_handshake, st.hs_queue_depth,
		 in_hs, depth);
}

/* The flag the SYN-time decision reads is written after the queue moved
 * (and after its cached copy): wait for it, and for the map write behind
 * it, before a client's SYN relies on it. */
static void wait_syn_congested(struct usmc_listener *l, bool congested)
{
	long t0 = mono_ms();

	while (atomic_load(&l->kc.congested) != congested) {
		assert_true(mono_ms() - t0 < LONG_PROBE_MS);
		usleep(1000);
	}
	usleep(20000);
}

static void drain_accept_queue(struct usmc_listener *l)
{
	struct usmc_listener_stats st;
	struct usmc_conn *s;

	usmc_listener_stats(l, &st);
	for (unsigned int i = 0; i < st.queued; i++) {
		assert_int_equal(usmc_accept(l, 0, &s), 0);
		usmc_close(s);
	}
}

/* Auto-fallback: once the handshake queue is congested, the next SMC SYN
 * is answered without the option (SMC_LIMIT_HS); when it drains, with. */
static void test_real_congestion(void **state)
{
	struct fixture *f = need_kcompat(state);
	const struct sockaddr *to = (struct sockaddr *)&f->addr;
	struct usmc_listener *l;
	struct usmc_conn_info ci, si;
	struct usmc_conn *c, *s;
	struct sockaddr_storage la;
	socklen_t llen = sizeof(la);
	struct sockaddr_in any = {.sin_family = AF_INET};
	int busy1, busy2;

	any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	usmc_ctx_setopt(f->ctx, USMC_OPT_HS_THREADS, 1);
	usmc_ctx_setopt(f->ctx, USMC_OPT_HS_CONGESTION, 1);
	usmc_ctx_setopt(f->ctx, USMC_OPT_CLC_TIMEOUT_MS, 3000);
	assert_int_equal(usmc_listen(f->ctx, (struct sockaddr *)&any, sizeof(any), 8,
				     USMC_LISTEN_AUTO_FALLBACK, &l),
			 0);
	assert_int_equal(usmc_listener_addr(l, &la, &llen), 0);
	to = (struct sockaddr *)&la;

	hold_workers(true);			 /* their handshakes are slow */
	busy1 = stalled_smc_client(f, to, llen); /* the one worker */
	wait_hs_depth(l, 1, 0);
	wait_syn_congested(l, false);		 /* the worker took it: not congested */
	busy2 = stalled_smc_client(f, to, llen); /* queued: depth 1 = congested */
	wait_hs_depth(l, 2, 1);
	wait_syn_congested(l, true);

	assert_int_equal(usmc_connect(f->ctx, to, llen, 0, &c), 0);
	assert_int_equal(usmc_conn_info(c, &ci), 0);
	assert_int_equal(ci.reason, USMC_REASON_PEERNOSMC); /* SYN-ACK without option */
	assert_int_equal(usmc_accept(l, 0, &s), 0);
	assert_int_equal(usmc_conn_info(s, &si), 0);
	assert_int_equal(si.reason, USMC_REASON_HS_CONGESTED);
	usmc_close(s);
	usmc_close(c);

	/* drain: the held handshakes end (their clients are gone), the
	 * queue empties; whatever they left in the accept queue goes */
	close(busy1);
	close(busy2);
	hold_workers(false);
	wait_hs_depth(l, 0, 0);
	drain_accept_queue(l);
	/* still a storm (the queue was at its threshold within the last
	 * LISTEN_STORM_HOLD_MS): SMC SYNs still get TCP at SYN time */
	assert_int_equal(usmc_connect(f->ctx, to, llen, 0, &c), 0);
	assert_int_equal(usmc_conn_info(c, &ci), 0);
	assert_int_equal(ci.reason, USMC_REASON_PEERNOSMC);
	assert_int_equal(usmc_accept(l, 0, &s), 0);
	usmc_close(s);
	usmc_close(c);
	/* the storm ends by itself in the program: the option is back */
	usleep((LISTEN_STORM_HOLD_MS + 100) * 1000);
	assert_int_equal(usmc_connect(f->ctx, to, llen, 0, &c), 0);
	assert_int_equal(usmc_conn_info(c, &ci), 0);
	assert_int_not_equal(ci.reason, USMC_REASON_PEERNOSMC); /* option again */
	assert_int_equal(usmc_accept(l, 0, &s), 0);
	usmc_close(s);
	usmc_close(c);
	usmc_listener_close(l);
}

/* A connected client to @to: marked for the program (SMC SYN) or plain. */
static int raw_client(const struct fixture *f, const struct sockaddr_in *to, bool smc)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	uint32_t ticket = 0;

	assert_true(fd >= 0);
	if (smc)
		ticket = kcompat_mark_client(f->ctx->kc, fd);
	assert_int_equal(connect(fd, (const struct sockaddr *)to, sizeof(*to)), 0);
	kcompat_client_forget(f->ctx->kc, &ticket);
	return fd;
}

/* accept() on @lfd, then what kcompat_server_peer() says of the socket. */
static enum kc_peer raw_accept(const struct fixture *f, int lfd, struct kcompat_lsn *ls, int *fds,
			       int *n)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	assert_true(fd >= 0);
	fds[(*n)++] = fd;
	return kcompat_server_peer(f->ctx->kc, ls, fd);
}

/* A loopback listener registered with the program, on @a's port (0: any;
 * set to the one bound). SO_REUSEADDR, which its accepted sockets inherit,
 * lets the port be bound again while they close. */
static int raw_listen(const struct fixture *f, struct sockaddr_in *a, struct kcompat_lsn *ls)
{
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	socklen_t alen = sizeof(*a);

	assert_true(lfd >= 0);
	assert_int_equal(setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int)), 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)a, sizeof(*a)), 0);
	kcompat_listener_prepare(f->ctx->kc, lfd, ls);
	assert_int_equal(listen(lfd, 16), 0);
	kcompat_listener_started(f->ctx->kc, lfd, ls);
	assert_true(ls->active);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)a, &alen), 0);
	return lfd;
}

/* The listener and every socket in @fds closed. */
static void raw_unlisten(const struct fixture *f, int lfd, struct kcompat_lsn *ls, int *fds, int *n)
{
	kcompat_listener_forget(f->ctx->kc, ls);
	while (*n > 0)
		close(fds[--*n]);
	close(lfd);
}

/* The accept side reads an accepted socket's kind from the program's
 * counts, without a bpf() lookup, while one kind is pending; with two it
 * asks the socket, and the answers stay right either way. */
static void test_accepted_kind_from_counts(void **state)
{
	struct fixture *f = need_kcompat(state);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct kcompat_lsn ls;
	int lfd = raw_listen(f, &a, &ls), fds[16], n = 0;

	/* one at a time: each kind read from the counts */
	fds[n++] = raw_client(f, &a, false);
	assert_int_equal(raw_accept(f, lfd, &ls, fds, &n), KC_PEER_NOSMC);
	fds[n++] = raw_client(f, &a, true);
	assert_int_equal(raw_accept(f, lfd, &ls, fds, &n), KC_PEER_SMC);
	kcompat_listener_set_congested(f->ctx->kc, &ls, true);
	fds[n++] = raw_client(f, &a, true);
	assert_int_equal(raw_accept(f, lfd, &ls, fds, &n), KC_PEER_CONGESTED);
	kcompat_listener_set_congested(f->ctx->kc, &ls, false);
	assert_int_equal(atomic_load(&ls.lookups), 0);

	/* two kinds waiting in the accept queue: the first asks the socket,
	 * the second is the one left */
	fds[n++] = raw_client(f, &a, false);
	fds[n++] = raw_client(f, &a, true);
	assert_int_equal(raw_accept(f, lfd, &ls, fds, &n), KC_PEER_NOSMC);
	assert_int_equal(atomic_load(&ls.lookups), 1);
	assert_int_equal(raw_accept(f, lfd, &ls, fds, &n), KC_PEER_SMC);
	assert_int_equal(atomic_load(&ls.lookups), 1);

	raw_unlisten(f, lfd, &ls, fds, &n);

	/* a new listener on the same port starts from the slot's counts:
	 * what the old one left is not pending for it */
	lfd = raw_listen(f, &a, &ls);
	fds[n++] = raw_client(f, &a, true);
	assert_int_equal(raw_accept(f, lfd, &ls, fds, &n), KC_PEER_SMC);
	assert_int_equal(atomic_load(&ls.lookups), 0);
	raw_unlisten(f, lfd, &ls, fds, &n);
}

/* Clients holding their slots at once, their SYN-ACKs alternately with and
 * without the option: each reads its own answer from its slot (the
 * mapping's stride is the array's 8-byte element, kcompat_abi.h), and the
 * socket's storage agrees. */
static void test_client_slots(void **state)
{
	struct fixture *f = need_kcompat(state);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct kcompat_lsn ls;
	int lfd = raw_listen(f, &a, &ls), cfd[8], sfd[8];
	uint32_t ticket[8];
	for (int i = 0; i < 8; i++) {
		/* odd ones: the listener withholds the option */
		kcompat_listener_set_congested(f->ctx->kc, &ls, i & 1);
		cfd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(cfd[i] >= 0);
		ticket[i] = kcompat_mark_client(f->ctx->kc, cfd[i]);
		assert_int_not_equal(ticket[i], 0);
		assert_int_equal(connect(cfd[i], (struct sockaddr *)&a, sizeof(a)), 0);
		sfd[i] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		assert_true(sfd[i] >= 0);
	}
	for (int i = 0; i < 8; i++) {
		enum kc_peer want = i & 1 ? KC_PEER_NOSMC : KC_PEER_SMC;
		uint32_t none = 0;

		assert_int_equal(kcompat_client_peer(f->ctx->kc, cfd[i], &ticket[i]), want);
		assert_int_equal(ticket[i], 0);
		assert_int_equal(kcompat_client_peer(f->ctx->kc, cfd[i], &none), want);
		close(cfd[i]);
		close(sfd[i]);
	}
	kcompat_listener_forget(f->ctx->kc, &ls);
	close(lfd);
}

/* A dual-stack IPv6 listener: IPv4 (mapped) and IPv6 clients alike. */
static void test_dual_stack_listener(void **state)
{
	struct fixture *f = need_kcompat(state);
	struct sockaddr_in6 any = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
	struct sockaddr_in6 to6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	struct sockaddr_in to4 = {.sin_family = AF_INET};
	struct sockaddr_storage la;
	socklen_t llen = sizeof(la);
	struct usmc_listener *l;

	to4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(usmc_listen(f->ctx, (struct sockaddr *)&any, sizeof(any), 8, 0, &l), 0);
	assert_true(l->kc.active);
	assert_int_equal(usmc_listener_addr(l, &la, &llen), 0);
	to6.sin6_port = to4.sin_port = ((struct sockaddr_in6 *)&la)->sin6_port;
	for (int i = 0; i < 2; i++) {
		const struct sockaddr *to = i ? (struct sockaddr *)&to6 : (struct sockaddr *)&to4;
		socklen_t tolen = i ? sizeof(to6) : sizeof(to4);
		struct usmc_conn_info si;
		struct usmc_conn *c, *s;

		assert_int_equal(usmc_connect(f->ctx, to, tolen, 0, &c), 0);
		assert_int_equal(usmc_accept(l, 0, &s), 0);
		assert_int_equal(usmc_conn_info(s, &si), 0);
		/* the option went both ways: the client declined over CLC */
		assert_int_equal(si.peer_declined, 1);
		usmc_close(s);
		usmc_close(c);
	}
	usmc_listener_close(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_silent_plain_client_not_probed, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_plain_client_clc_bytes_are_data, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_usmc_pair_declines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_congested_listener, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dual_stack_listener, setup, teardown),
		cmocka_unit_test_setup_teardown(test_accepted_kind_from_counts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_slots, setup, teardown),
		cmocka_unit_test_setup_teardown(test_real_congestion, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
