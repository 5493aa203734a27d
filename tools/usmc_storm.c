// SPDX-License-Identifier: MIT
/*
 * usmc_storm - a storm of short-lived connections: C concurrent clients,
 * each connect -> 64-byte request -> 64-byte response -> close, in a loop
 * for D seconds. Reports requests/s, errors, connect-time p50/p99, and the
 * modes the connections ended in.
 *
 * The server is built in (one epoll thread) and the clients are
 * non-blocking state machines on a few threads, so the same code measures
 * every combination:
 *   --server usmc|plain|smc|none   usmc listener, plain sockets, the
 *                                  kernel's SMC (AF_SMC), or a remote one
 *   --client usmc|plain|smc|clc|none
 *       usmc   usmc_connect() with USMC_CONNECT_ASYNC: each client thread drives
 *              its connects' CLC handshakes from its own epoll loop, as
 *              usmc_connect_events() says (without an RDMA device: TCP, no
 *              CLC bytes)
 *       plain  plain sockets
 *       smc    the kernel's SMC: AF_SMC sockets, otherwise as plain
 *       clc    a simulated SMC client: plain socket that sends a Linux v2
 *              CLC PROPOSAL first and reads the DECLINE, then the request
 *              (each connection costs the server a real CLC handshake)
 *   -f  auto-fallback on the usmc listener (USMC_LISTEN_AUTO_FALLBACK)
 *   --conn-fd  a usmc server polls each connection's usmc_conn_fd() (a
 *              readiness socketpair per SMC-R connection, its completions
 *              run by the link group's thread) instead of the event API
 *              (usmc_ctx_event_fd() in its epoll set, usmc_ctx_poll(): the
 *              server's thread runs them, no socketpair)
 *
 * Server and clients in two processes (two hosts; tools/bench-storm-rxe.sh):
 *   --client none   serves until SIGINT/SIGTERM or for -d SECONDS, then
 *                   prints the server's counters;
 *   --server none   clients of ADDR:PORT; after the D seconds they start no
 *                   new connection and let those in flight finish (up to
 *                   DRAIN_MS; not counted in req/s; failures are errors, and
 *                   so are the unfinished ones, "abandoned"), so that the
 *                   remote server sees no connection cut short (their
 *                   link groups go at exit: the server still reads the
 *                   clean end of every connection, test_smcr_peerexit).
 * Modes: usmc ends count them in their context and listener; smc ends read
 * the kernel's SMC statistics (generic netlink, per network namespace, so
 * one storm at a time): SMC-R = the SMC-R handshakes the kernel completed
 * during the run, TCP = the other connections.
 *
 * usage: usmc_storm [-a ADDR] [-p PORT] [-c CLIENTS] [-d SECONDS]
 *                   [-t CLIENT_THREADS] [-b BACKLOG] [-f]
 *                   [--server KIND] [--client KIND] [--conn-fd]
 * Output: one line of key=value pairs (tools/bench-storm.sh and
 * tools/bench-storm-rxe.sh parse it).
 * Exit status: 0, 1 on a setup failure, 3 if any connection failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <usmc/usmc.h>

#include "clc.h" /* libusmc's wire codecs, to read the DECLINE */
#include "linux_proposal.h"
#include "mono_clock.h"
#include "smc_kstats.h"

#define MSG_SIZE	64
#define MAX_EVENTS	256
#define DEFAULT_PORT	7471
#define DEFAULT_CLIENTS 64
#define DEFAULT_SECONDS 5
#define DEFAULT_THREADS 2
#define DEFAULT_BACKLOG 4096
#define DECLINE_MAX	CLC_DECLINE_V2_LEN
#define SERVER_GRACE_MS 200
#define DRAIN_MS	10000
#define ERR_LOG_MAX	8 /* failures described on stderr, per process */

#ifndef AF_SMC
#define AF_SMC 43
#endif
#define SMCPROTO_SMC 0 /* the kernel's SMC over IPv4 */

enum kind { K_NONE, K_USMC, K_PLAIN, K_CLC, K_SMC };

static const char *const kind_names[] = {"none", "usmc", "plain", "clc", "smc"};

static struct {
	enum kind server, client;
	int clients, seconds, threads, backlog;
	bool auto_fallback;
	bool conn_fd; /* a usmc server polls each connection's usmc_conn_fd() */
	struct sockaddr_in addr;
} cfg = {.server = K_USMC,
	 .client = K_USMC,
	 .clients = DEFAULT_CLIENTS,
	 .seconds = DEFAULT_SECONDS,
	 .threads = DEFAULT_THREADS,
	 .backlog = DEFAULT_BACKLOG};

/* Separate contexts so that each side's counters are its own: the modes
 * come from the context and listener counters, not from usmc_conn_info()
 * per connection (two system calls each, which plain sockets would not
 * pay). */
static struct usmc_ctx *sctx, *cctx;
static atomic_bool stop_clients, stop_server;

static void die(const char *what, int err)
{
	fprintf(stderr, "usmc_storm: %s: %s\n", what, usmc_strerror(err));
	exit(1);
}

/* ---- failures: the first few described on stderr ------------------------- */

static atomic_int err_logged;
static uint64_t start_us; /* when the process started: err_log()'s clock */
/* The process's CPU time and context switches over the client run (both
 * ends when one process runs both: rows differ by what their ends cost) */
static struct rusage run_ru0, run_ru1;

static const char *addr_str(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
	char ip[INET_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_INET)
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
	snprintf(buf, len, "%s:%u", ip, ntohs(in->sin_port));
	return buf;
}

/* @rc: what the failed call returned (< 0: -errno, 0: end of stream,
 * > 0: bytes); usmc connections add their mode, fallback reason, link
 * group and byte counts from usmc_conn_info(). */
static void err_log(const char *side, const char *stage, struct usmc_conn *uc, int fd, long rc)
{
	struct sockaddr_storage local = {0}, peer = {0};
	socklen_t ll = sizeof(local), pl = sizeof(peer);
	char what[96], l[32], p[32];
	struct usmc_conn_info info;

	if (atomic_fetch_add(&err_logged, 1) >= ERR_LOG_MAX)
		return;
	if (rc < 0)
		snprintf(what, sizeof(what), "%ld (%s)", rc, usmc_strerror((int)rc));
	else
		snprintf(what, sizeof(what), rc ? "%ld unexpected bytes" : "end of stream", rc);
	if (uc && !usmc_conn_info(uc, &info)) {
		fprintf(stderr,
			"usmc_storm: %.3f s: %s %s -> %s: %s: %s; %s, reason %s%s, lgr %#x, "
			"sent %llu received %llu\n",
			(double)(mono_us() - start_us) / 1e6, side,
			addr_str(&info.local, l, sizeof(l)), addr_str(&info.peer, p, sizeof(p)),
			stage, what, usmc_mode_name(info.mode), usmc_reason_name(info.reason),
			info.peer_declined ? " (peer's)" : "", info.lgr_id,
			(unsigned long long)info.bytes_sent,
			(unsigned long long)info.bytes_received);
		return;
	}
	if (fd >= 0) {
		getsockname(fd, (struct sockaddr *)&local, &ll);
		getpeername(fd, (struct sockaddr *)&peer, &pl);
	}
	fprintf(stderr, "usmc_storm: %.3f s: %s %s -> %s: %s: %s\n",
		(double)(mono_us() - start_us) / 1e6, side, addr_str(&local, l, sizeof(l)),
		addr_str(&peer, p, sizeof(p)), stage, what);
}

/* ---- server: one epoll thread, usmc listener or plain socket ------------ */

struct sconn {
	struct usmc_conn *uc; /* usmc */
	int fd;
	uint8_t buf[MSG_SIZE];
	size_t got;
	bool answered;
	struct sconn *prev, *next; /* open connections, closed at the end */
};

static struct sconn *sconns;

static struct usmc_listener *ulst;
static int plain_lfd = -1;
static uint64_t srv_errors, srv_accepted, srv_reqs;

static ssize_t s_recv(struct sconn *s, void *b, size_t n)
{
	ssize_t r;

	if (s->uc)
		return usmc_recv(s->uc, b, n, 0);
	r = recv(s->fd, b, n, MSG_DONTWAIT);
	return r < 0 ? -errno : r;
}

static ssize_t s_send(struct sconn *s, const void *b, size_t n)
{
	ssize_t r;

	if (s->uc)
		return usmc_send(s->uc, b, n, 0);
	r = send(s->fd, b, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	return r < 0 ? -errno : r;
}

static void s_close(int ep, struct sconn *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		sconns = s->next;
	if (s->next)
		s->next->prev = s->prev;
	if (s->fd >= 0)
		epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
	if (s->uc)
		usmc_close(s->uc);
	else
		close(s->fd);
	free(s);
}

static struct sconn *s_accept(void)
{
	struct sconn *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (cfg.server != K_USMC) {
		s->fd = accept4(plain_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (s->fd >= 0)
			goto accepted;
	} else if (!usmc_accept(ulst, USMC_NONBLOCK, &s->uc)) {
		/* the event API's watch, or the connection's own descriptor */
		s->fd = cfg.conn_fd ? usmc_conn_fd(s->uc) : -1;
		if (!cfg.conn_fd && usmc_conn_watch(s->uc, USMC_EV_READ, s)) {
			usmc_close(s->uc);
			free(s);
			return NULL;
		}
		goto accepted;
	}
	free(s);
	return NULL;
accepted:
	srv_accepted++;
	return s;
}

/* A failure the clients' stop did not cause. */
static void srv_error(struct sconn *s, const char *stage, ssize_t rc)
{
	if (atomic_load(&stop_clients))
		return;
	srv_errors++;
	err_log("server", stage, s->uc, s->uc ? -1 : s->fd, (long)rc);
}

/* Read the request, answer it, then wait for the client's close. */
static void s_event(int ep, struct sconn *s)
{
	for (;;) {
		ssize_t n;

		if (s->answered) {
			n = s_recv(s, s->buf, MSG_SIZE);
			if (n == -EAGAIN)
				return;
			if (n != 0) /* bytes after the request, or a reset */
				srv_error(s, "after the answer", n);
			s_close(ep, s);
			return;
		}
		n = s_recv(s, s->buf + s->got, MSG_SIZE - s->got);
		if (n == -EAGAIN)
			return;
		if (n <= 0) {
			srv_error(s, "reading the request", n);
			s_close(ep, s);
			return;
		}
		s->got += (size_t)n;
		if (s->got < MSG_SIZE)
			continue;
		n = s_send(s, s->buf, MSG_SIZE);
		if (n != MSG_SIZE) {
			srv_error(s, "sending the answer", n);
			s_close(ep, s);
			return;
		}
		s->answered = true;
		srv_reqs++;
	}
}

/* Plain sockets and the kernel's SMC differ only in the family. */
static int kernel_socket(enum kind k)
{
	int type = SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC;

	return k == K_SMC ? socket(AF_SMC, type, SMCPROTO_SMC) : socket(AF_INET, type, 0);
}

static int server_open(void)
{
	int one = 1, rc;
	unsigned int flags =
		USMC_LISTEN_NONBLOCK | (cfg.auto_fallback ? USMC_LISTEN_AUTO_FALLBACK : 0);

	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (cfg.server == K_USMC) {
		rc = usmc_listen(sctx, (struct sockaddr *)&cfg.addr, sizeof(cfg.addr), cfg.backlog,
				 flags, &ulst);
		if (rc)
			die("usmc_listen", rc);
		usmc_listener_addr(ulst, &ss, &len);
		/* -p 0: the clients connect to the port the listener got */
		cfg.addr.sin_port = ((struct sockaddr_in *)&ss)->sin_port;
		return usmc_listener_fd(ulst);
	}
	plain_lfd = kernel_socket(cfg.server);
	if (plain_lfd < 0)
		die("socket", -errno);
	setsockopt(plain_lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(plain_lfd, (struct sockaddr *)&cfg.addr, sizeof(cfg.addr)) ||
	    listen(plain_lfd, cfg.backlog))
		die("listen", -errno);
	getsockname(plain_lfd, (struct sockaddr *)&ss, &len);
	cfg.addr.sin_port = ((struct sockaddr_in *)&ss)->sin_port;
	return plain_lfd;
}

/* Every connection the listener has, each in the server's epoll set or
 * watched in the event API's. */
static void s_accept_all(int ep)
{
	struct sconn *s;

	while ((s = s_accept())) {
		struct epoll_event cev = {.events = EPOLLIN, .data.ptr = s};
		int one = 1;

		/* a usmc connection's fd is its readiness descriptor: the
		 * option goes to its TCP socket (no effect on the SMC-R data
		 * path, one system call) */
		if (s->uc)
			usmc_conn_setsockopt(s->uc, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		else
			setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (s->fd >= 0)
			epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &cev);
		s->next = sconns;
		if (sconns)
			sconns->prev = s;
		sconns = s;
	}
}

/* The event API's turn: the usmc listener's connections and the watched
 * ones that are readable (usmc_ctx_poll() runs the SMC-R completions). */
static void s_usmc_events(int ep)
{
	struct usmc_event uev[MAX_EVENTS];
	int n = usmc_ctx_poll(sctx, uev, MAX_EVENTS, 0);

	for (int i = 0; i < n; i++)
		if (uev[i].listener)
			s_accept_all(ep);
		else
			s_event(ep, uev[i].user);
}

static void *server_main(void *arg)
{
	int lfd = *(int *)arg, ep = epoll_create1(EPOLL_CLOEXEC);
	bool api = cfg.server == K_USMC && !cfg.conn_fd;
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, evs[MAX_EVENTS];
	int rc;

	if (api) { /* the context's descriptor stands for the listener and the connections */
		lfd = usmc_ctx_event_fd(sctx);
		rc = lfd < 0 ? lfd : usmc_listener_watch(ulst, USMC_EV_ACCEPT, NULL);
		if (rc)
			die("the event API", rc);
	}
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	while (!atomic_load(&stop_server)) {
		int n = epoll_wait(ep, evs, MAX_EVENTS, 50);

		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr)
				s_event(ep, evs[i].data.ptr);
			else if (api)
				s_usmc_events(ep);
			else
				s_accept_all(ep);
		}
	}
	while (sconns)
		s_close(ep, sconns);
	close(ep);
	return NULL;
}

/* ---- clients: non-blocking state machines ------------------------------- */

enum cstate { C_CONNECTING, C_DECLINE, C_RESPONSE };

static const char *const cstate_names[] = {"connecting", "reading the DECLINE",
					   "reading the answer"};

struct cslot {
	struct usmc_conn *uc;
	int fd;
	enum cstate st;
	uint32_t watched; /* the epoll events @fd is registered with */
	uint64_t due_us;  /* usmc connecting: finish by then at the latest (0: no limit) */
	long err;	  /* what the failed call returned */
	uint64_t t0;
	uint8_t buf[DECLINE_MAX];
	size_t got, want;
};

struct cthread {
	pthread_t t;
	int nslots;
	struct cslot *slots;
	bool draining; /* after the D seconds (client-only runs) */
	uint64_t reqs, errors, declined_busy, connects, drained, abandoned;
	uint32_t *lat; /* connect times, us */
	size_t nlat, cap;
};

static void lat_add(struct cthread *ct, uint64_t us)
{
	if (ct->nlat == ct->cap) {
		size_t cap = ct->cap ? 2 * ct->cap : 65536;
		uint32_t *p = realloc(ct->lat, cap * sizeof(*p));

		if (!p)
			return;
		ct->lat = p;
		ct->cap = cap;
	}
	ct->lat[ct->nlat++] = (uint32_t)(us > UINT32_MAX ? UINT32_MAX : us);
}

static void c_close(int ep, struct cslot *s)
{
	if (s->fd < 0)
		return;
	epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
	if (s->uc)
		usmc_close(s->uc);
	else
		close(s->fd);
	s->uc = NULL;
	s->fd = -1;
}

static int c_watch(int ep, struct cslot *s, uint32_t events, int op)
{
	struct epoll_event ev = {.events = events, .data.ptr = s};

	s->watched = events;
	return epoll_ctl(ep, op, s->fd, &ev);
}

/* A failure of the connection in @s: what the failed call returned. */
static bool c_fail(struct cslot *s, long rc)
{
	s->err = rc;
	return false;
}

/* Start a new connection in @s; false on an immediate failure. */
static bool c_start(int ep, struct cslot *s)
{
	int rc;

	s->t0 = mono_us();
	s->st = C_CONNECTING;
	s->got = 0;
	s->due_us = 0;
	if (cfg.client == K_USMC) {
		rc = usmc_connect(cctx, (struct sockaddr *)&cfg.addr, sizeof(cfg.addr),
				  USMC_NONBLOCK | USMC_CONNECT_ASYNC, &s->uc);
		if (rc)
			return c_fail(s, rc);
		s->fd = usmc_conn_fd(s->uc);
	} else {
		s->fd = kernel_socket(cfg.client);
		if (s->fd < 0)
			return c_fail(s, -errno);
		if (connect(s->fd, (struct sockaddr *)&cfg.addr, sizeof(cfg.addr)) &&
		    errno != EINPROGRESS) {
			rc = -errno;
			close(s->fd);
			s->fd = -1;
			return c_fail(s, rc);
		}
	}
	return !c_watch(ep, s, EPOLLOUT, EPOLL_CTL_ADD) || c_fail(s, -errno);
}

static ssize_t c_send(struct cslot *s, const void *b, size_t n)
{
	ssize_t r;

	if (s->uc)
		return usmc_send(s->uc, b, n, 0);
	r = send(s->fd, b, n, MSG_NOSIGNAL);
	return r < 0 ? -errno : r;
}

static ssize_t c_recv(struct cslot *s, void *b, size_t n)
{
	ssize_t r;

	if (s->uc)
		return usmc_recv(s->uc, b, n, 0);
	r = recv(s->fd, b, n, MSG_DONTWAIT);
	return r < 0 ? -errno : r;
}

/* The connection is up in its final mode: count it, send the request. */
static bool c_established(int ep, struct cthread *ct, struct cslot *s)
{
	uint8_t req[MSG_SIZE];
	ssize_t n;

	lat_add(ct, mono_us() - s->t0);
	ct->connects++;
	memset(req, 'q', sizeof(req));
	n = c_send(s, req, sizeof(req));
	if (n != MSG_SIZE)
		return c_fail(s, n);
	s->st = C_RESPONSE;
	s->got = 0;
	s->want = MSG_SIZE;
	return !c_watch(ep, s, EPOLLIN, EPOLL_CTL_MOD) || c_fail(s, -errno);
}

/* An SMC-R connection is polled through another descriptor than its TCP
 * socket: watch the one usmc_conn_fd() gives once it is established. */
static bool c_refresh_fd(int ep, struct cslot *s)
{
	int fd = usmc_conn_fd(s->uc);

	if (fd == s->fd)
		return true;
	epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
	s->fd = fd;
	return !c_watch(ep, s, EPOLLOUT, EPOLL_CTL_ADD);
}

/* A usmc connect still in progress: watch what usmc_connect_events() says
 * (POLLOUT for the TCP connect, POLLIN for the server's CLC answer) and
 * finish it by its deadline at the latest (c_due()). */
static bool c_rewatch(int ep, struct cslot *s)
{
	int ms, ev = usmc_connect_events(s->uc, &ms);
	uint32_t want;

	if (ev < 0)
		return c_fail(s, ev);
	want = (ev & POLLIN ? EPOLLIN : 0) | (ev & POLLOUT ? EPOLLOUT : 0);
	s->due_us = ms < 0 ? 0 : mono_us() + (uint64_t)ms * 1000u + (ms ? 0 : 1);
	if (want == s->watched)
		return true;
	return !c_watch(ep, s, want, EPOLL_CTL_MOD) || c_fail(s, -errno);
}

static bool c_connected(int ep, struct cthread *ct, struct cslot *s)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (s->uc) {
		int rc = usmc_connect_finish(s->uc);

		if (rc == -EINPROGRESS)
			return c_rewatch(ep, s);
		s->due_us = 0;
		if (rc)
			return c_fail(s, rc);
		if (!c_refresh_fd(ep, s))
			return c_fail(s, -errno);
	} else if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		return c_fail(s, err ? -err : -errno);
	}
	if (cfg.client != K_CLC)
		return c_established(ep, ct, s);
	if (c_send(s, linux_v2_proposal, sizeof(linux_v2_proposal)) !=
	    (ssize_t)sizeof(linux_v2_proposal))
		return c_fail(s, -EIO);
	s->st = C_DECLINE;
	s->want = CLC_HDR_LEN;
	return !c_watch(ep, s, EPOLLIN, EPOLL_CTL_MOD) || c_fail(s, -errno);
}

/* Returns false on error; true also when more bytes are needed. */
static bool c_readable(int ep, struct cthread *ct, struct cslot *s)
{
	for (;;) {
		ssize_t n = c_recv(s, s->buf + s->got, s->want - s->got);

		if (n == -EAGAIN)
			return true;
		if (n <= 0)
			return c_fail(s, n);
		s->got += (size_t)n;
		if (s->got < s->want)
			continue;
		if (s->st == C_RESPONSE) {
			if (ct->draining)
				ct->drained++;
			else
				ct->reqs++;
			c_close(ep, s);
			return true;
		}
		/* DECLINE: header first, then the rest by its length */
		if (s->want == CLC_HDR_LEN) {
			struct clc_hdr h;

			if (clc_hdr_decode(s->buf, CLC_HDR_LEN, &h) || h.type != CLC_DECLINE)
				return c_fail(s, -EPROTO);
			s->want = h.length; /* clc_hdr_decode() bounds it by DECLINE_MAX */
			continue;
		}
		struct clc_decline d;

		if (clc_decline_decode(s->buf, s->got, &d))
			return c_fail(s, -EPROTO);
		if (d.diagnosis == USMC_REASON_SERVER_BUSY)
			ct->declined_busy++;
		return c_established(ep, ct, s);
	}
}

/* One step of @s (an event, or its connect's deadline); a finished slot
 * starts over unless draining. */
static void c_step(int ep, struct cthread *ct, struct cslot *s)
{
	bool ok = s->st == C_CONNECTING ? c_connected(ep, ct, s) : c_readable(ep, ct, s);

	if (!ok) {
		ct->errors++;
		err_log("client", cstate_names[s->st], s->uc, s->fd, s->err);
		c_close(ep, s);
	}
	if (s->fd < 0 && !ct->draining && !atomic_load(&stop_clients) && !c_start(ep, s)) {
		ct->errors++;
		err_log("client", "starting a connection", NULL, -1, s->err);
	}
}

/* How long epoll may sleep: 50 ms, or less up to the nearest connect
 * deadline (usmc_connect_events()). */
static int c_timeout(const struct cthread *ct)
{
	uint64_t now = mono_us(), next = now + 50000;

	for (int i = 0; i < ct->nslots; i++) {
		const struct cslot *s = &ct->slots[i];

		if (s->fd >= 0 && s->st == C_CONNECTING && s->due_us && s->due_us < next)
			next = s->due_us;
	}
	return next > now ? (int)((next - now + 999) / 1000) : 0;
}

/* One round of events, then the connects whose deadline has come. */
static void c_round(int ep, struct cthread *ct)
{
	struct epoll_event evs[MAX_EVENTS];
	int n = epoll_wait(ep, evs, MAX_EVENTS, c_timeout(ct));
	uint64_t now;

	for (int i = 0; i < n; i++)
		c_step(ep, ct, evs[i].data.ptr);
	now = mono_us();
	for (int i = 0; i < ct->nslots; i++) {
		struct cslot *s = &ct->slots[i];

		if (s->fd >= 0 && s->st == C_CONNECTING && s->due_us && s->due_us <= now)
			c_step(ep, ct, s);
	}
}

static int c_open_slots(const struct cslot *slots, int n)
{
	int open = 0;

	for (int i = 0; i < n; i++)
		open += slots[i].fd >= 0;
	return open;
}

/* Client-only runs: let the connections in flight finish (see the top). */
static void c_drain(int ep, struct cthread *ct, struct cslot *slots)
{
	uint64_t deadline = mono_us() + DRAIN_MS * 1000u;
	int open;

	ct->draining = true;
	while ((open = c_open_slots(slots, ct->nslots)) && mono_us() < deadline)
		c_round(ep, ct);
	ct->abandoned = (uint64_t)open;
	ct->errors += (uint64_t)open;
	for (int i = 0; i < ct->nslots; i++)
		if (slots[i].fd >= 0)
			err_log("client", "abandoned (did not finish in DRAIN_MS)", slots[i].uc,
				slots[i].fd, -ETIMEDOUT);
}

static void *client_main(void *arg)
{
	struct cthread *ct = arg;
	struct cslot *slots = calloc((size_t)ct->nslots, sizeof(*slots));
	int ep = epoll_create1(EPOLL_CLOEXEC);

	ct->slots = slots;
	for (int i = 0; i < ct->nslots; i++) {
		slots[i].fd = -1;
		if (!c_start(ep, &slots[i]))
			ct->errors++;
	}
	while (!atomic_load(&stop_clients))
		c_round(ep, ct);
	if (cfg.server == K_NONE)
		c_drain(ep, ct, slots);
	for (int i = 0; i < ct->nslots; i++)
		c_close(ep, &slots[i]); /* in flight at the end: not counted */
	close(ep);
	ct->slots = NULL;
	free(slots);
	return NULL;
}

/* ---- the kernel's SMC statistics (generic netlink) ----------------------- */

static struct smc_kstats kstats0; /* at the start of the run */

/* The kernel's SMC counters of this network namespace; dies without them. */
static void kstats_read(struct smc_kstats *ks)
{
	int rc = smc_kstats_read(ks);

	if (rc)
		die("the kernel's SMC statistics (modprobe smc?)", -rc);
}

static bool uses_kernel_smc(void)
{
	return cfg.server == K_SMC || cfg.client == K_SMC;
}

/* ---- main ----------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static enum kind parse_kind(const char *s)
{
	for (int k = K_NONE; k <= K_SMC; k++)
		if (!strcmp(s, kind_names[k]))
			return (enum kind)k;
	fprintf(stderr, "usmc_storm: unknown kind '%s'\n", s);
	exit(2);
}

static void parse_args(int argc, char **argv)
{
	static const struct option lo[] = {{"server", required_argument, NULL, 'S'},
					   {"client", required_argument, NULL, 'C'},
					   {"conn-fd", no_argument, NULL, 'F'},
					   {NULL, 0, NULL, 0}};
	int opt;

	cfg.addr.sin_family = AF_INET;
	cfg.addr.sin_port = htons(DEFAULT_PORT);
	cfg.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	while ((opt = getopt_long(argc, argv, "a:p:c:d:t:b:f", lo, NULL)) != -1) {
		switch (opt) {
		case 'a':
			if (inet_pton(AF_INET, optarg, &cfg.addr.sin_addr) != 1)
				goto usage;
			break;
		case 'p':
			cfg.addr.sin_port = htons((uint16_t)atoi(optarg));
			break;
		case 'c':
			cfg.clients = atoi(optarg);
			break;
		case 'd':
			cfg.seconds = atoi(optarg);
			break;
		case 't':
			cfg.threads = atoi(optarg);
			break;
		case 'b':
			cfg.backlog = atoi(optarg);
			break;
		case 'f':
			cfg.auto_fallback = true;
			break;
		case 'F':
			cfg.conn_fd = true;
			break;
		case 'S':
			cfg.server = parse_kind(optarg);
			break;
		case 'C':
			cfg.client = parse_kind(optarg);
			break;
		default:
			goto usage;
		}
	}
	if (cfg.clients < 1 || cfg.seconds < 1 || cfg.threads < 1 || cfg.server == K_CLC ||
	    (cfg.server == K_NONE && cfg.client == K_NONE))
		goto usage;
	if (cfg.threads > cfg.clients)
		cfg.threads = cfg.clients;
	return;
usage:
	fprintf(stderr, "usage: usmc_storm [-a ADDR] [-p PORT] [-c CLIENTS] [-d SECONDS] "
			"[-t CLIENT_THREADS] [-b BACKLOG] [-f] [--server usmc|plain|smc|none] "
			"[--client usmc|plain|smc|clc|none] [--conn-fd]\n");
	exit(2);
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void sleep_s(int s)
{
	struct timespec ts = {s, 0};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static double tv_us(const struct timeval *tv)
{
	return (double)tv->tv_sec * 1e6 + (double)tv->tv_usec;
}

/* CPU time (user and system) of the process over the client run, in us. */
static double run_cpu_us(void)
{
	return tv_us(&run_ru1.ru_utime) + tv_us(&run_ru1.ru_stime) - tv_us(&run_ru0.ru_utime) -
	       tv_us(&run_ru0.ru_stime);
}

/* Context switches (voluntary: a sleep; involuntary: preempted) over it. */
static double run_csw(void)
{
	return (double)(run_ru1.ru_nvcsw + run_ru1.ru_nivcsw - run_ru0.ru_nvcsw -
			run_ru0.ru_nivcsw);
}

/* Prints the clients' part of the result line; returns their errors. */
static uint64_t report_clients(const struct cthread *ct, uint64_t elapsed_us,
			       const struct smc_kstats *ks)
{
	uint64_t reqs = 0, errors = 0, busy = 0, connects = 0, drained = 0, abandoned = 0;
	uint64_t smcr = 0, tcp = 0, hs_err = 0;
	struct usmc_ctx_stats cs = {0};
	size_t nlat = 0, k = 0;
	uint32_t *lat;

	for (int i = 0; i < cfg.threads; i++) {
		reqs += ct[i].reqs;
		errors += ct[i].errors;
		busy += ct[i].declined_busy;
		connects += ct[i].connects;
		drained += ct[i].drained;
		abandoned += ct[i].abandoned;
		nlat += ct[i].nlat;
	}
	lat = malloc((nlat ? nlat : 1) * sizeof(*lat));
	for (int i = 0; i < cfg.threads; i++) {
		memcpy(lat + k, ct[i].lat, ct[i].nlat * sizeof(*lat));
		k += ct[i].nlat;
	}
	qsort(lat, nlat, sizeof(*lat), cmp_u32);
	if (cctx) { /* usmc clients */
		usmc_ctx_stats(cctx, &cs);
		smcr = cs.smcr;
		tcp = cs.fallbacks;
		hs_err = cs.hs_errors;
	} else if (cfg.client == K_SMC) {
		smcr = smc_kstats_delta(ks->clnt_smcr, kstats0.clnt_smcr);
		tcp = connects > smcr ? connects - smcr : 0;
		hs_err = smc_kstats_delta(ks->clnt_hs_err, kstats0.clnt_hs_err);
	}
	printf(" clients=%d secs=%d reqs=%llu req_per_s=%.0f errors=%llu connect_p50_us=%u "
	       "connect_p99_us=%u client_smcr=%llu client_tcp=%llu client_hs_errors=%llu "
	       "lgrs_created=%llu declined_busy=%llu drained=%llu abandoned=%llu llc_sent=%llu "
	       "llc_received=%llu cpu_us_per_req=%.1f csw_per_req=%.2f",
	       cfg.clients, cfg.seconds, (unsigned long long)reqs, reqs * 1e6 / (double)elapsed_us,
	       (unsigned long long)errors, nlat ? lat[nlat / 2] : 0,
	       nlat ? lat[nlat * 99 / 100] : 0, (unsigned long long)smcr, (unsigned long long)tcp,
	       (unsigned long long)hs_err, (unsigned long long)cs.lgrs_created,
	       (unsigned long long)busy, (unsigned long long)drained, (unsigned long long)abandoned,
	       (unsigned long long)cs.llc_sent, (unsigned long long)cs.llc_received,
	       reqs ? run_cpu_us() / (double)reqs : 0.0, reqs ? run_csw() / (double)reqs : 0.0);
	free(lat);
	return errors;
}

/* The bound (us) below which a fraction @q of the listener's handshakes
 * ended (usmc_listener_stats().hs_time_hist: bucket i holds [2^i, 2^(i+1))
 * us, bucket 0 below 2 us); 0 without handshakes. */
static uint64_t hs_time_quantile_us(const struct usmc_listener_stats *st, double q)
{
	uint64_t total = 0, seen = 0;

	for (int i = 0; i < USMC_HS_HIST_BUCKETS; i++)
		total += st->hs_time_hist[i];
	for (int i = 0; i < USMC_HS_HIST_BUCKETS && total; i++) {
		seen += st->hs_time_hist[i];
		if ((double)seen >= q * (double)total)
			return 2ull << i;
	}
	return 0;
}

/* Prints the server's part of the result line; returns its errors. */
static uint64_t report_server(const struct smc_kstats *ks)
{
	struct usmc_listener_stats st = {0};
	struct usmc_ctx_stats cs = {0};
	uint64_t smcr = 0, tcp = srv_accepted, hs_err = 0;

	if (ulst) {
		usmc_listener_stats(ulst, &st);
		usmc_ctx_stats(sctx, &cs);
		smcr = st.smcr;
		tcp = st.fallbacks;
		hs_err = st.hs_failed;
	} else if (cfg.server == K_SMC) {
		smcr = smc_kstats_delta(ks->srv_smcr, kstats0.srv_smcr);
		tcp = srv_accepted > smcr ? srv_accepted - smcr : 0;
		hs_err = smc_kstats_delta(ks->srv_hs_err, kstats0.srv_hs_err);
	}
	printf(" srv_accepted=%llu srv_reqs=%llu srv_smcr=%llu srv_tcp=%llu srv_congested=%llu "
	       "srv_errors=%llu hs_failed=%llu hs_queue_high=%u backlog_full=%llu "
	       "listen_drops=%llu accept_uring=%d srv_lgrs_created=%llu srv_llc_sent=%llu "
	       "srv_llc_received=%llu srv_budget=%llu srv_hs_p50_us=%llu srv_hs_p99_us=%llu",
	       (unsigned long long)srv_accepted, (unsigned long long)srv_reqs,
	       (unsigned long long)smcr, (unsigned long long)tcp,
	       (unsigned long long)st.congestion_fallbacks, (unsigned long long)srv_errors,
	       (unsigned long long)hs_err, st.hs_queue_high, (unsigned long long)st.backlog_full,
	       (unsigned long long)st.listen_drops, st.accept_uring,
	       (unsigned long long)cs.lgrs_created, (unsigned long long)cs.llc_sent,
	       (unsigned long long)cs.llc_received, (unsigned long long)st.budget_fallbacks,
	       (unsigned long long)hs_time_quantile_us(&st, 0.5),
	       (unsigned long long)hs_time_quantile_us(&st, 0.99));
	return srv_errors;
}

/* Prints the result line; returns the number of errors on both sides. */
static uint64_t report(const struct cthread *ct, uint64_t elapsed_us)
{
	struct smc_kstats ks = {0};
	uint64_t errors = 0;
	struct usmc_ctx *uctx = sctx ? sctx : cctx;

	if (uses_kernel_smc())
		kstats_read(&ks);
	printf("server=%s%s client=%s kernel_compat=%d", kind_names[cfg.server],
	       cfg.auto_fallback ? "-af" : "", kind_names[cfg.client],
	       uctx ? usmc_ctx_kernel_compat(uctx) : -1);
	if (ct)
		errors += report_clients(ct, elapsed_us, &ks);
	if (cfg.server != K_NONE)
		errors += report_server(&ks);
	printf("\n");
	fflush(stdout);
	return errors;
}

/* Close everything, so that leak checkers see a clean exit. */
static int shutdown_all(void)
{
	int rc = 0;

	if (ulst)
		rc = usmc_listener_close(ulst);
	if (plain_lfd >= 0)
		close(plain_lfd);
	if (!rc && sctx)
		rc = usmc_ctx_destroy(sctx);
	if (!rc && cctx)
		rc = usmc_ctx_destroy(cctx);
	if (rc)
		fprintf(stderr, "usmc_storm: shutdown: %s\n", usmc_strerror(rc));
	return rc ? 1 : 0;
}

/* A context per usmc end, none for the others (a context may load the
 * kernel-compat BPF program, which every socket of the cgroup then runs). */
static void contexts_create(void)
{
	int rc = 0;

	if (cfg.server == K_USMC)
		rc = usmc_ctx_create(&sctx);
	if (!rc && cfg.client == K_USMC)
		rc = usmc_ctx_create(&cctx);
	if (rc) {
		char msg[160];

		if (rc == -EINVAL && usmc_env_check(msg, sizeof(msg)))
			fprintf(stderr, "usmc_ctx_create: %s\n", msg);
		die("usmc_ctx_create", rc);
	}
	/* A kernel-compatible listener decides by the SYN option, which the
	 * simulated clients do not send: it would take their PROPOSAL for
	 * data. They simulate clients of the userspace-only rule. */
	if (cfg.client == K_CLC && sctx && usmc_ctx_kernel_compat(sctx) == 1)
		die("--client clc needs a listener on the userspace-only rule "
		    "(USMC_KERNEL_COMPAT=0)",
		    -EINVAL);
}

/* Server only: SIGINT and SIGTERM end the run (blocked in every thread,
 * the library's included, and taken with sigtimedwait()). */
static void stop_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, set, NULL);
}

static int serve_only(pthread_t srv, const sigset_t *stop)
{
	struct timespec ts = {cfg.seconds, 0};
	uint64_t errors;
	int rc;

	while (sigtimedwait(stop, NULL, &ts) < 0 && errno == EINTR)
		;
	atomic_store(&stop_server, true);
	pthread_join(srv, NULL);
	errors = report(NULL, 0);
	rc = shutdown_all();
	return rc ? rc : errors ? 3 : 0;
}

int main(int argc, char **argv)
{
	struct cthread *ct;
	pthread_t srv;
	sigset_t stop;
	uint64_t t0, elapsed, errors;
	int lfd, rc;

	start_us = mono_us();
	parse_args(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	if (cfg.client == K_NONE)
		stop_signals(&stop);
	raise_nofile();
	contexts_create();
	if (uses_kernel_smc())
		kstats_read(&kstats0);
	if (cfg.server != K_NONE) {
		lfd = server_open();
		pthread_create(&srv, NULL, server_main, &lfd);
	}
	if (cfg.client == K_NONE) /* server only: until a signal or the duration */
		return serve_only(srv, &stop);
	ct = calloc((size_t)cfg.threads, sizeof(*ct));
	getrusage(RUSAGE_SELF, &run_ru0);
	t0 = mono_us();
	for (int i = 0; i < cfg.threads; i++) {
		ct[i].nslots = cfg.clients / cfg.threads + (i < cfg.clients % cfg.threads);
		pthread_create(&ct[i].t, NULL, client_main, &ct[i]);
	}
	sleep_s(cfg.seconds);
	atomic_store(&stop_clients, true);
	elapsed = mono_us() - t0;
	getrusage(RUSAGE_SELF, &run_ru1);
	for (int i = 0; i < cfg.threads; i++)
		pthread_join(ct[i].t, NULL);
	if (cfg.server != K_NONE) {
		struct timespec g = {0, SERVER_GRACE_MS * 1000000L};

		nanosleep(&g, NULL);
		atomic_store(&stop_server, true);
		pthread_join(srv, NULL);
	}
	errors = report(ct, elapsed);
	for (int i = 0; i < cfg.threads; i++)
		free(ct[i].lat);
	free(ct);
	rc = shutdown_all();
	return rc ? rc : errors ? 3 : 0; /* 3: the storm saw errors */
}
