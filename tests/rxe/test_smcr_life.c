// SPDX-License-Identifier: MIT
/*
 * SMC-R connection and link group life cycle between two libusmc contexts
 * (client on host A, server on host B), one scenario per run:
 *   reuse      USMC_TEST_CONNS (1000) sequential connections: ONE link group
 *   concurrent USMC_TEST_CONNS (100) parallel echoes of USMC_TEST_BYTES each
 *   halfclose  shutdown(SHUT_WR) -> EOF at the peer, which still answers
 *   unread     close with unread data aborts: the peer sees ECONNRESET
 *   abort      usmc_abort(): the peer sees ECONNRESET
 *   killed     the server process is SIGKILLed: the client sees an error
 *              within a bounded time (its TCP socket hangs up, no close CDC)
 *   orphankilled  the client is SIGKILLed after the server's close, before
 *              its own: the server's link group goes within 10 s
 *   testlink   an idle link is tested and answered; the connection lives on
 *   idle       an idle link group is freed after USMC_OPT_LGR_IDLE_MS
 *   nobufs     the server is out of RMBs: DECLINE, TCP, data still flows
 *   regmem     the server's budget of registered memory (USMC_OPT_REG_MEM_MAX)
 *              holds one connection's buffers: the next, with a larger RMB,
 *              runs SMC-R in the room the idle ones made (shrunk, never past
 *              the budget)
 *   linger     close with unsent data: the peer still reads all of it, then EOF
 *   lingerlong the same with a reader that starts after the linger ended:
 *              the close returns after the linger, the rest and the close
 *              go out behind it (as Linux), nothing is reset
 *   ueid       no common UEID: DECLINE NOSMCDEV, TCP on the same socket
 *   liar       CDCs with bad tokens or impossible cursors end only their own
 *              connection (EPROTO); the link group and others live on
 *   lgrdown    the client's link group dies (RoCE cut, a send never
 *              acknowledged), the idle server's does not: the server still
 *              sees an error within the TCP hang-up grace time
 *   peerexit   the client closes, then its context ends (DELETE_LINK): the
 *              server still reads all data, then EOF
 *   api        the socket-like API in SMC-R mode: MSG_MORE / MSG_NOSIGNAL sends, TCP
 *              options on the CLC socket, SO_RCVBUF/SO_SNDBUF/SO_ERROR
 *              answers, a peer reset seen first by a send: ECONNRESET once,
 *              then EPIPE
 * Every scenario requires SMC-R where it says so: a TCP fallback fails.
 */
#include <dirent.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/pattern.h"
#include "bufpool.h"
#include "conn.h"
#include "ctx.h"
#include "lgr.h"
#include "smcr_conn.h"
#include "lgr_dump.h"
#include "smcr_common.h"

#define PEEREXIT_WAIT_US 1000000

static struct usmc_ctx *cs, *cc;
static struct usmc_listener *lst;
static struct sockaddr_in srv_addr;
static long nconns;
static uint64_t nbytes;

static struct usmc_conn *connect_b(struct usmc_ctx *ctx)
{
	struct usmc_conn *c;
	int rc = usmc_connect(ctx, (struct sockaddr *)&srv_addr, sizeof(srv_addr), 0, &c);

	CHECK(!rc, "usmc_connect: %s", usmc_strerror(rc));
	return c;
}

static struct usmc_conn *accept_one(void)
{
	struct usmc_conn *c;
	int rc = usmc_accept(lst, 0, &c);

	CHECK(!rc, "usmc_accept: %s", usmc_strerror(rc));
	return c;
}

static void recv_all(struct usmc_conn *c, void *buf, size_t len)
{
	ssize_t n = usmc_recv(c, buf, len, MSG_WAITALL);

	CHECK(n == (ssize_t)len, "recv %zu: got %zd (%s)", len, n,
	      n < 0 ? usmc_strerror((int)n) : "");
}

static void setup(void)
{
	CHECK(!usmc_ctx_create(&cs) && !usmc_ctx_create(&cc), "ctx");
	/* 100 client threads on 2 emulated cores: give a PROPOSAL more than
	 * the default 100 ms to arrive before the probe decides TCP */
	CHECK(!usmc_ctx_setopt(cs, USMC_OPT_PROBE_MS, 2000), "probe option");
	/* handshakes wait on LLC round trips: more workers than cores */
	CHECK(!usmc_ctx_setopt(cs, USMC_OPT_HS_THREADS, 16), "hs threads option");
	lst = listen_b(cs, 256, &srv_addr);
}

static void teardown(void)
{
	int rc;

	CHECK(!usmc_listener_close(lst), "listener close");
	rc = cc ? usmc_ctx_destroy(cc) : 0; /* peerexit destroyed it already */
	CHECK(!rc, "client ctx destroy: %s", usmc_strerror(rc));
	rc = usmc_ctx_destroy(cs);
	CHECK(!rc, "server ctx destroy: %s", usmc_strerror(rc));
}

static void expect_lgrs(uint64_t want)
{
	struct usmc_ctx_stats a, b;

	usmc_ctx_stats(cc, &a);
	usmc_ctx_stats(cs, &b);
	CHECK(a.lgrs_created == want && b.lgrs_created == want,
	      "link groups created: client %llu, server %llu, want %llu",
	      (unsigned long long)a.lgrs_created, (unsigned long long)b.lgrs_created,
	      (unsigned long long)want);
}

/* ---- reuse ---- */

static void *reuse_server(void *arg)
{
	(void)arg;
	for (long i = 0; i < nconns; i++) {
		struct usmc_conn *c = accept_one();
		uint32_t v;

		expect_smcr(c, "server");
		recv_all(c, &v, sizeof(v));
		CHECK(v == (uint32_t)i, "conn %ld got %u", i, v);
		v = ~v;
		send_all(c, &v, sizeof(v));
		CHECK(!usmc_close(c), "server close");
	}
	return NULL;
}

/* LLC messages both contexts sent and received so far. */
static uint64_t llc_msgs(void)
{
	struct usmc_ctx_stats a, b;

	usmc_ctx_stats(cc, &a);
	usmc_ctx_stats(cs, &b);
	return a.llc_sent + a.llc_received + b.llc_sent + b.llc_received;
}

/* RMBs the pools of both contexts' link groups hold (internals, under the
 * lists' locks): each new one is confirmed once. */
static uint64_t rmbs_pooled(void)
{
	struct usmc_ctx *both[2] = {cc, cs};
	uint64_t n = 0;

	for (int i = 0; i < 2; i++) {
		pthread_mutex_lock(&both[i]->rdma.lock);
		for (struct lgr *l = both[i]->rdma.lgrs; l; l = l->next)
			for (uint8_t c = 0; c < SMC_BUF_CLASSES; c++)
				n += bufpool_class_count(l->rmbs, c);
		pthread_mutex_unlock(&both[i]->rdma.lock);
	}
	return n;
}

static void run_reuse(void)
{
	pthread_t th;
	double t0 = mono_s();
	uint64_t llc_half = 0, llc_end, rmbs_half = 0, rmbs_end;

	pthread_create(&th, NULL, reuse_server, NULL);
	for (long i = 0; i < nconns; i++) {
		struct usmc_conn *c;
		uint32_t v = (uint32_t)i;

		if (i == nconns / 2) {
			llc_half = llc_msgs();
			rmbs_half = rmbs_pooled();
		}
		c = connect_b(cc);
		expect_smcr(c, "client");
		send_all(c, &v, sizeof(v));
		recv_all(c, &v, sizeof(v));
		CHECK(v == ~(uint32_t)i, "conn %ld answer %u", i, v);
		CHECK(!usmc_close(c), "client close");
	}
	pthread_join(th, NULL);
	expect_lgrs(1);
	/*
	 * A reused RMB keeps its rkey with the peer, so the steady
	 * state has no LLC flow per connection. CONFIRM_RKEY (a request and
	 * its answer) only for the few RMBs the pools grew while a previous
	 * connection still held one (its peer's close not in yet: on a loaded
	 * host that happens in the second half too), DELETE_RKEY never (each
	 * connection ends with its peer's close, so no RMB needs a new rkey).
	 */
	{
		struct lgr *lc, *ls;
		uint64_t conf, del;

		usleep(200000); /* a DELETE_RKEY would not be waited for */
		llc_end = llc_msgs();
		rmbs_end = rmbs_pooled();
		/* internals: the lists under their lock (TSan) */
		pthread_mutex_lock(&cc->rdma.lock);
		lc = cc->rdma.lgrs;
		pthread_mutex_unlock(&cc->rdma.lock);
		pthread_mutex_lock(&cs->rdma.lock);
		ls = cs->rdma.lgrs;
		pthread_mutex_unlock(&cs->rdma.lock);

		CHECK(lc && ls, "link groups gone");
		conf = atomic_load(&lc->llc.rkey_confirmed) + atomic_load(&ls->llc.rkey_confirmed);
		del = atomic_load(&lc->llc.rkey_deleted) + atomic_load(&ls->llc.rkey_deleted);
		printf("LLC: %llu messages counted at both ends in all, %llu in the second half; "
		       "CONFIRM_RKEY answered %llu, DELETE_RKEY answered %llu; the pools grew by "
		       "%llu RMBs in the second half, to %llu\n",
		       (unsigned long long)llc_end, (unsigned long long)(llc_end - llc_half),
		       (unsigned long long)conf, (unsigned long long)del,
		       (unsigned long long)(rmbs_end - rmbs_half), (unsigned long long)rmbs_end);
		/* a CONFIRM_RKEY flow: its request and its answer, each counted
		 * where it was sent and where it was received */
		CHECK(llc_end - llc_half <= 4 * (rmbs_end - rmbs_half),
		      "%llu LLC messages in the steady state (want at most 4 per new RMB: %llu)",
		      (unsigned long long)(llc_end - llc_half),
		      (unsigned long long)(4 * (rmbs_end - rmbs_half)));
		CHECK(conf <= 8,
		      "CONFIRM_RKEY answered %llu times: reused RMBs were confirmed again",
		      (unsigned long long)conf);
		CHECK(del == 0, "DELETE_RKEY answered %llu times: released RMBs were deleted",
		      (unsigned long long)del);
	}
	printf("%ld sequential SMC-R connections, 1 link group, %.2f ms per connection\n", nconns,
	       (mono_s() - t0) * 1e3 / (double)nconns);
}

/* ---- concurrent ---- */

struct pipe_end {
	struct usmc_conn *c;
	uint64_t seed;
};

static void *echo_server_conn(void *arg)
{
	struct usmc_conn *c = arg;
	static _Thread_local uint8_t buf[65536];

	expect_smcr(c, "server");
	echo_until_eof(c, buf, sizeof(buf));
	CHECK(!usmc_close(c), "server close");
	return NULL;
}

static void *concurrent_server(void *arg)
{
	pthread_t *th = calloc((size_t)nconns, sizeof(*th));

	(void)arg;
	for (long i = 0; i < nconns; i++)
		pthread_create(&th[i], NULL, echo_server_conn, accept_one());
	for (long i = 0; i < nconns; i++)
		pthread_join(th[i], NULL);
	free(th);
	return NULL;
}

static void *writer(void *arg)
{
	struct pipe_end *p = arg;
	static _Thread_local uint8_t buf[65536];

	for (uint64_t off = 0; off < nbytes;) {
		size_t n = nbytes - off < sizeof(buf) ? (size_t)(nbytes - off) : sizeof(buf);

		pattern_fill(p->seed, off, buf, n);
		send_all(p->c, buf, n);
		off += n;
	}
	CHECK(!usmc_shutdown(p->c, SHUT_WR), "shutdown");
	return NULL;
}

static pthread_barrier_t all_connected;

static void *client_conn(void *arg)
{
	struct pipe_end p = {.c = connect_b(cc), .seed = (uint64_t)(uintptr_t)arg};
	static _Thread_local uint8_t buf[65536];
	uint64_t got = 0;
	pthread_t w;

	expect_smcr(p.c, "client");
	/* handshakes first, then all data at once: a handshake's LLC round
	 * trips behind 100 busy streams can exceed the 6 s CLC wait under TCG */
	pthread_barrier_wait(&all_connected);
	pthread_create(&w, NULL, writer, &p);
	for (;;) {
		ssize_t n = usmc_recv(p.c, buf, sizeof(buf), 0);
		long long bad;

		CHECK(n >= 0, "client recv: %s", usmc_strerror((int)n));
		if (!n)
			break;
		bad = pattern_check(p.seed, got, buf, (size_t)n);
		CHECK(bad < 0, "conn %llu: echo differs at %lld", (unsigned long long)p.seed, bad);
		got += (uint64_t)n;
	}
	pthread_join(w, NULL);
	CHECK(got == nbytes, "echo %llu of %llu", (unsigned long long)got,
	      (unsigned long long)nbytes);
	CHECK(!usmc_close(p.c), "client close");
	return NULL;
}

static void run_concurrent(void)
{
	pthread_t srv, *th = calloc((size_t)nconns, sizeof(*th));
	double t0 = mono_s(), dt;

	pthread_barrier_init(&all_connected, NULL, (unsigned int)nconns);
	pthread_create(&srv, NULL, concurrent_server, NULL);
	for (long i = 0; i < nconns; i++)
		pthread_create(&th[i], NULL, client_conn, (void *)(uintptr_t)(i + 1));
	for (long i = 0; i < nconns; i++)
		pthread_join(th[i], NULL);
	pthread_join(srv, NULL);
	dt = mono_s() - t0;
	free(th);
	printf("%ld concurrent SMC-R echoes of %llu bytes: %.2f s, %.1f MB/s total each way\n",
	       nconns, (unsigned long long)nbytes, dt, (double)nbytes * (double)nconns / dt / 1e6);
}

/* ---- half close, unread close, abort ---- */

static void run_halfclose(void)
{
	struct usmc_conn *c = connect_b(cc), *s = accept_one();
	char buf[16];

	expect_smcr(c, "client");
	expect_smcr(s, "server");
	send_all(c, "hello", 5);
	CHECK(!usmc_shutdown(c, SHUT_WR), "shutdown");
	recv_all(s, buf, 5);
	CHECK(!memcmp(buf, "hello", 5), "data before EOF");
	CHECK(usmc_recv(s, buf, sizeof(buf), 0) == 0, "server: EOF after SHUT_WR");
	CHECK(usmc_send(c, "x", 1, 0) == -EPIPE, "send after SHUT_WR must be EPIPE");
	send_all(s, "bye", 3); /* the other direction still works */
	CHECK(!usmc_close(s), "server close");
	recv_all(c, buf, 3);
	CHECK(!memcmp(buf, "bye", 3), "reply after half close");
	CHECK(usmc_recv(c, buf, sizeof(buf), 0) == 0, "client: EOF after the server's close");
	CHECK(!usmc_close(c), "client close");
}

static void expect_reset(struct usmc_conn *c, const char *who)
{
	char buf[16];
	double t0 = mono_s();
	ssize_t n;

	do
		n = usmc_recv(c, buf, sizeof(buf), 0);
	while (n > 0);
	CHECK(n == -ECONNRESET, "%s: ECONNRESET expected, got %zd (%s)", who, n,
	      n < 0 ? usmc_strerror((int)n) : "EOF");
	CHECK(mono_s() - t0 < 5, "%s: reset took %.1f s", who, mono_s() - t0);
}

static void run_unread(void)
{
	struct usmc_conn *c = connect_b(cc), *s = accept_one();
	char buf[1000] = {0};

	expect_smcr(c, "client");
	expect_smcr(s, "server");
	send_all(c, buf, sizeof(buf));
	/* all of it in the server's RMB, unread (a sleep is not enough on a
	 * loaded host: the CDC may come later than any fixed time) */
	for (double t0 = mono_s(); usmc_recv(s, buf, sizeof(buf), MSG_PEEK) < (ssize_t)sizeof(buf);
	     usleep(10000))
		CHECK(mono_s() - t0 < 10, "server: the data did not arrive");
	CHECK(!usmc_close(s), "server close");
	expect_reset(c, "client");
	CHECK(usmc_send(c, "x", 1, 0) == -EPIPE, "send after reset must be EPIPE");
	CHECK(!usmc_close(c), "client close");
}

static void run_abort(void)
{
	struct usmc_conn *c = connect_b(cc), *s = accept_one();

	expect_smcr(c, "client");
	expect_smcr(s, "server");
	send_all(c, "data", 4);
	CHECK(!usmc_abort(c), "abort");
	expect_reset(s, "server");
	CHECK(usmc_send(s, "x", 1, 0) == -EPIPE, "send after a reported reset must be EPIPE");
	CHECK(!usmc_close(s), "server close");
}

/* ---- the socket-like API in SMC-R mode ---- */

static void flow_info(const struct usmc_conn *c, struct usmc_conn_info *info)
{
	CHECK(!usmc_conn_info(c, info), "conn info");
}

/*
 * usmc_conn_info's flow fields: the server reads nothing until the client's
 * window and send buffer are full, then everything. Bytes the server read
 * before may still count as unconsumed at the client: a consumer cursor goes
 * back only past the update limit (Linux's smc_tx_consumer_update()).
 */
static void check_flow_info(struct usmc_conn *c, struct usmc_conn *s, long rmb)
{
	static char buf[1 << 16];
	struct usmc_conn_info ci, si;
	long long sent = 0, got = 0;
	double t0 = mono_s();
	uint64_t before;
	ssize_t n;

	flow_info(c, &ci);
	before = ci.snd_unconsumed;
	CHECK(!ci.snd_unsent && !ci.rcv_unread && !ci.flow_flags && before < SMCR_CONS_UPDATE_MIN,
	      "an idle connection's flow: unsent %llu unconsumed %llu unread %llu flags %#x",
	      (unsigned long long)ci.snd_unsent, (unsigned long long)before,
	      (unsigned long long)ci.rcv_unread, ci.flow_flags);
	for (;;) {
		n = usmc_send(c, buf, sizeof(buf), MSG_DONTWAIT);
		if (n > 0) {
			sent += n;
			continue;
		}
		CHECK(n == -EAGAIN, "send: %s", usmc_strerror((int)n));
		flow_info(c, &ci);
		flow_info(s, &si);
		/* full, and all the client wrote has arrived (stream totals: the
		 * server's cursor for the earlier bytes may move meanwhile) */
		if (ci.flow_flags & USMC_FLOW_WINDOW_FULL &&
		    si.bytes_received + si.rcv_unread == ci.bytes_sent - ci.snd_unsent)
			break;
		CHECK(mono_s() - t0 < 10, "the window never filled: sent %lld, unread %llu", sent,
		      (unsigned long long)si.rcv_unread);
		usleep(1000);
	}
	CHECK(ci.snd_unconsumed >= (uint64_t)rmb && si.rcv_unread + before >= (uint64_t)rmb &&
		      ci.snd_unsent > 0 && ci.snd_unsent < (uint64_t)sent,
	      "client: sent %lld, unsent %llu, unconsumed %llu; server: unread %llu, RMB %ld", sent,
	      (unsigned long long)ci.snd_unsent, (unsigned long long)ci.snd_unconsumed,
	      (unsigned long long)si.rcv_unread, rmb);
	while (got < sent) {
		n = usmc_recv(s, buf, sizeof(buf), 0);
		CHECK(n > 0, "server recv: %zd", n);
		got += n;
	}
	flow_info(s, &si);
	CHECK(!si.rcv_unread, "server: unread %llu after reading all",
	      (unsigned long long)si.rcv_unread);
	for (t0 = mono_s(); flow_info(c, &ci), ci.snd_unsent || ci.flow_flags; usleep(1000))
		CHECK(mono_s() - t0 < 10,
		      "client: unsent %llu, flags %#x after the server read all",
		      (unsigned long long)ci.snd_unsent, ci.flow_flags);
}

static void run_api(void)
{
	struct usmc_conn *c = connect_b(cc), *s = accept_one();
	int one = 1, v = 0;
	socklen_t len = sizeof(v);
	struct pollfd pfd;
	char buf[6];
	long rmb;
	ssize_t n;

	expect_smcr(c, "client");
	expect_smcr(s, "server");
	/* MSG_MORE is a hint SMC-R mode ignores; MSG_NOSIGNAL is implied */
	CHECK(usmc_send(c, "abc", 3, MSG_MORE | MSG_NOSIGNAL) == 3, "send MSG_MORE");
	CHECK(usmc_send(c, "def", 3, MSG_NOSIGNAL) == 3, "send MSG_NOSIGNAL");
	recv_all(s, buf, 6);
	CHECK(!memcmp(buf, "abcdef", 6), "data after MSG_MORE");
	/* TCP options reach the CLC socket */
	CHECK(!usmc_conn_setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), "NODELAY");
	CHECK(!usmc_conn_setsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)), "KEEPALIVE");
	CHECK(!usmc_conn_getsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &v, &len) && v == 1,
	      "KEEPALIVE read back");
	/* the library answers buffer sizes and errors */
	CHECK(!usmc_conn_getopt(s, USMC_OPT_RMB_SIZE, &rmb), "getopt");
	CHECK(!usmc_conn_getsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &len) && v >= rmb,
	      "SO_RCVBUF %d, RMB option %ld", v, rmb);
	CHECK(usmc_conn_setsockopt(s, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) == -EOPNOTSUPP,
	      "SO_SNDBUF set in SMC-R mode");
	CHECK(!usmc_conn_getsockopt(s, SOL_SOCKET, SO_ERROR, &v, &len) && v == 0, "SO_ERROR");
	check_flow_info(c, s, rmb);
	/* a reset seen first by a send */
	CHECK(!usmc_abort(c), "abort");
	pfd = (struct pollfd){.fd = usmc_conn_fd(s), .events = POLLIN};
	CHECK(poll(&pfd, 1, 5000) == 1, "server: no readiness after the peer's abort");
	n = usmc_send(s, "x", 1, 0);
	CHECK(n == -ECONNRESET, "first send after reset: %zd (%s)", n, usmc_strerror((int)n));
	n = usmc_send(s, "x", 1, 0);
	CHECK(n == -EPIPE, "second send after reset: %zd (%s)", n, usmc_strerror((int)n));
	CHECK(!usmc_close(s), "server close");
}

/* ---- the peer closes, then its process exits ---- */

/* The client closes cleanly, then its context ends, which deletes its link
 * group (DELETE_LINK, orderly). The server has not read yet: it must still
 * get every byte and then EOF, not the link group's end as an error. */
static void run_peerexit(void)
{
	struct usmc_conn *c = connect_b(cc), *s = accept_one();
	char buf[16];
	int rc;

	expect_smcr(c, "client");
	expect_smcr(s, "server");
	send_all(c, "last words", 10);
	CHECK(!usmc_close(c), "client close");
	rc = usmc_ctx_destroy(cc);
	CHECK(!rc, "client ctx destroy: %s", usmc_strerror(rc));
	cc = NULL;
	/* the DELETE_LINK takes milliseconds even under TCG; the server's
	 * link group itself lives until its last connection is closed */
	usleep(PEEREXIT_WAIT_US);
	recv_all(s, buf, 10);
	CHECK(!memcmp(buf, "last words", 10), "data sent before the close");
	rc = (int)usmc_recv(s, buf, sizeof(buf), 0);
	CHECK(rc == 0, "server: EOF expected after the peer's close, got %d (%s)", rc,
	      rc < 0 ? usmc_strerror(rc) : "data");
	CHECK(!usmc_close(s), "server close");
}

/* ---- the RDMA path cut during a first contact ---- */

static void roce_restore(void)
{
	roce_cut(false);
}

/* The mode of @c is TCP because of @reason; returns whether the peer said so. */
static bool expect_tcp(const struct usmc_conn *c, const char *who, uint32_t reason)
{
	struct usmc_conn_info info;

	CHECK(!usmc_conn_info(c, &info), "conn info");
	CHECK(info.mode == USMC_MODE_TCP && info.reason == reason, "%s: %s %s, want TCP %s", who,
	      usmc_mode_name(info.mode), usmc_reason_name(info.reason), usmc_reason_name(reason));
	return info.peer_declined;
}

/*
 * CLC goes through, CONFIRM_LINK does not: both ends time out and fall back
 * to TCP. Exactly one DECLINE may be sent and it must be consumed by the
 * CLC layer: the first bytes each application reads are the other's data.
 */
static void run_rdmacut(void)
{
	struct usmc_conn *c, *s;
	char buf[8] = "";
	double t0;

	atexit(roce_restore);
	CHECK(!roce_cut(true), "tc: cannot drop RoCE packets");
	t0 = mono_s();
	c = connect_b(cc);
	s = accept_one();
	printf("first contact without RDMA: TCP after %.1f s\n", mono_s() - t0);
	/* the server gives up first (2 s LLC wait), the client takes its DECLINE */
	CHECK(!expect_tcp(s, "server", USMC_REASON_TIMEOUT_CL), "server: its own DECLINE");
	CHECK(expect_tcp(c, "client", USMC_REASON_TIMEOUT_CL), "client: the server's DECLINE");
	send_all(c, "hello", 5);
	recv_all(s, buf, 5);
	CHECK(!memcmp(buf, "hello", 5), "server read %02x %02x %02x %02x, not the client's data",
	      (uint8_t)buf[0], (uint8_t)buf[1], (uint8_t)buf[2], (uint8_t)buf[3]);
	send_all(s, "world", 5);
	recv_all(c, buf, 5);
	CHECK(!memcmp(buf, "world", 5), "client read %02x %02x %02x %02x, not the server's data",
	      (uint8_t)buf[0], (uint8_t)buf[1], (uint8_t)buf[2], (uint8_t)buf[3]);
	CHECK(!usmc_close(c) && !usmc_close(s), "close");
	roce_restore();
}

/* ---- one link group dies, its peer's does not ---- */

/* usmc_recv() on @c: an error expected; returns the seconds it took from @t0. */
static double recv_error(struct usmc_conn *c, const char *who, double t0)
{
	char buf[8];
	ssize_t n = usmc_recv(c, buf, sizeof(buf), 0);

	CHECK(n < 0 && n != -EAGAIN, "%s: recv after the link group died: %zd", who, n);
	printf("%s: '%s' after %.2f s\n", who, usmc_strerror((int)n), mono_s() - t0);
	return mono_s() - t0;
}

/*
 * RoCE is cut and the client sends: its QP runs out of retries and its
 * link group dies (ECONNABORTED). The server had nothing in flight, so its
 * own link group lives on; it only reads. It must learn from the client's
 * TCP socket (a FIN when the link group died, as Linux's tcp_abort() in
 * smc_close_active_abort()) within the hang-up grace time, not from its own
 * TEST_LINK 30 s later (the fault campaign's linkdown_u2u).
 */
static void run_lgrdown(void)
{
	struct usmc_conn *c, *s;
	char buf[4];
	double t0;

	atexit(roce_restore);
	c = connect_b(cc);
	s = accept_one();
	expect_smcr(c, "client");
	send_all(c, "ping", 4);
	recv_all(s, buf, 4);
	sleep(2); /* both TCP sockets watched (SMCR_TCP_WATCH_DELAY_MS) */
	CHECK(!roce_cut(true), "tc: cannot drop RoCE packets");
	t0 = mono_s();
	send_all(c, "lost", 4);
	CHECK(recv_error(c, "client", t0) < 5, "client: its QP's retries take ~1.1 s");
	/* QP retries + SMCR_TCP_EOF_GRACE_MS + a tick, far below TEST_LINK */
	CHECK(recv_error(s, "server", t0) < 5, "server: it did not learn in time");
	CHECK(atomic_load(&s->smcr->lgr->llc.test_link_sent) <= 1,
	      "server: learnt by TEST_LINK, not by the TCP socket");
	CHECK(!usmc_close(c) && !usmc_close(s), "close");
	roce_restore();
}

/* ---- closed by us, never by the peer: reclaimed all the same ---- */

static long rss_kib(void)
{
	long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	CHECK(f && fscanf(f, "%ld %ld", &pages, &rss) == 2, "statm");
	fclose(f);
	return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The client process: open @n connections, never close them. */
static void orphan_client(long n, int done_fd)
{
	struct usmc_conn **c = calloc((size_t)n, sizeof(*c));

	prctl(PR_SET_PDEATHSIG, SIGKILL); /* the server failed: do not outlive it */

	CHECK(c && !usmc_ctx_create(&cc), "client ctx");
	for (long i = 0; i < n; i++) {
		c[i] = connect_b(cc);
		if (i % 100 == 99)
			printf("client: %ld connections open\n", i + 1), fflush(stdout);
	}
	CHECK(write(done_fd, "d", 1) == 1, "pipe write");
	pause();
	_exit(0);
}

/*
 * The server closes each of its connections at once; the client keeps all
 * of them open and never answers with its close. With USMC_CLOSE_WAIT_MS
 * (the test sets 2000) each is aborted and reclaimed, and the idle link
 * groups go too (USMC_LGR_IDLE_MS 1000): the server's descriptors, link
 * groups and memory come back to their baseline.
 */
static void run_orphans(void)
{
	long n = env_long("USMC_TEST_CONNS", 600), fds0, rss0, rss_peak, smcr = 0;
	struct rlimit rl;
	struct usmc_ctx_stats st;
	int pfd[2];
	double t0;
	pid_t pid;
	char b;

	CHECK(!getrlimit(RLIMIT_NOFILE, &rl), "getrlimit");
	rl.rlim_cur = rl.rlim_max; /* 3 descriptors per connection on each side */
	CHECK(!setrlimit(RLIMIT_NOFILE, &rl), "setrlimit");
	CHECK(!usmc_ctx_create(&cs), "server ctx");
	CHECK(!usmc_ctx_setopt(cs, USMC_OPT_LGR_IDLE_MS, 1000), "idle option");
	CHECK(!usmc_ctx_setopt(cs, USMC_OPT_PROBE_MS, 2000), "probe option");
	lst = listen_b(cs, 256, &srv_addr);
	fds0 = count_fds();
	rss0 = rss_kib();
	CHECK(!pipe(pfd), "pipe");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		close(pfd[0]);
		orphan_client(n, pfd[1]);
	}
	alarm(240); /* a client that died leaves usmc_accept() waiting: fail instead */
	close(pfd[1]);
	for (long i = 0; i < n; i++) {
		struct usmc_conn *s = accept_one();
		struct usmc_conn_info info;

		CHECK(!usmc_conn_info(s, &info), "conn info");
		smcr += info.mode == USMC_MODE_SMCR;
		CHECK(!usmc_close(s), "close");
	}
	/* once the first ones are reclaimed here, the client (which never
	 * closes) has no room left in its link group and declines (MEM) */
	CHECK(smcr >= SMCR_MAX_CONNS, "only %ld of %ld connections ran SMC-R", smcr, n);
	CHECK(read(pfd[0], &b, 1) == 1, "the client holds all its connections");
	close(pfd[0]); /* the baseline was counted before the pipe */
	rss_peak = rss_kib();
	t0 = mono_s();
	do {
		usleep(100000);
		usmc_ctx_stats(cs, &st);
	} while ((count_fds() > fds0 || st.lgrs_open) && mono_s() - t0 < 20);
	printf("%ld connections (%ld SMC-R) closed by the server only: %d descriptors over the baseline, "
	       "%llu link groups left after %.1f s; RSS %ld KiB before, %ld at the peak, %ld now\n",
	       n, smcr, count_fds() - (int)fds0, (unsigned long long)st.lgrs_open, mono_s() - t0,
	       rss0, rss_peak, rss_kib());
	if (count_fds() > fds0 || st.lgrs_open)
		lgr_dump(cs, "server, not reclaimed");
	CHECK(count_fds() <= fds0, "descriptors not reclaimed");
	CHECK(!st.lgrs_open, "link groups not reclaimed");
	CHECK(rss_kib() < rss0 + (rss_peak - rss0) / 2, "memory not reclaimed");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	CHECK(!usmc_listener_close(lst), "listener close");
	CHECK(!usmc_ctx_destroy(cs), "server ctx destroy");
}

/* ---- peer killed ---- */

/*
 * USMC_TEST_CLOSE_PUT_DELAY_MS: smcr_close() sleeps this long between
 * removing the connection from its link group and dropping its reference,
 * so that the dead peer's link group is found dead and reaped meanwhile
 * (the link group must outlive its connections).
 */
void smcr_test_hook_close_put(void)
{
	const char *ms = getenv("USMC_TEST_CLOSE_PUT_DELAY_MS");

	if (ms && *ms)
		usleep((useconds_t)atoi(ms) * 1000);
}

static void run_killed(void)
{
	int pfd[2];
	pid_t pid;
	struct usmc_conn *c;
	double t0;
	ssize_t n;
	char buf[8];

	CHECK(!pipe(pfd), "pipe");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) { /* the server process: accept, answer once, then hang */
		struct usmc_conn *s;

		close(pfd[0]);
		CHECK(!usmc_ctx_create(&cs), "child ctx");
		lst = listen_b(cs, 4, &srv_addr);
		CHECK(write(pfd[1], &srv_addr, sizeof(srv_addr)) == sizeof(srv_addr), "pipe write");
		s = accept_one();
		expect_smcr(s, "server");
		recv_all(s, buf, 4);
		send_all(s, buf, 4);
		pause();
		_exit(0);
	}
	close(pfd[1]);
	CHECK(read(pfd[0], &srv_addr, sizeof(srv_addr)) == sizeof(srv_addr), "pipe read");
	CHECK(!usmc_ctx_create(&cc), "ctx");
	/* default options: TEST_LINK only after 30 s, so the peer's TCP
	 * socket hanging up is what must end the connection */
	c = connect_b(cc);
	expect_smcr(c, "client");
	send_all(c, "ping", 4);
	recv_all(c, buf, 4);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	t0 = mono_s();
	n = usmc_recv(c, buf, sizeof(buf), 0);
	CHECK(n < 0 && n != -EAGAIN, "recv after the peer died: %zd", n);
	printf("peer killed: error '%s' after %.2f s\n", usmc_strerror((int)n), mono_s() - t0);
	CHECK(mono_s() - t0 < 5, "took too long");
	CHECK(usmc_send(c, "x", 1, 0) < 0, "send to a dead peer must fail");
	CHECK(!usmc_close(c), "close");
	{ /* the link group is tested at once, found dead (2 s) and freed */
		struct usmc_ctx_stats st;
		int i;

		for (i = 0; i < 50; i++) {
			usmc_ctx_stats(cc, &st);
			if (!st.lgrs_open)
				break;
			usleep(100000);
		}
		CHECK(!st.lgrs_open, "dead link group still there after 5 s");
		printf("dead peer's link group freed %.2f s after the kill\n", mono_s() - t0);
	}
	CHECK(!usmc_ctx_destroy(cc), "ctx destroy");
}

/*
 * The peer dies after our close, before its own: the client process reads
 * the server's EOF, then is SIGKILLed without closing. Default options
 * (TEST_LINK after 30 s idle, USMC_OPT_CLOSE_WAIT_MS 60 s): the server's
 * closed connection must not hold its link group that long. Its peer
 * silent since the close, the link group is tested (SMCR_ORPHAN_PROBE_MS),
 * found dead and freed: within 10 s (2 s + the QP's retries or the 2 s
 * answer wait + the idle time).
 */
static void run_orphan_killed(void)
{
	struct usmc_ctx_stats st;
	struct usmc_conn *s;
	int pfd[2];
	double t0;
	pid_t pid;
	char b;

	CHECK(!usmc_ctx_create(&cs), "server ctx");
	CHECK(!usmc_ctx_setopt(cs, USMC_OPT_LGR_IDLE_MS, 1000), "idle option");
	lst = listen_b(cs, 4, &srv_addr);
	CHECK(!pipe(pfd), "pipe");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) { /* the client: read to EOF, say so, never close */
		struct usmc_conn *c;
		char buf[8];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(pfd[0]);
		CHECK(!usmc_ctx_create(&cc), "client ctx");
		c = connect_b(cc);
		expect_smcr(c, "client");
		recv_all(c, buf, 4);
		CHECK(usmc_recv(c, buf, sizeof(buf), 0) == 0, "client: EOF expected");
		CHECK(write(pfd[1], "e", 1) == 1, "pipe write");
		pause();
		_exit(0);
	}
	close(pfd[1]);
	s = accept_one();
	expect_smcr(s, "server");
	send_all(s, "bye!", 4);
	CHECK(!usmc_close(s), "close");
	CHECK(read(pfd[0], &b, 1) == 1, "the client did not read EOF");
	close(pfd[0]);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	t0 = mono_s();
	do {
		usleep(100000);
		usmc_ctx_stats(cs, &st);
	} while (st.lgrs_open && mono_s() - t0 < 20);
	printf("peer killed after our close: link group %s %.2f s after the kill (%llu LLC "
	       "messages sent)\n",
	       st.lgrs_open ? "still there" : "freed", mono_s() - t0,
	       (unsigned long long)st.llc_sent);
	if (st.lgrs_open)
		lgr_dump(cs, "server, the killed peer's");
	CHECK(!st.lgrs_open, "the killed peer's link group still there after 20 s");
	CHECK(mono_s() - t0 < 10, "the killed peer's link group took %.1f s", mono_s() - t0);
	CHECK(!usmc_listener_close(lst), "listener close");
	CHECK(!usmc_ctx_destroy(cs), "server ctx destroy");
}

/* ---- TEST_LINK ---- */

static void run_testlink(void)
{
	struct usmc_conn *c, *s;
	char buf[4];

	CHECK(!usmc_ctx_setopt(cc, USMC_OPT_TESTLINK_MS, 500), "testlink option");
	c = connect_b(cc);
	s = accept_one();
	expect_smcr(c, "client");
	sleep(3); /* idle: the client tests the link, the server answers */
	CHECK(atomic_load(&c->smcr->lgr->llc.test_link_sent) >= 2, "client sent %llu TEST_LINKs",
	      (unsigned long long)atomic_load(&c->smcr->lgr->llc.test_link_sent));
	CHECK(atomic_load(&s->smcr->lgr->llc.test_link_answered) >= 2, "server answered %llu",
	      (unsigned long long)atomic_load(&s->smcr->lgr->llc.test_link_answered));
	send_all(c, "live", 4);
	recv_all(s, buf, 4);
	printf("TEST_LINK: %llu sent, %llu answered, link alive\n",
	       (unsigned long long)atomic_load(&c->smcr->lgr->llc.test_link_sent),
	       (unsigned long long)atomic_load(&s->smcr->lgr->llc.test_link_answered));
	CHECK(!usmc_close(s) && !usmc_close(c), "close");
}

/* ---- idle link group freed ---- */

static void run_idle(void)
{
	struct usmc_conn *c, *s;
	struct usmc_ctx_stats a, b;

	CHECK(!usmc_ctx_setopt(cc, USMC_OPT_LGR_IDLE_MS, 1000), "idle option");
	CHECK(!usmc_ctx_setopt(cs, USMC_OPT_LGR_IDLE_MS, 1500), "idle option");
	c = connect_b(cc);
	s = accept_one();
	expect_smcr(c, "client");
	CHECK(!usmc_close(s) && !usmc_close(c), "close");
	usmc_ctx_stats(cc, &a);
	CHECK(a.lgrs_open == 1, "the idle link group is kept at first");
	sleep(4);
	usmc_ctx_stats(cc, &a);
	usmc_ctx_stats(cs, &b);
	CHECK(a.lgrs_open == 0 && b.lgrs_open == 0,
	      "idle link groups left: client %llu server %llu", (unsigned long long)a.lgrs_open,
	      (unsigned long long)b.lgrs_open);
}

/* ---- server out of buffers ---- */

static void run_nobufs(void)
{
	struct usmc_conn *c1, *s1, *c2, *s2;
	struct usmc_conn_info info;
	char buf[4];

	/* the server's link group holds one RMB: USMC_OPT_MAX_BUFS is read when
	 * the link group is created, from the accepting listener's options */
	CHECK(!usmc_listener_setopt(lst, USMC_OPT_MAX_BUFS, 1), "setopt MAX_BUFS");
	c1 = connect_b(cc);
	s1 = accept_one();
	CHECK(!usmc_listener_setopt(lst, USMC_OPT_MAX_BUFS, 255), "setopt MAX_BUFS back");
	expect_smcr(c1, "client 1");
	c2 = connect_b(cc);
	s2 = accept_one();
	CHECK(!usmc_conn_info(c2, &info), "info");
	CHECK(info.mode == USMC_MODE_TCP && info.reason == USMC_REASON_MEM && info.peer_declined,
	      "client 2: TCP after a MEM decline expected, got %s %s", usmc_mode_name(info.mode),
	      usmc_reason_name(info.reason));
	send_all(c2, "tcp!", 4);
	recv_all(s2, buf, 4);
	CHECK(!memcmp(buf, "tcp!", 4), "data over the fallback");
	send_all(c1, "smc!", 4);
	recv_all(s1, buf, 4);
	CHECK(!memcmp(buf, "smc!", 4), "data over SMC-R");
	CHECK(!usmc_close(c1) && !usmc_close(s1) && !usmc_close(c2) && !usmc_close(s2), "close");
}

/* ---- server within its budget of registered memory ---- */

#define REGMEM_BUF     65536L
#define REGMEM_WAIT_MS 5000
#define REGMEM_BIG_RMB (2 * REGMEM_BUF)
#define REGMEM_BUDGET  (REGMEM_BIG_RMB + REGMEM_BUF) /* the second connection's */

/* The server's pools hold no claimed buffer (its connections fully gone). */
static bool regmem_server_idle(void)
{
	struct lgr_info info;
	uint32_t busy = 0;

	if (lgr_info_all(&cs->rdma, &info, 1) != 1)
		return false;
	for (int c = 0; c < SMC_BUF_CLASSES; c++)
		busy += info.rmbs[c].in_use + info.sndbufs[c].in_use;
	return !busy;
}

static void run_regmem(void)
{
	struct usmc_conn *c, *s;
	struct usmc_ctx_stats st;
	char buf[4];
	long waited = 0;

	CHECK(!usmc_ctx_setopt(cs, USMC_OPT_REG_MEM_MAX, REGMEM_BUDGET), "setopt REG_MEM_MAX");
	/* one link: a second registers every buffer again, on its own PD,
	 * and the budget is one link's (its try would count as refused).
	 * On the listener: it took its options from the context when it
	 * was made, and the server's handshakes read them there */
	CHECK(!usmc_listener_setopt(lst, USMC_OPT_MAX_LINKS, 1), "setopt MAX_LINKS");
	CHECK(!usmc_listener_setopt(lst, USMC_OPT_RMB_SIZE, REGMEM_BUF), "setopt RMB_SIZE");
	c = connect_b(cc);
	s = accept_one();
	expect_smcr(c, "client 1");
	CHECK(!usmc_close(c) && !usmc_close(s), "close 1");
	while (!regmem_server_idle() && waited < REGMEM_WAIT_MS) {
		usleep(10000);
		waited += 10;
	}
	CHECK(waited < REGMEM_WAIT_MS, "the server's first connection still holds its buffers");
	usmc_ctx_stats(cs, &st);
	CHECK(st.pinned_bytes == 2 * REGMEM_BUF && !st.pool_shrinks,
	      "pinned %llu shrinks %llu after one connection", (unsigned long long)st.pinned_bytes,
	      (unsigned long long)st.pool_shrinks);
	/* a larger RMB does not fit beside the idle buffers: they make room */
	CHECK(!usmc_listener_setopt(lst, USMC_OPT_RMB_SIZE, REGMEM_BIG_RMB), "setopt RMB_SIZE");
	c = connect_b(cc);
	s = accept_one();
	expect_smcr(c, "client 2");
	expect_smcr(s, "server 2");
	send_all(c, "smc!", 4);
	recv_all(s, buf, 4);
	CHECK(!memcmp(buf, "smc!", 4), "data over SMC-R");
	usmc_ctx_stats(cs, &st);
	CHECK(st.pinned_bytes <= REGMEM_BUDGET && st.pool_shrinks == 2 && !st.pinned_refused,
	      "pinned %llu of %ld, shrinks %llu, refused %llu", (unsigned long long)st.pinned_bytes,
	      REGMEM_BUDGET, (unsigned long long)st.pool_shrinks,
	      (unsigned long long)st.pinned_refused);
	CHECK(!usmc_close(c) && !usmc_close(s), "close 2");
}

/* ---- close with data still unsent: it all arrives, then EOF ---- */

static long linger_reader_delay_ms = 300; /* the client closes meanwhile */

static void *linger_reader(void *arg)
{
	struct usmc_conn *s = arg;
	static uint8_t buf[65536];
	uint64_t got = 0;

	expect_smcr(s, "server");
	usleep((useconds_t)linger_reader_delay_ms * 1000);
	for (;;) {
		ssize_t n = usmc_recv(s, buf, sizeof(buf), 0);
		long long bad;

		CHECK(n >= 0, "server recv after the peer's close: %s", usmc_strerror((int)n));
		if (!n)
			break;
		bad = pattern_check(7, got, buf, (size_t)n);
		CHECK(bad < 0, "data differs at %lld", bad);
		got += (uint64_t)n;
	}
	CHECK(got == nbytes, "got %llu of %llu before EOF", (unsigned long long)got,
	      (unsigned long long)nbytes);
	CHECK(!usmc_close(s), "server close");
	return NULL;
}

/* Send nbytes, close, let the reader check them all; returns how long the
 * close took. */
static double linger_run(void)
{
	struct usmc_conn *c = connect_b(cc);
	static uint8_t buf[65536];
	pthread_t th;
	double t0, took;

	pthread_create(&th, NULL, linger_reader, accept_one());
	expect_smcr(c, "client");
	for (uint64_t off = 0; off < nbytes; off += sizeof(buf)) {
		pattern_fill(7, off, buf, sizeof(buf));
		send_all(c, buf, sizeof(buf));
	}
	/* RMB and send buffer are full: close must linger until it is out */
	t0 = mono_s();
	CHECK(!usmc_close(c), "client close");
	took = mono_s() - t0;
	pthread_join(th, NULL);
	return took;
}

static void run_linger(void)
{
	linger_run();
}

/*
 * The reader starts only after the linger (USMC_OPT_LINGER_MS, 2 s) has
 * ended with a send buffer's worth unsent: usmc_close() returns then, and
 * the connection writes the rest when the reader makes room, its close
 * CDC behind it (Linux writes the rest after its close too,
 * net/smc/smc_close.c smc_close_active()); it used to abort instead, and
 * the reader got a reset after the first RMB.
 */
#define LINGER_LONG_READER_MS 3500

static void run_linger_long(void)
{
	long linger = 0;
	double took, t0;
	int fds0;

	CHECK(!usmc_ctx_getopt(cc, USMC_OPT_LINGER_MS, &linger), "linger option");
	CHECK(linger < LINGER_LONG_READER_MS - 1000,
	      "linger %ld ms: the reader must start after it", linger);
	linger_reader_delay_ms = LINGER_LONG_READER_MS;
	/* the link group's own descriptors first: they stay */
	CHECK(!usmc_close(connect_b(cc)) && !usmc_close(accept_one()), "first connection");
	fds0 = count_fds();
	took = linger_run();
	printf("  close returned after %.2f s (linger %ld ms); the reader got every byte, then EOF\n",
	       took, linger);
	CHECK(took >= linger / 1e3 - 0.05 && took < LINGER_LONG_READER_MS / 1e3 - 0.5,
	      "close took %.2f s: it lingers %ld ms, then returns", took, linger);
	/* the kept TCP socket was closed once the close CDC went out */
	t0 = mono_s();
	while (count_fds() > fds0 && mono_s() - t0 < 5)
		usleep(10000);
	CHECK(count_fds() <= fds0, "%d descriptors more than before", count_fds() - fds0);
}

/* ---- no common UEID ---- */

static void run_ueid(void)
{
	struct usmc_conn *c, *s;
	struct usmc_conn_info info;
	char buf[4];

	CHECK(!usmc_ctx_set_ueid(cc, "SOMETHING-ELSE"), "set UEID");
	c = connect_b(cc);
	s = accept_one();
	CHECK(!usmc_conn_info(c, &info), "info");
	/* as Linux: a UEID mismatch is declined with NOSMCDEV */
	CHECK(info.mode == USMC_MODE_TCP && info.reason == USMC_REASON_NOSMCDEV &&
		      info.peer_declined,
	      "client: TCP after a NOSMCDEV decline expected, got %s %s", usmc_mode_name(info.mode),
	      usmc_reason_name(info.reason));
	send_all(c, "tcp?", 4);
	recv_all(s, buf, 4);
	send_all(s, buf, 4);
	recv_all(c, buf, 4);
	CHECK(!memcmp(buf, "tcp?", 4), "data over the fallback");
	CHECK(!usmc_close(c) && !usmc_close(s), "close");
	expect_lgrs(0);
}

/* ---- a lying peer costs only its own connection ---- */

static void inject_cdc(struct usmc_conn *c, struct cdc_cursor prod, uint32_t token)
{
	struct cdc_msg m = {.seqno = 0x7fff, .token = token, .prod = prod};
	uint8_t buf[CDC_MSG_LEN];

	CHECK(cdc_encode(&m, buf, sizeof(buf)) == CDC_MSG_LEN, "encode");
	/* as if it came from the wire, through the progress thread's handler */
	c->smcr->lgr->ops->cdc_rx(c->smcr->lgr, buf, sizeof(buf));
}

static void run_liar(void)
{
	struct usmc_conn *c1 = connect_b(cc), *s1 = accept_one();
	struct usmc_conn *c2 = connect_b(cc), *s2 = accept_one();
	struct usmc_conn *c3 = connect_b(cc), *s3 = accept_one();
	uint32_t rmb = c1->smcr->rx.rmb_len;
	char buf[8];
	ssize_t n;

	expect_smcr(c1, "client 1");
	expect_smcr(c2, "client 2");
	CHECK(c1->smcr->lgr == c2->smcr->lgr && c2->smcr->lgr == c3->smcr->lgr, "one link group");
	/* unknown token: ignored */
	inject_cdc(c1, (struct cdc_cursor){0, 0}, c1->smcr->token ^ 0x100);
	/* cursor beyond the RMB: connection 1 ends with EPROTO */
	inject_cdc(c1, (struct cdc_cursor){0, rmb + 5}, c1->smcr->token);
	n = usmc_recv(c1, buf, sizeof(buf), 0);
	CHECK(n == -EPROTO, "cursor beyond the RMB: EPROTO expected, got %zd", n);
	/* valid count but two rings ahead of the consumer: connection 3 ends */
	inject_cdc(c3, (struct cdc_cursor){2, 0}, c3->smcr->token);
	n = usmc_recv(c3, buf, sizeof(buf), 0);
	CHECK(n == -EPROTO, "producer 2 rings ahead: EPROTO expected, got %zd", n);
	/* the others on the same link group are unharmed */
	send_all(c2, "fine", 4);
	recv_all(s2, buf, 4);
	send_all(s2, buf, 4);
	recv_all(c2, buf, 4);
	CHECK(!memcmp(buf, "fine", 4), "connection 2 still works");
	CHECK(!usmc_close(c1) && !usmc_close(c2) && !usmc_close(c3), "client close");
	CHECK(!usmc_close(s1) && !usmc_close(s2) && !usmc_close(s3), "server close");
}

int main(int argc, char **argv)
{
	const char *sc = argc > 1 ? argv[1] : "";

	signal(SIGPIPE, SIG_IGN);
	nbytes = (uint64_t)env_long("USMC_TEST_BYTES", 1 << 20);
	if (!strcmp(sc, "orphans")) {
		run_orphans();
		printf("PASS orphans\n");
		return 0;
	}
	if (!strcmp(sc, "killed")) {
		run_killed();
		printf("PASS killed\n");
		return 0;
	}
	if (!strcmp(sc, "orphankilled")) {
		run_orphan_killed();
		printf("PASS orphankilled\n");
		return 0;
	}
	setup();
	if (!strcmp(sc, "reuse")) {
		nconns = env_long("USMC_TEST_CONNS", 1000);
		run_reuse();
	} else if (!strcmp(sc, "concurrent")) {
		nconns = env_long("USMC_TEST_CONNS", 100);
		run_concurrent();
	} else if (!strcmp(sc, "halfclose")) {
		run_halfclose();
	} else if (!strcmp(sc, "unread")) {
		run_unread();
	} else if (!strcmp(sc, "abort")) {
		run_abort();
	} else if (!strcmp(sc, "testlink")) {
		run_testlink();
	} else if (!strcmp(sc, "idle")) {
		run_idle();
	} else if (!strcmp(sc, "linger")) {
		run_linger();
	} else if (!strcmp(sc, "lingerlong")) {
		nbytes = 128 * 1024; /* the peer's RMB and our send buffer: no blocking send */
		run_linger_long();
	} else if (!strcmp(sc, "ueid")) {
		run_ueid();
	} else if (!strcmp(sc, "liar")) {
		run_liar();
	} else if (!strcmp(sc, "nobufs")) {
		run_nobufs();
	} else if (!strcmp(sc, "regmem")) {
		run_regmem();
	} else if (!strcmp(sc, "rdmacut")) {
		run_rdmacut();
	} else if (!strcmp(sc, "lgrdown")) {
		run_lgrdown();
	} else if (!strcmp(sc, "peerexit")) {
		run_peerexit();
	} else if (!strcmp(sc, "api")) {
		run_api();
	} else {
		die("unknown scenario '%s'", sc);
	}
	teardown();
	printf("PASS %s\n", sc);
	return 0;
}
