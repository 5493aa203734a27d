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
 *   --server usmc|plain|none   usmc listener, plain sockets, or a remote one
 *   --client usmc|plain|clc|none
 *       usmc   usmc_connect() (without an RDMA device: TCP, no CLC bytes)
 *       plain  plain sockets
 *       clc    a simulated SMC client: plain socket that sends a Linux v2
 *              CLC PROPOSAL first and reads the DECLINE, then the request
 *              (each connection costs the server a real CLC handshake)
 *   -f  auto-fallback on the usmc listener (USMC_LISTEN_AUTO_FALLBACK)
 *
 * usage: usmc_storm [-a ADDR] [-p PORT] [-c CLIENTS] [-d SECONDS]
 *                   [-t CLIENT_THREADS] [-b BACKLOG] [-f]
 *                   [--server KIND] [--client KIND]
 * Output: one line of key=value pairs (tools/bench-storm.sh parses it).
 * Exit status: 0, 1 on a setup failure, 3 if any connection failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#include "common/linux_proposal.h"

#define MSG_SIZE	 64
#define MAX_EVENTS	 256
#define DEFAULT_PORT	 7471
#define DEFAULT_CLIENTS	 64
#define DEFAULT_SECONDS	 5
#define DEFAULT_THREADS	 2
#define DEFAULT_BACKLOG	 4096
#define CLC_HDR_LEN	 8
#define DECLINE_MAX	 64
#define DIAG_OFF	 16
#define DIAG_SERVER_BUSY 0x0a000003u
#define SERVER_GRACE_MS	 200

enum kind { K_NONE, K_USMC, K_PLAIN, K_CLC };

static const char *const kind_names[] = {"none", "usmc", "plain", "clc"};

static struct {
	enum kind server, client;
	int clients, seconds, threads, backlog;
	bool auto_fallback;
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

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "usmc_storm: %s: %s\n", what, usmc_strerror(err));
	exit(1);
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
static uint64_t srv_errors;

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
	if (cfg.server == K_PLAIN) {
		s->fd = accept4(plain_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (s->fd >= 0)
			return s;
	} else if (!usmc_accept(ulst, USMC_NONBLOCK, &s->uc)) {
		s->fd = usmc_conn_fd(s->uc);
		return s;
	}
	free(s);
	return NULL;
}

/* A failure the clients' stop did not cause. */
static void srv_error(void)
{
	if (!atomic_load(&stop_clients))
		srv_errors++;
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
			if (n != 0)
				srv_error(); /* bytes after the request, or a reset */
			s_close(ep, s);
			return;
		}
		n = s_recv(s, s->buf + s->got, MSG_SIZE - s->got);
		if (n == -EAGAIN)
			return;
		if (n <= 0) {
			srv_error();
			s_close(ep, s);
			return;
		}
		s->got += (size_t)n;
		if (s->got < MSG_SIZE)
			continue;
		if (s_send(s, s->buf, MSG_SIZE) != MSG_SIZE) {
			srv_error();
			s_close(ep, s);
			return;
		}
		s->answered = true;
	}
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
	plain_lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	setsockopt(plain_lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(plain_lfd, (struct sockaddr *)&cfg.addr, sizeof(cfg.addr)) ||
	    listen(plain_lfd, cfg.backlog))
		die("listen", -errno);
	getsockname(plain_lfd, (struct sockaddr *)&ss, &len);
	cfg.addr.sin_port = ((struct sockaddr_in *)&ss)->sin_port;
	return plain_lfd;
}

static void *server_main(void *arg)
{
	int lfd = *(int *)arg, ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, evs[MAX_EVENTS];

	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	while (!atomic_load(&stop_server)) {
		int n = epoll_wait(ep, evs, MAX_EVENTS, 50);

		for (int i = 0; i < n; i++) {
			struct sconn *s;

			if (evs[i].data.ptr) {
				s_event(ep, evs[i].data.ptr);
				continue;
			}
			while ((s = s_accept())) {
				struct epoll_event cev = {.events = EPOLLIN, .data.ptr = s};
				int one = 1;

				setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &cev);
				s->next = sconns;
				if (sconns)
					sconns->prev = s;
				sconns = s;
			}
		}
	}
	while (sconns)
		s_close(ep, sconns);
	close(ep);
	return NULL;
}

/* ---- clients: non-blocking state machines ------------------------------- */

enum cstate { C_CONNECTING, C_DECLINE, C_RESPONSE };

struct cslot {
	struct usmc_conn *uc;
	int fd;
	enum cstate st;
	uint64_t t0;
	uint8_t buf[DECLINE_MAX];
	size_t got, want;
};

struct cthread {
	pthread_t t;
	int nslots;
	uint64_t reqs, errors, declined_busy;
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

	return epoll_ctl(ep, op, s->fd, &ev);
}

/* Start a new connection in @s; false on an immediate failure. */
static bool c_start(int ep, struct cslot *s)
{
	int rc;

	s->t0 = now_us();
	s->st = C_CONNECTING;
	s->got = 0;
	if (cfg.client == K_USMC) {
		rc = usmc_connect(cctx, (struct sockaddr *)&cfg.addr, sizeof(cfg.addr),
				  USMC_NONBLOCK, &s->uc);
		if (rc)
			return false;
		s->fd = usmc_conn_fd(s->uc);
	} else {
		s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (s->fd < 0)
			return false;
		if (connect(s->fd, (struct sockaddr *)&cfg.addr, sizeof(cfg.addr)) &&
		    errno != EINPROGRESS) {
			close(s->fd);
			s->fd = -1;
			return false;
		}
	}
	return !c_watch(ep, s, EPOLLOUT, EPOLL_CTL_ADD);
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

	lat_add(ct, now_us() - s->t0);
	memset(req, 'q', sizeof(req));
	if (c_send(s, req, sizeof(req)) != MSG_SIZE)
		return false;
	s->st = C_RESPONSE;
	s->got = 0;
	s->want = MSG_SIZE;
	return !c_watch(ep, s, EPOLLIN, EPOLL_CTL_MOD);
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

static bool c_connected(int ep, struct cthread *ct, struct cslot *s)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (s->uc) {
		int rc = usmc_connect_finish(s->uc);

		if (rc == -EINPROGRESS)
			return true;
		if (rc || !c_refresh_fd(ep, s))
			return false;
	} else if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		return false;
	}
	if (cfg.client != K_CLC)
		return c_established(ep, ct, s);
	if (c_send(s, linux_v2_proposal, sizeof(linux_v2_proposal)) !=
	    (ssize_t)sizeof(linux_v2_proposal))
		return false;
	s->st = C_DECLINE;
	s->want = CLC_HDR_LEN;
	return !c_watch(ep, s, EPOLLIN, EPOLL_CTL_MOD);
}

/* Returns false on error; true also when more bytes are needed. */
static bool c_readable(int ep, struct cthread *ct, struct cslot *s)
{
	for (;;) {
		ssize_t n = c_recv(s, s->buf + s->got, s->want - s->got);

		if (n == -EAGAIN)
			return true;
		if (n <= 0)
			return false;
		s->got += (size_t)n;
		if (s->got < s->want)
			continue;
		if (s->st == C_RESPONSE) {
			ct->reqs++;
			c_close(ep, s);
			return true;
		}
		/* DECLINE: header first, then the rest by its length */
		if (s->want == CLC_HDR_LEN) {
			size_t len = (size_t)s->buf[5] << 8 | s->buf[6];

			if (s->buf[4] != 4 || len <= DIAG_OFF + 4 || len > DECLINE_MAX)
				return false;
			s->want = len;
			continue;
		}
		uint32_t diag;

		memcpy(&diag, s->buf + DIAG_OFF, sizeof(diag));
		if (ntohl(diag) == DIAG_SERVER_BUSY)
			ct->declined_busy++;
		return c_established(ep, ct, s);
	}
}

static void *client_main(void *arg)
{
	struct cthread *ct = arg;
	struct cslot *slots = calloc((size_t)ct->nslots, sizeof(*slots));
	struct epoll_event evs[MAX_EVENTS];
	int ep = epoll_create1(EPOLL_CLOEXEC);

	for (int i = 0; i < ct->nslots; i++) {
		slots[i].fd = -1;
		if (!c_start(ep, &slots[i]))
			ct->errors++;
	}
	while (!atomic_load(&stop_clients)) {
		int n = epoll_wait(ep, evs, MAX_EVENTS, 50);

		for (int i = 0; i < n; i++) {
			struct cslot *s = evs[i].data.ptr;
			bool ok = s->st == C_CONNECTING ? c_connected(ep, ct, s)
							: c_readable(ep, ct, s);

			if (!ok) {
				ct->errors++;
				c_close(ep, s);
			}
			if (s->fd < 0 && !atomic_load(&stop_clients) && !c_start(ep, s))
				ct->errors++;
		}
	}
	for (int i = 0; i < ct->nslots; i++)
		c_close(ep, &slots[i]); /* in flight at the end: not counted */
	close(ep);
	free(slots);
	return NULL;
}

/* ---- main ----------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static enum kind parse_kind(const char *s)
{
	for (int k = K_NONE; k <= K_CLC; k++)
		if (!strcmp(s, kind_names[k]))
			return (enum kind)k;
	fprintf(stderr, "usmc_storm: unknown kind '%s'\n", s);
	exit(2);
}

static void parse_args(int argc, char **argv)
{
	static const struct option lo[] = {{"server", required_argument, NULL, 'S'},
					   {"client", required_argument, NULL, 'C'},
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
			"[-t CLIENT_THREADS] [-b BACKLOG] [-f] [--server usmc|plain|none] "
			"[--client usmc|plain|clc|none]\n");
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

/* Prints the result line; returns the number of errors on both sides. */
static uint64_t report(struct cthread *ct, uint64_t elapsed_us)
{
	uint64_t reqs = 0, errors = 0, busy = 0;
	struct usmc_ctx_stats cs;
	size_t nlat = 0, k = 0;
	uint32_t *lat;
	struct usmc_listener_stats st = {0};

	for (int i = 0; i < cfg.threads; i++) {
		reqs += ct[i].reqs;
		errors += ct[i].errors;
		busy += ct[i].declined_busy;
		nlat += ct[i].nlat;
	}
	lat = malloc((nlat ? nlat : 1) * sizeof(*lat));
	for (int i = 0; i < cfg.threads; i++) {
		memcpy(lat + k, ct[i].lat, ct[i].nlat * sizeof(*lat));
		k += ct[i].nlat;
	}
	qsort(lat, nlat, sizeof(*lat), cmp_u32);
	if (ulst)
		usmc_listener_stats(ulst, &st);
	usmc_ctx_stats(cctx, &cs); /* usmc clients only */
	printf("server=%s%s client=%s clients=%d secs=%d reqs=%llu req_per_s=%.0f errors=%llu "
	       "connect_p50_us=%u connect_p99_us=%u client_smcr=%llu client_tcp=%llu "
	       "declined_busy=%llu srv_smcr=%llu srv_tcp=%llu srv_congested=%llu "
	       "srv_errors=%llu hs_failed=%llu hs_queue_high=%u backlog_full=%llu "
	       "listen_drops=%llu accept_uring=%d\n",
	       kind_names[cfg.server], cfg.auto_fallback ? "-af" : "", kind_names[cfg.client],
	       cfg.clients, cfg.seconds, (unsigned long long)reqs, reqs * 1e6 / (double)elapsed_us,
	       (unsigned long long)errors, nlat ? lat[nlat / 2] : 0,
	       nlat ? lat[nlat * 99 / 100] : 0, (unsigned long long)cs.smcr,
	       (unsigned long long)cs.fallbacks, (unsigned long long)busy,
	       (unsigned long long)st.smcr, (unsigned long long)st.fallbacks,
	       (unsigned long long)st.congestion_fallbacks, (unsigned long long)srv_errors,
	       (unsigned long long)st.hs_failed, st.hs_queue_high,
	       (unsigned long long)st.backlog_full, (unsigned long long)st.listen_drops,
	       st.accept_uring);
	free(lat);
	return errors + srv_errors;
}

/* Close everything, so that leak checkers see a clean exit. */
static int shutdown_all(void)
{
	int rc = 0;

	if (ulst)
		rc = usmc_listener_close(ulst);
	if (plain_lfd >= 0)
		close(plain_lfd);
	if (!rc)
		rc = usmc_ctx_destroy(sctx);
	if (!rc)
		rc = usmc_ctx_destroy(cctx);
	if (rc)
		fprintf(stderr, "usmc_storm: shutdown: %s\n", usmc_strerror(rc));
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct cthread *ct;
	pthread_t srv;
	uint64_t t0, elapsed, errors;
	int lfd, rc;

	parse_args(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	rc = usmc_ctx_create(&sctx);
	if (!rc)
		rc = usmc_ctx_create(&cctx);
	if (rc)
		die("usmc_ctx_create", rc);
	if (cfg.server != K_NONE) {
		lfd = server_open();
		pthread_create(&srv, NULL, server_main, &lfd);
	}
	if (cfg.client == K_NONE) { /* server only: run for the duration */
		sleep_s(cfg.seconds);
		atomic_store(&stop_server, true);
		pthread_join(srv, NULL);
		return shutdown_all();
	}
	ct = calloc((size_t)cfg.threads, sizeof(*ct));
	t0 = now_us();
	for (int i = 0; i < cfg.threads; i++) {
		ct[i].nslots = cfg.clients / cfg.threads + (i < cfg.clients % cfg.threads);
		pthread_create(&ct[i].t, NULL, client_main, &ct[i]);
	}
	sleep_s(cfg.seconds);
	atomic_store(&stop_clients, true);
	elapsed = now_us() - t0;
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
