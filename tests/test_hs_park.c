// SPDX-License-Identifier: MIT
/*
 * A parked server handshake runs again on a worker only when what it waits
 * for came, or at its bound. Over loopback, without a device: the test
 * parks a connection as a worker would (listener_park()) and counts the
 * worker steps (listen_test_hook_worker()); the step it then runs declines
 * NOSMCRDEV, and the connection reaches usmc_accept() as TCP.
 *
 * Parked for a handshake event (its peer's first contact in progress):
 * woken when a first contact of the context ends (lgr_unclaim()) or at its
 * deadline, never on a timer while nothing changed, nor on bytes its
 * client sends meanwhile.
 *
 * Parked for its client's next message (the CONFIRM): woken when that is
 * whole, not before, also when the accept thread watched the socket
 * before (its first bytes came after the accept): the epoll entry of that
 * watch is still there, and the park re-arms it instead of handing the
 * handshake to a worker that would wait for the CONFIRM itself.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "clc.h"
#include "clock.h"
#include "common/loopback.h"
#include "conn.h"
#include "ctx.h"
#include "lgr.h"
#include "listen_core.h"
#include "smcr_clc.h"

#define QUIET_MS       1000 /* nothing changes: no step in this long */
#define PROMPT_MS      1000 /* a first contact ended: the step within this */
#define HS_DEADLINE_MS 3000
#define WAIT_MS	       10000

static atomic_int steps;

void listen_test_hook_worker(void);
void listen_test_hook_worker(void)
{
	atomic_fetch_add(&steps, 1);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Milliseconds until the worker steps reach @n, or -1 after @ms. */
static long steps_within(int n, long ms)
{
	long t0 = clock_now_ms();

	while (atomic_load(&steps) < n) {
		if (clock_now_ms() - t0 >= ms)
			return -1;
		sleep_ms(1);
	}
	return clock_now_ms() - t0;
}

struct env {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	struct sockaddr_storage addr;
	socklen_t alen;
};

static void env_open(struct env *e)
{
	assert_int_equal(usmc_ctx_create(&e->ctx), 0);
	assert_int_equal(usmc_ctx_setopt(e->ctx, USMC_OPT_HS_THREADS, 1), 0);
	assert_int_equal(usmc_ctx_setopt(e->ctx, USMC_OPT_HS_TIMEOUT_MS, HS_DEADLINE_MS), 0);
	e->l = lo_listen(e->ctx, 16, 0, &e->addr, &e->alen);
	atomic_store(&steps, 0);
}

static void env_close(struct env *e)
{
	struct usmc_ctx_stats st;

	assert_int_equal(usmc_listener_close(e->l), 0);
	usmc_ctx_stats(e->ctx, &st);
	assert_int_equal(st.open_conns, 0);
	assert_int_equal(usmc_ctx_destroy(e->ctx), 0);
}

/*
 * A handshake parked as a worker hands it to the accept thread, before its
 * ACCEPT: @waits_event, for its peer's first contact in progress, else for
 * its client's next message; @peer gets the client's end of its socket.
 * With @watched, the accept thread has watched the socket before: an
 * epoll entry for it is in the listener's set already (one that never
 * fires here).
 */
static void park_waiter(struct env *e, int *peer, bool waits_event, bool watched)
{
	struct epoll_event ev = {.events = EPOLLONESHOT};
	struct usmc_opts o;
	struct usmc_conn *c;
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	if (watched)
		assert_int_equal(epoll_ctl(e->l->epfd, EPOLL_CTL_ADD, sv[0], &ev), 0);
	listener_copy_opts(e->l, &o);
	c = conn_alloc(e->ctx, sv[0], &o, true);
	assert_non_null(c);
	c->t_accept_ns = clock_now_ns();
	c->serve = calloc(1, sizeof(*c->serve));
	assert_non_null(c->serve);
	c->serve->prop.version = CLC_V2;
	c->serve->sctx = &e->ctx->rdma;
	c->serve->events_seen = smcr_ctx_hs_events(&e->ctx->rdma);
	c->serve->waits_event = waits_event; /* as smcr_clc_serve() left it */
	c->serve->wait_until_ms = (long)(c->t_accept_ns / CLOCK_NSEC_PER_MSEC) + HS_DEADLINE_MS;
	atomic_fetch_add(&e->l->in_handshake, 1); /* as the accept thread counts it */
	listener_park(e->l, c);
	*peer = sv[1];
}

static void park_claim_waiter(struct env *e, int *peer)
{
	park_waiter(e, peer, true, false);
}

/* Another handshake's first contact with some peer ends. */
static void first_contact_ends(struct env *e)
{
	uint8_t id[SMCR_SYSTEM_ID_LEN] = {1}, gid[SMCR_GID_LEN] = {2};
	struct lgr_config cfg = {.max_lgrs = 128, .max_per_peer = 8};
	struct lgr_key k = {.role = SMCR_ROLE_SERVER, .peer_id = id, .peer_gid = gid};
	struct lgr_pending p;

	k.peer_addr.s_addr = htonl(0x0a000002);
	assert_int_equal(lgr_reserve(&e->ctx->rdma, &k, &cfg, &p), 0);
	lgr_unclaim(&e->ctx->rdma, &p);
}

/* The waiter's one step declined it (no device): TCP, handed out. */
static void accept_declined(struct env *e, int peer)
{
	struct usmc_conn_info info;
	struct usmc_conn *c;
	struct pollfd p = {.fd = peer, .events = POLLIN};
	uint8_t m[8];

	assert_int_equal(poll(&p, 1, WAIT_MS), 1);
	assert_int_equal(recv(peer, m, sizeof(m), MSG_PEEK), (ssize_t)sizeof(m));
	assert_int_equal(m[4], 4); /* a CLC DECLINE */
	p = (struct pollfd){.fd = usmc_listener_fd(e->l), .events = POLLIN};
	assert_int_equal(poll(&p, 1, WAIT_MS), 1);
	assert_int_equal(usmc_accept(e->l, 0, &c), 0);
	assert_int_equal(usmc_conn_info(c, &info), 0);
	assert_int_equal(info.mode, USMC_MODE_TCP);
	assert_string_equal(usmc_reason_name(info.reason), "NOSMCRDEV");
	usmc_close(c);
	close(peer);
}

/* Woken by the first contact's end, at once; never before. */
static void test_woken_by_unclaim(void **state)
{
	struct env e;
	long dt;
	int peer;

	env_open(&e);
	park_claim_waiter(&e, &peer);
	sleep_ms(QUIET_MS);
	print_message("worker steps in %d ms while nothing changed: %d\n", QUIET_MS,
		      atomic_load(&steps));
	assert_int_equal(atomic_load(&steps), 0);
	first_contact_ends(&e);
	dt = steps_within(1, PROMPT_MS);
	print_message("a first contact ended: the waiter ran after %ld ms\n", dt);
	assert_true(dt >= 0);
	accept_declined(&e, peer);
	assert_int_equal(atomic_load(&steps), 1);
	env_close(&e);
}

/* Bytes from the client while it waits (it has no business sending any
 * before the ACCEPT) do not run it either. */
static void test_client_bytes_run_nothing(void **state)
{
	struct env e;
	int peer;

	env_open(&e);
	park_claim_waiter(&e, &peer);
	sleep_ms(50);
	assert_int_equal(send(peer, "xxxx", 4, MSG_NOSIGNAL), 4);
	sleep_ms(QUIET_MS);
	assert_int_equal(atomic_load(&steps), 0);
	first_contact_ends(&e);
	assert_true(steps_within(1, PROMPT_MS) >= 0);
	accept_declined(&e, peer);
	env_close(&e);
}

/* No first contact ends: it runs once, at its deadline. */
static void test_runs_at_deadline(void **state)
{
	struct env e;
	long t0 = clock_now_ms(), dt;
	int peer;

	env_open(&e);
	park_claim_waiter(&e, &peer);
	assert_true(steps_within(1, HS_DEADLINE_MS + WAIT_MS) >= 0);
	dt = clock_now_ms() - t0;
	print_message("no first contact ended: the waiter ran after %ld ms\n", dt);
	assert_true(dt >= HS_DEADLINE_MS - 100);
	accept_declined(&e, peer);
	assert_int_equal(atomic_load(&steps), 1);
	env_close(&e);
}

/* The client's next CLC message, a DECLINE here, whole on its socket. */
static void client_declines(int peer)
{
	uint8_t id[SMCR_SYSTEM_ID_LEN] = {3}, m[CLC_DECLINE_V2_LEN];
	int len = clc_decline_build(m, sizeof(m), CLC_V2, id, SMC_CLC_DECL_PEERDECL, false);

	assert_true(len > 0);
	assert_int_equal(send(peer, m, (size_t)len, MSG_NOSIGNAL), len);
}

/* Parked for its client's next message on a socket the accept thread
 * watched before: no step until the message is whole, then one at once.
 * (When the park could not watch the socket it handed the handshake to a
 * worker at once, to wait there: up to USMC_OPT_CLC_TIMEOUT_MS a worker
 * each, so that with every worker held new PROPOSALs went unanswered.) */
static void test_watched_before_waits_for_message(void **state)
{
	struct env e;
	long dt;
	int peer;

	env_open(&e);
	park_waiter(&e, &peer, false, true);
	sleep_ms(QUIET_MS);
	print_message("worker steps in %d ms without the client's message: %d\n", QUIET_MS,
		      atomic_load(&steps));
	assert_int_equal(atomic_load(&steps), 0);
	client_declines(peer);
	dt = steps_within(1, PROMPT_MS);
	print_message("its message came: the handshake ran after %ld ms\n", dt);
	assert_true(dt >= 0);
	accept_declined(&e, peer);
	assert_int_equal(atomic_load(&steps), 1);
	env_close(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_woken_by_unclaim),
		cmocka_unit_test(test_client_bytes_run_nothing),
		cmocka_unit_test(test_runs_at_deadline),
		cmocka_unit_test(test_watched_before_waits_for_message),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
