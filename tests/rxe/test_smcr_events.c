// SPDX-License-Identifier: MIT
/*
 * The event API over SMC-R (usmc.h "Events"): both ends are event loops on
 * usmc_ctx_poll() of their own context, and no connection has a readiness
 * descriptor. In the soft-RoCE guest (vm-run.sh --setup two):
 *
 * 1. echo: USMC_TEST_CONNS (16) connections, all SMC-R at both ends, each
 *    sends USMC_TEST_BYTES (1 MiB) and gets them back, every byte checked;
 *    a loop that makes no progress for 5 s fails (a lost event). No
 *    readiness socketpair: the engines' ready_ops stay 0 at both ends, and
 *    the process's descriptors grow by two per connection after the first
 *    (its TCP socket at each end; a socketpair would add two more at each).
 * 2. edges, one connection: READ within 200 ms of the peer's send, none
 *    once drained; WRITE gone while the send buffer is full and back
 *    within 200 ms of the peer's read; HUP (asked for) with READ within
 *    200 ms of the peer's SHUT_WR; ERR within 200 ms of the peer's abort.
 *    200 ms is below the progress thread's 250 ms tick: the completions
 *    must be run by the poll (smcr_eng_loop_run()), not by the tick's
 *    drain.
 *
 * USMC_TEST_ALLOW_TCP=1 runs the same on a host without a device (TCP mode,
 * over USMC_TEST_HOST_B=127.0.0.1): a check of the test itself, not of
 * SMC-R.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "../common/event_pair.h"
#include "../common/pattern.h"
#include "smcr_common.h"

#define CHUNK	  (16 * 1024)
#define MAX_EV	  64
#define STALL_MS  5000
#define EDGE_MS	  200 /* below the progress thread's 250 ms tick */
#define SEED_BASE 0xe7e75
#define FD_SLACK  4 /* a handshake's descriptors that may not be closed yet */

static bool allow_tcp;
static int nconns;
static uint64_t total;

static void expect_mode(const struct usmc_conn *c, const char *who)
{
	if (!allow_tcp)
		expect_smcr(c, who);
}

static uint64_t ready_ops(struct usmc_ctx *ctx)
{
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	return st.engine.ready_ops;
}

/* ---- phase 1: the echo server, an event loop in a thread -------------- */

struct echo {
	struct usmc_conn *c;
	uint8_t buf[CHUNK];
	size_t len, off;
	bool eof;
};

struct server {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	atomic_bool stop;
	atomic_int accepted;
	int finished;
};

static bool echo_step(struct echo *e)
{
	for (;;) {
		ssize_t n;

		if (e->off < e->len) {
			n = usmc_send(e->c, e->buf + e->off, e->len - e->off, 0);
			if (n == -EAGAIN) {
				CHECK(!usmc_conn_watch(e->c, USMC_EV_WRITE, e), "watch WRITE");
				return false;
			}
			CHECK(n > 0, "server send: %s", usmc_strerror((int)n));
			e->off += (size_t)n;
			continue;
		}
		if (e->eof) {
			CHECK(!usmc_shutdown(e->c, SHUT_WR), "server shutdown");
			CHECK(!usmc_close(e->c), "server close");
			free(e);
			return true;
		}
		n = usmc_recv(e->c, e->buf, sizeof(e->buf), 0);
		if (n == -EAGAIN) {
			CHECK(!usmc_conn_watch(e->c, USMC_EV_READ, e), "watch READ");
			return false;
		}
		CHECK(n >= 0, "server recv: %s", usmc_strerror((int)n));
		e->eof = n == 0;
		e->len = (size_t)n;
		e->off = 0;
	}
}

static void *server_main(void *arg)
{
	struct server *sv = arg;
	int open = 0;

	while (!atomic_load(&sv->stop) || open) {
		struct usmc_event ev[MAX_EV];
		int n = usmc_ctx_poll(sv->ctx, ev, MAX_EV, 100);

		CHECK(n >= 0, "server poll: %s", usmc_strerror(n));
		for (int i = 0; i < n; i++) {
			struct usmc_conn *c;
			int rc;

			if (ev[i].listener) {
				while (!(rc = usmc_accept(sv->l, USMC_NONBLOCK, &c))) {
					struct echo *e = calloc(1, sizeof(*e));

					CHECK(e, "calloc");
					expect_mode(c, "server");
					e->c = c;
					CHECK(!usmc_conn_watch(c, USMC_EV_READ, e), "watch");
					open++;
					atomic_fetch_add(&sv->accepted, 1);
				}
				CHECK(rc == -EAGAIN, "usmc_accept: %s", usmc_strerror(rc));
				continue;
			}
			if (echo_step(ev[i].user)) {
				open--;
				sv->finished++;
			}
		}
	}
	return NULL;
}

/* ---- phase 1: the clients --------------------------------------------- */

/* Until the server accepted @n connections (at most STALL_MS). */
static void await_accepted(struct server *sv, int n)
{
	long until = ev_now_ms() + STALL_MS;

	while (atomic_load(&sv->accepted) < n) {
		CHECK(ev_now_ms() < until, "the server accepted %d of %d in %d ms",
		      atomic_load(&sv->accepted), n, STALL_MS);
		usleep(1000);
	}
}

struct client {
	struct usmc_conn *c;
	uint64_t seed, sent, rcvd;
	bool shut, done;
};

static uint32_t client_wants(const struct client *k)
{
	return USMC_EV_READ | (k->sent < total ? USMC_EV_WRITE : 0);
}

static bool client_step(struct client *k, uint32_t events)
{
	static uint8_t buf[CHUNK];
	uint32_t before = client_wants(k);

	if (events & (USMC_EV_WRITE | USMC_EV_ERR)) {
		while (k->sent < total) {
			size_t len = total - k->sent < CHUNK ? (size_t)(total - k->sent) : CHUNK;
			ssize_t n;

			pattern_fill(k->seed, k->sent, buf, len);
			n = usmc_send(k->c, buf, len, 0);
			if (n == -EAGAIN)
				break;
			CHECK(n > 0, "client send: %s", usmc_strerror((int)n));
			k->sent += (uint64_t)n;
		}
		if (k->sent == total && !k->shut) {
			CHECK(!usmc_shutdown(k->c, SHUT_WR), "client shutdown");
			k->shut = true;
		}
	}
	for (;;) {
		ssize_t n = usmc_recv(k->c, buf, sizeof(buf), 0);
		long long bad;

		if (n == -EAGAIN)
			break;
		CHECK(n >= 0, "client recv: %s", usmc_strerror((int)n));
		if (n == 0) {
			CHECK(k->rcvd == total && k->shut, "EOF after %llu of %llu bytes",
			      (unsigned long long)k->rcvd, (unsigned long long)total);
			CHECK(!usmc_close(k->c), "client close");
			k->done = true;
			return true;
		}
		bad = pattern_check(k->seed, k->rcvd, buf, (size_t)n);
		CHECK(bad < 0, "seed %llu: byte %lld differs", (unsigned long long)k->seed, bad);
		k->rcvd += (uint64_t)n;
	}
	if (client_wants(k) != before)
		CHECK(!usmc_conn_watch(k->c, client_wants(k), k), "client watch");
	return false;
}

static void phase_echo(struct usmc_ctx *cc, struct usmc_ctx *cs)
{
	struct server sv = {.ctx = cs};
	struct sockaddr_in sa;
	struct client *k = calloc((size_t)nconns, sizeof(*k));
	long last = ev_now_ms();
	uint64_t progress = 0;
	int done = 0, fds1 = 0;
	pthread_t th;

	CHECK(k, "calloc");
	sv.l = listen_b_flags(cs, 256, USMC_LISTEN_NONBLOCK, &sa);
	CHECK(!usmc_listener_watch(sv.l, USMC_EV_ACCEPT, NULL), "listener watch");
	CHECK(!pthread_create(&th, NULL, server_main, &sv), "pthread_create");
	for (int i = 0; i < nconns; i++) {
		k[i].seed = SEED_BASE + (uint64_t)i;
		k[i].c = connect_nonblock_smcr_or_tcp(cc, &sa, allow_tcp);
		CHECK(!usmc_conn_watch(k[i].c, client_wants(&k[i]), &k[i]), "client watch");
		if (i == 0) {
			/* the link groups' descriptors are made at both ends */
			await_accepted(&sv, 1);
			fds1 = count_fds();
		}
	}
	/* each connection after the first: its TCP socket at each end (both
	 * in this process); a readiness pair would be two more at each */
	await_accepted(&sv, nconns);
	CHECK(count_fds() - fds1 <= 2 * (nconns - 1) + FD_SLACK,
	      "%d descriptors for %d connections after the first: a readiness pair each?",
	      count_fds() - fds1, nconns - 1);
	last = ev_now_ms();
	while (done < nconns) {
		struct usmc_event ev[MAX_EV];
		int n = usmc_ctx_poll(cc, ev, MAX_EV, 1000);
		uint64_t now = 0;

		CHECK(n >= 0, "client poll: %s", usmc_strerror(n));
		for (int i = 0; i < n; i++) {
			struct client *c = ev[i].user;

			CHECK(c >= k && c < k + nconns && ev[i].conn == c->c && !c->done,
			      "an event of a live client");
			done += client_step(c, ev[i].events);
		}
		for (int i = 0; i < nconns; i++)
			now += k[i].sent + k[i].rcvd;
		if (now != progress || done == nconns) {
			progress = now;
			last = ev_now_ms();
		}
		CHECK(ev_now_ms() - last < STALL_MS,
		      "no progress for %d ms: %d of %d done, server accepted %d, finished %d",
		      STALL_MS, done, nconns, atomic_load(&sv.accepted), sv.finished);
	}
	atomic_store(&sv.stop, true);
	pthread_join(th, NULL);
	CHECK(atomic_load(&sv.accepted) == nconns && sv.finished == nconns,
	      "server: %d accepted, %d finished", atomic_load(&sv.accepted), sv.finished);
	CHECK(ready_ops(cc) == 0 && ready_ops(cs) == 0,
	      "readiness pair operations: client %llu, server %llu (none expected)",
	      (unsigned long long)ready_ops(cc), (unsigned long long)ready_ops(cs));
	CHECK(!usmc_listener_close(sv.l), "listener close");
	free(k);
	printf("echo: %d connections x %llu bytes through usmc_ctx_poll(), checked\n", nconns,
	       (unsigned long long)total);
}

/* ---- phase 2: the edges of one connection ----------------------------- */

static void phase_edges(struct usmc_ctx *cc, struct usmc_ctx *cs)
{
	static uint8_t blob[64 * 1024];
	struct sockaddr_in sa;
	struct usmc_listener *l = listen_b(cs, 16, &sa);
	struct usmc_conn *c, *s, *c2, *s2;
	uint64_t filled = 0, drained = 0;
	uint8_t b[16];
	long t0;
	int rc;

	c = connect_nonblock_smcr_or_tcp(cc, &sa, allow_tcp);
	CHECK(!(rc = usmc_accept(l, USMC_NONBLOCK, &s)), "usmc_accept: %s", usmc_strerror(rc));
	expect_mode(s, "server");
	CHECK(!usmc_conn_watch(s, USMC_EV_READ | USMC_EV_HUP, NULL), "watch");
	CHECK(!usmc_conn_watch(c, USMC_EV_WRITE, NULL), "watch");
	CHECK(ev_wait_for(cc, c, NULL, USMC_EV_WRITE, EDGE_MS, NULL), "no WRITE at the start");
	CHECK(!ev_now(cs, s), "the server is told something before any data");

	/* READ */
	t0 = ev_now_ms();
	CHECK(usmc_send(c, "ping", 4, 0) == 4, "send");
	CHECK(ev_wait_for(cs, s, NULL, USMC_EV_READ, EDGE_MS, NULL) == USMC_EV_READ,
	      "no READ within %d ms of the send", EDGE_MS);
	printf("edges: READ after %ld ms\n", ev_now_ms() - t0);
	CHECK(ev_now(cs, s) == USMC_EV_READ, "READ is level-triggered");
	CHECK(usmc_recv(s, b, sizeof(b), 0) == 4 && !memcmp(b, "ping", 4), "recv");
	CHECK(!ev_now(cs, s), "READ after the data was read");

	/* WRITE: gone while the send buffer is full, back when the peer reads.
	 * Full is when the send fails and stays so: the first -EAGAIN may
	 * only wait for our own send completions (the peer's window still
	 * open), which the poll runs, and WRITE comes back for the rest. */
	for (;;) {
		ssize_t n = usmc_send(c, blob, sizeof(blob), 0);

		if (n == -EAGAIN) {
			if (!ev_wait_for(cc, c, NULL, USMC_EV_WRITE, 50, NULL))
				break;
			continue;
		}
		CHECK(n > 0, "fill: %s", usmc_strerror((int)n));
		filled += (uint64_t)n;
		CHECK(filled < 1ull << 30, "the send buffer never fills");
	}
	CHECK(!(ev_now(cc, c) & USMC_EV_WRITE), "WRITE with the send buffer full");
	/* SMC-R: WRITE is exactly room > 0 (TCP's EPOLLOUT waits for a third
	 * of its buffer, while a byte may still go) */
	CHECK(allow_tcp || usmc_send(c, blob, 1, 0) == -EAGAIN, "no WRITE, yet room to send");
	t0 = ev_now_ms();
	while (drained < filled) {
		ssize_t n = usmc_recv(s, blob, sizeof(blob), 0);

		if (n == -EAGAIN) {
			CHECK(ev_wait_for(cs, s, NULL, USMC_EV_READ, EDGE_MS, NULL),
			      "no READ while %llu bytes are to come",
			      (unsigned long long)(filled - drained));
			continue;
		}
		CHECK(n > 0, "drain: %s", usmc_strerror((int)n));
		drained += (uint64_t)n;
	}
	CHECK(ev_wait_for(cc, c, NULL, USMC_EV_WRITE, EDGE_MS, NULL) == USMC_EV_WRITE,
	      "no WRITE within %d ms of the peer's read", EDGE_MS);
	printf("edges: %llu bytes filled the send buffer, WRITE back %ld ms after the reads "
	       "began\n",
	       (unsigned long long)filled, ev_now_ms() - t0);

	/* HUP with READ at the peer's SHUT_WR */
	t0 = ev_now_ms();
	CHECK(!usmc_shutdown(c, SHUT_WR), "shutdown");
	CHECK(ev_wait_for(cs, s, NULL, USMC_EV_READ | USMC_EV_HUP, EDGE_MS, NULL) ==
		      (USMC_EV_READ | USMC_EV_HUP),
	      "no READ|HUP within %d ms of the peer's SHUT_WR", EDGE_MS);
	CHECK(usmc_recv(s, b, sizeof(b), 0) == 0, "EOF");
	CHECK(!usmc_close(s) && !usmc_close(c), "close");

	/* ERR at the peer's abort, unasked */
	c2 = connect_nonblock_smcr_or_tcp(cc, &sa, allow_tcp);
	CHECK(!(rc = usmc_accept(l, USMC_NONBLOCK, &s2)), "usmc_accept: %s", usmc_strerror(rc));
	CHECK(!usmc_conn_watch(c2, USMC_EV_READ, NULL), "watch");
	CHECK(!ev_now(cc, c2), "an event before the abort");
	t0 = ev_now_ms();
	CHECK(!usmc_abort(s2), "abort");
	CHECK(ev_wait_for(cc, c2, NULL, USMC_EV_ERR, EDGE_MS, NULL) & USMC_EV_ERR,
	      "no ERR within %d ms of the peer's abort", EDGE_MS);
	printf("edges: ERR %ld ms after the peer's abort\n", ev_now_ms() - t0);
	CHECK(usmc_recv(c2, b, 1, 0) == -ECONNRESET, "the reset");
	CHECK(!usmc_close(c2), "close");
	CHECK(!usmc_listener_close(l), "listener close");
}

int main(void)
{
	struct usmc_ctx *cs, *cc;
	int rc;

	allow_tcp = env_long("USMC_TEST_ALLOW_TCP", 0) != 0;
	nconns = (int)env_long("USMC_TEST_CONNS", 16);
	total = (uint64_t)env_long("USMC_TEST_BYTES", 1 << 20);
	CHECK(nconns > 0 && total > 0, "USMC_TEST_CONNS and USMC_TEST_BYTES > 0");
	CHECK(!usmc_ctx_create(&cs) && !usmc_ctx_create(&cc), "ctx");
	phase_echo(cc, cs);
	phase_edges(cc, cs);
	rc = usmc_ctx_destroy(cc);
	CHECK(!rc, "client ctx destroy: %s", usmc_strerror(rc));
	rc = usmc_ctx_destroy(cs);
	CHECK(!rc, "server ctx destroy: %s", usmc_strerror(rc));
	printf("PASS\n");
	return 0;
}
