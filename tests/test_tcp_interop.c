// SPDX-License-Identifier: MIT
/*
 * Plain TCP peers against usmc, and the rule that tells an SMC client from
 * a plain one (docs/tcp-path.md): clients that speak first, servers that
 * speak first, an SMC client sending a real Linux v2 PROPOSAL (declined
 * NOSMCRDEV here, then TCP on the same socket), malformed CLC.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "common/loopback.h"
#include "ctx.h"
#include "linux_proposal.h"
#include "mono_clock.h"

#define PROBE_MS 150

struct env {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	struct sockaddr_storage addr;
	socklen_t alen;
};

static int setup_flags(void **state, unsigned int flags)
{
	static struct env e;

	assert_int_equal(usmc_ctx_create(&e.ctx), 0);
	assert_int_equal(usmc_ctx_setopt(e.ctx, USMC_OPT_PROBE_MS, PROBE_MS), 0);
	e.l = lo_listen(e.ctx, 64, flags, &e.addr, &e.alen);
	*state = &e;
	return 0;
}

static int setup(void **state)
{
	return setup_flags(state, 0);
}

static int setup_tcp_only(void **state)
{
	return setup_flags(state, USMC_LISTEN_TCP_ONLY);
}

static int teardown(void **state)
{
	struct env *e = *state;
	struct usmc_ctx_stats st;

	assert_int_equal(usmc_listener_close(e->l), 0);
	usmc_ctx_stats(e->ctx, &st);
	assert_int_equal(st.open_conns, 0);
	assert_int_equal(usmc_ctx_destroy(e->ctx), 0);
	return 0;
}

static int plain_connect(const struct env *e)
{
	return plain_connect_to(&e->addr, e->alen);
}

static void assert_tcp(struct usmc_conn *c, uint32_t reason)
{
	struct usmc_conn_info info;

	assert_int_equal(usmc_conn_info(c, &info), 0);
	assert_int_equal(info.mode, USMC_MODE_TCP);
	assert_string_equal(usmc_reason_name(info.reason), usmc_reason_name(reason));
}

/* A plain client that speaks first (HTTP-like) is classified at once. */
static void test_plain_client_speaks_first(void **state)
{
	struct env *e = *state;
	struct usmc_conn *c;
	char buf[16];
	long t0 = mono_ms();
	int fd = plain_connect(e);

	assert_int_equal(send(fd, "hello", 5, 0), 5);
	assert_int_equal(usmc_accept(e->l, 0, &c), 0);
	assert_true(mono_ms() - t0 < PROBE_MS); /* no probe timeout spent */
	assert_tcp(c, USMC_REASON_NOSMCRDEV);
	assert_int_equal(usmc_ctx_fallback_count(e->ctx, USMC_REASON_NOSMCRDEV), 1);
	assert_int_equal(usmc_ctx_fallback_count(e->ctx, USMC_REASON_PEERNOSMC), 0);
	conn_read_exact(c, buf, 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(usmc_send(c, "world", 5, 0), 5);
	fd_read_exact(fd, buf, 5);
	assert_memory_equal(buf, "world", 5);
	usmc_close(c);
	assert_int_equal(recv(fd, buf, sizeof(buf), 0), 0);
	close(fd);
}

/* A plain client that waits for the server's banner (SMTP-like) gets it
 * after the probe timeout. */
static void test_plain_client_server_speaks_first(void **state)
{
	struct env *e = *state;
	struct usmc_conn *c;
	char buf[16];
	long t0 = mono_ms();
	int fd = plain_connect(e);

	assert_int_equal(usmc_accept(e->l, 0, &c), 0);
	assert_true(mono_ms() - t0 >= PROBE_MS - 5);
	assert_tcp(c, USMC_REASON_NOSMCRDEV);
	assert_int_equal(usmc_send(c, "220 hi\r\n", 8, 0), 8);
	fd_read_exact(fd, buf, 8);
	assert_memory_equal(buf, "220 hi\r\n", 8);
	assert_int_equal(send(fd, "QUIT", 4, 0), 4);
	conn_read_exact(c, buf, 4);
	assert_memory_equal(buf, "QUIT", 4);
	usmc_close(c);
	close(fd);
}

/* The listener without SMC sends nothing and probes nothing. */
static void test_tcp_only_listener(void **state)
{
	struct env *e = *state;
	struct usmc_conn *c;
	struct usmc_listener_stats st;
	char buf[8];
	long t0 = mono_ms();
	int fd = plain_connect(e);

	assert_int_equal(usmc_accept(e->l, 0, &c), 0);
	assert_true(mono_ms() - t0 < PROBE_MS);
	assert_tcp(c, USMC_REASON_DISABLED);
	assert_int_equal(usmc_send(c, "220\r\n", 5, 0), 5);
	fd_read_exact(fd, buf, 5);
	usmc_listener_stats(e->l, &st);
	assert_int_equal(st.accepted, 1);
	assert_int_equal(st.fallbacks, 1);
	usmc_close(c);
	close(fd);
}

/* An SMC client: PROPOSAL, DECLINE NOSMCRDEV, then TCP on the same socket
 * with no CLC byte leaking into either stream. */
static void test_smc_client_declined(void **state)
{
	struct env *e = *state;
	struct usmc_conn *c;
	uint8_t decl[44], buf[8];
	int fd = plain_connect(e);

	assert_int_equal(send(fd, linux_v2_proposal, sizeof(linux_v2_proposal), 0),
			 (ssize_t)sizeof(linux_v2_proposal));
	fd_read_exact(fd, decl, sizeof(decl));
	/* v2 DECLINE, 44 bytes, typev1 R, diagnosis NOSMCRDEV, OS Linux */
	const uint8_t hdr[8] = {0xE2, 0xD4, 0xC3, 0xD9, 0x04, 0x00, 0x2C, 0x20};
	const uint8_t diag[4] = {0x03, 0x03, 0x00, 0x02};
	const uint8_t trailer[4] = {0xE2, 0xD4, 0xC3, 0xD9};

	assert_memory_equal(decl, hdr, 8);
	assert_memory_equal(decl + 16, diag, 4);
	assert_int_equal(decl[20] >> 4, 2);
	assert_memory_equal(decl + 40, trailer, 4);

	assert_int_equal(usmc_accept(e->l, 0, &c), 0);
	assert_tcp(c, USMC_REASON_NOSMCRDEV);
	assert_int_equal(send(fd, "ping", 4, 0), 4);
	conn_read_exact(c, buf, 4);
	assert_memory_equal(buf, "ping", 4);
	assert_int_equal(usmc_send(c, "pong", 4, 0), 4);
	fd_read_exact(fd, buf, 4);
	assert_memory_equal(buf, "pong", 4);
	usmc_close(c);
	close(fd);
}

/* A PROPOSAL with a bad trailer ends the connection (no fallback, as
 * Linux): the client sees EOF and nothing reaches the accept queue. */
static void test_malformed_proposal_dropped(void **state)
{
	struct env *e = *state;
	struct usmc_listener_stats st;
	struct usmc_conn *c;
	uint8_t bad[sizeof(linux_v2_proposal)], buf[64];
	int fd = plain_connect(e);
	ssize_t n;

	memcpy(bad, linux_v2_proposal, sizeof(bad));
	bad[sizeof(bad) - 1] ^= 0xFF;
	assert_int_equal(send(fd, bad, sizeof(bad), 0), (ssize_t)sizeof(bad));
	do {
		n = recv(fd, buf, sizeof(buf), 0);
	} while (n > 0); /* nothing should come, then EOF */
	assert_true(n == 0 || errno == ECONNRESET);
	usmc_listener_stats(e->l, &st);
	assert_int_equal(st.hs_failed, 1);
	assert_int_equal(st.queued, 0);
	assert_int_equal(st.in_handshake, 0);
	/* the listener still works */
	close(fd);
	fd = plain_connect(e);
	assert_int_equal(send(fd, "x", 1, 0), 1);
	assert_int_equal(usmc_accept(e->l, 0, &c), 0);
	usmc_close(c);
	close(fd);
}

/*
 * A dropped handshake leaves the counts in an order a caller can rely on:
 * the context stops counting the connection open before the listener stops
 * counting it in handshake (whoever reads in_handshake 0 may destroy the
 * context), and the client sees EOF only after both. The context's registry
 * lock, held here, stops the drop in its middle, where a wrong order shows
 * as in_handshake 0 with the connection still open.
 */
static void test_dropped_handshake_counted_in_order(void **state)
{
	struct env *e = *state;
	struct usmc_listener_stats st;
	struct usmc_ctx_stats cs;
	uint8_t bad[sizeof(linux_v2_proposal)], buf[64];
	int fd = plain_connect(e), err;
	long t0;
	ssize_t n;

	memcpy(bad, linux_v2_proposal, sizeof(bad));
	bad[sizeof(bad) - 1] ^= 0xFF;
	t0 = mono_ms();
	do /* accepted (registered under the lock), probing */
		usmc_listener_stats(e->l, &st);
	while (!st.in_handshake && mono_ms() - t0 < 5000 && !usleep(1000));
	assert_int_equal(st.in_handshake, 1);
	pthread_mutex_lock(&e->ctx->reg_lock);
	assert_int_equal(send(fd, bad, sizeof(bad), 0), (ssize_t)sizeof(bad));
	t0 = mono_ms();
	do { /* the drop runs up to the lock, then waits */
		usmc_listener_stats(e->l, &st);
		usmc_ctx_stats(e->ctx, &cs);
		if (!st.in_handshake)
			break;
		usleep(10000);
	} while (mono_ms() - t0 < 3 * PROBE_MS);
	n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	err = errno;
	pthread_mutex_unlock(&e->ctx->reg_lock); /* before any assert can end the test */
	assert_int_equal(st.hs_failed, 1);
	if (!st.in_handshake)
		assert_int_equal(cs.open_conns, 0);
	assert_true(n < 0 && err == EAGAIN); /* no EOF before the counts agree */
	do {
		n = recv(fd, buf, sizeof(buf), 0);
	} while (n > 0);
	assert_true(n == 0 || errno == ECONNRESET);
	usmc_listener_stats(e->l, &st);
	usmc_ctx_stats(e->ctx, &cs);
	assert_int_equal(st.in_handshake, 0);
	assert_int_equal(cs.open_conns, 0);
	close(fd);
}

/* A client that sends part of a CLC header and stops is TCP after the probe
 * timeout, and its bytes are still there for the application. */
static void test_partial_header_is_tcp(void **state)
{
	struct env *e = *state;
	struct usmc_conn *c;
	uint8_t buf[5];
	int fd = plain_connect(e);

	assert_int_equal(send(fd, linux_v2_proposal, 5, 0), 5);
	assert_int_equal(usmc_accept(e->l, 0, &c), 0);
	assert_tcp(c, USMC_REASON_NOSMCRDEV);
	conn_read_exact(c, buf, 5);
	assert_memory_equal(buf, linux_v2_proposal, 5);
	usmc_close(c);
	close(fd);
}

/* ---- usmc clients against plain TCP servers ----------------------------- */

struct plain_server {
	int lfd;
	int speak_first;
	struct sockaddr_in addr;
	pthread_t t;
};

static void *plain_server_main(void *arg)
{
	struct plain_server *s = arg;
	int fd = accept(s->lfd, NULL, NULL);
	char buf[5];

	if (s->speak_first)
		send(fd, "hello", 5, 0);
	fd_read_exact(fd, buf, 5);
	send(fd, buf, 5, 0);
	close(fd);
	return NULL;
}

static void plain_server_start(struct plain_server *s, int speak_first)
{
	socklen_t len = sizeof(s->addr);

	s->speak_first = speak_first;
	s->lfd = socket(AF_INET, SOCK_STREAM, 0);
	s->addr = (struct sockaddr_in){.sin_family = AF_INET};
	s->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(s->lfd, (struct sockaddr *)&s->addr, sizeof(s->addr)), 0);
	assert_int_equal(listen(s->lfd, 4), 0);
	getsockname(s->lfd, (struct sockaddr *)&s->addr, &len);
	pthread_create(&s->t, NULL, plain_server_main, s);
}

static void usmc_client_vs_plain(int speak_first, long smc)
{
	struct plain_server s;
	struct usmc_ctx *ctx;
	struct usmc_conn *c;
	char buf[5];

	plain_server_start(&s, speak_first);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_SMC, smc), 0);
	assert_int_equal(usmc_connect(ctx, (struct sockaddr *)&s.addr, sizeof(s.addr), 0, &c), 0);
	assert_tcp(c, smc ? USMC_REASON_NOSMCRDEV : USMC_REASON_DISABLED);
	if (speak_first) {
		conn_read_exact(c, buf, 5);
		assert_memory_equal(buf, "hello", 5);
	}
	assert_int_equal(usmc_send(c, "abcde", 5, 0), 5);
	conn_read_exact(c, buf, 5);
	assert_memory_equal(buf, "abcde", 5);
	assert_int_equal(usmc_recv(c, buf, 5, 0), 0);
	pthread_join(s.t, NULL);
	close(s.lfd);
	usmc_close(c);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

static void test_usmc_client_plain_server(void **state)
{
	usmc_client_vs_plain(0, 1);
}

static void test_usmc_client_plain_server_speaks_first(void **state)
{
	usmc_client_vs_plain(1, 1);
}

static void test_usmc_client_smc_disabled(void **state)
{
	usmc_client_vs_plain(0, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_plain_client_speaks_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_plain_client_server_speaks_first, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_tcp_only_listener, setup_tcp_only, teardown),
		cmocka_unit_test_setup_teardown(test_smc_client_declined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_proposal_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dropped_handshake_counted_in_order, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_partial_header_is_tcp, setup, teardown),
		cmocka_unit_test(test_usmc_client_plain_server),
		cmocka_unit_test(test_usmc_client_plain_server_speaks_first),
		cmocka_unit_test(test_usmc_client_smc_disabled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
