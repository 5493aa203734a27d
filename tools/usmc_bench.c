// SPDX-License-Identifier: MIT
/*
 * usmc_bench - ping-pong latency and streaming throughput over libusmc
 * (SMC-R, or TCP with USMC_SMC=0), plain TCP sockets or the kernel's own
 * SMC (plain AF_SMC sockets): the same program and protocol for all, so the
 * numbers compare side by side, and any of them against any other (a
 * kernel AF_SMC client against a usmc server in kernel-compat mode...).
 *
 *   usmc_bench -s ADDR:PORT [--api usmc|tcp|smc]      server (any number of runs)
 *   usmc_bench -c ADDR:PORT [--api usmc|tcp|smc] [--iters N] [--stream BYTES]
 *              [--sizes 1,1024,65536] [--bind SRC_IPV4]
 *
 * With --api smc and env USMC_BENCH_SMC_KCTL=<smc_kctl>, the client reads
 * the kernel's smc_diag verdict of each connection (api=kernel-smcr or
 * kernel-fallback); without it, api=kernel-smc (mode unknown).
 * The client prints one line per measurement:
 *   api=<usmc-smcr|usmc-tcp|tcp|kernel-smcr|...> test=pingpong size=B iters=N rtt_us=mean ...
 *   api=... test=stream bytes=B MBps=x
 * A round trip is one message of size B each way; the first tenth of the
 * iterations warms up and is not measured. The stream ends with a 1-byte
 * acknowledgement, so its time covers delivery, not just buffering.
 * With libusmc in SMC-R mode a ping-pong line also gives this end's cost per
 * round trip from the engine counters (usmc_ctx_stats().engine): thread
 * wake-ups, system calls as the library counts them, completions and
 * doorbells (wakeups=, syscalls=, cqes=, doorbells=, channel_sleeps=,
 * spins_ok= per message); the server prints the same for its end on
 * stdout ("server: ..." lines). A stream line gives them per MiB, for the
 * sender here and for the receiver on the server's stdout (with its reads
 * per MiB).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <usmc/usmc.h>

#include "mono_clock.h"

#define BENCH_PING   1
#define BENCH_STREAM 2
#define BENCH_CHUNK  (256 * 1024)

struct hdr {
	uint32_t op, size;
	uint64_t count;
};

/* One connection of either API. */
struct bconn {
	struct usmc_conn *u;
	int fd;
};

#ifndef AF_SMC
#define AF_SMC 43
#endif

static bool use_tcp;		   /* a kernel socket: TCP or, with sock_family AF_SMC, SMC */
static struct usmc_ctx *bench_ctx; /* libusmc's context (NULL with --api tcp|smc) */
static int sock_family = AF_INET;
static const char *bind_ip; /* --bind: source address of kernel client sockets */

static ssize_t b_send(struct bconn *c, const void *buf, size_t len)
{
	ssize_t n;

	if (!use_tcp)
		return usmc_send(c->u, buf, len, 0);
	n = send(c->fd, buf, len, MSG_NOSIGNAL);
	return n < 0 ? -errno : n;
}

static ssize_t b_recv(struct bconn *c, void *buf, size_t len)
{
	ssize_t n;

	if (!use_tcp)
		return usmc_recv(c->u, buf, len, 0);
	n = recv(c->fd, buf, len, 0);
	return n < 0 ? -errno : n;
}

static int send_all(struct bconn *c, const void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = b_send(c, (const uint8_t *)buf + off, len - off);

		if (n <= 0)
			return n ? (int)n : -EPIPE;
		off += (size_t)n;
	}
	return 0;
}

static int recv_all(struct bconn *c, void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = b_recv(c, (uint8_t *)buf + off, len - off);

		if (n <= 0)
			return n ? (int)n : -ECONNRESET;
		off += (size_t)n;
	}
	return 0;
}

static void b_close(struct bconn *c)
{
	if (use_tcp)
		close(c->fd);
	else
		usmc_close(c->u);
}

static void parse_addr(const char *s, struct sockaddr_in *sa)
{
	const char *colon = strrchr(s, ':');
	char host[64];

	if (!colon || (size_t)(colon - s) >= sizeof(host)) {
		fprintf(stderr, "address must be IPv4:PORT\n");
		exit(2);
	}
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", host);
		exit(2);
	}
}

/* ---- engine counters ---- */

static void engine_snap(struct usmc_engine_stats *e)
{
	struct usmc_ctx_stats st;

	memset(e, 0, sizeof(*e));
	if (!bench_ctx)
		return;
	usmc_ctx_stats(bench_ctx, &st);
	*e = st.engine;
}

/* " wakeups=x syscalls=y ..." per message between @a and now, or "" when
 * there is nothing to count (a kernel socket, a connection on TCP). */
static void engine_per_msg(const struct usmc_engine_stats *a, uint64_t msgs, char *out, size_t len)
{
	struct usmc_engine_stats b;
	double m = (double)(msgs ? msgs : 1);

	*out = '\0';
	engine_snap(&b);
	if (!bench_ctx || b.doorbells == a->doorbells)
		return;
	snprintf(out, len,
		 " wakeups=%.2f syscalls=%.2f cqes=%.2f doorbells=%.2f channel_sleeps=%.2f"
		 " spins_ok=%.2f cq_arms=%.2f ready_ops=%.2f",
		 (double)(b.wakeups - a->wakeups) / m, (double)(b.syscalls - a->syscalls) / m,
		 (double)(b.cqes - a->cqes) / m, (double)(b.doorbells - a->doorbells) / m,
		 (double)(b.channel_sleeps - a->channel_sleeps) / m,
		 (double)(b.spins_ok - a->spins_ok) / m, (double)(b.cq_arms - a->cq_arms) / m,
		 (double)(b.ready_ops - a->ready_ops) / m);
}

/* ---- server ---- */

/* The engine's cost per MiB of a stream: what the receiver's and the
 * sender's threads paid for it. */
#define STREAM_UNIT (1u << 20)

static int serve_stream(struct bconn *c, uint8_t *buf, uint64_t total)
{
	struct usmc_engine_stats e0;
	uint64_t reads = 0;
	char per[256];

	engine_snap(&e0);
	for (uint64_t got = 0; got < total; reads++) {
		size_t n = total - got < BENCH_CHUNK ? (size_t)(total - got) : BENCH_CHUNK;
		ssize_t r = b_recv(c, buf, n);

		if (r <= 0)
			return -1;
		got += (uint64_t)r;
	}
	engine_per_msg(&e0, total / STREAM_UNIT, per, sizeof(per));
	if (*per) {
		uint64_t mib = total / STREAM_UNIT;

		printf("server: test=stream bytes=%llu per_MiB: reads=%.1f%s\n",
		       (unsigned long long)total, (double)reads / (double)(mib ? mib : 1), per);
		fflush(stdout);
	}
	return send_all(c, "k", 1);
}

static void *serve_conn(void *arg)
{
	struct bconn *c = arg;
	uint8_t *buf = malloc(BENCH_CHUNK);
	struct hdr h;
	int rc = buf ? 0 : -1;

	while (!rc && !recv_all(c, &h, sizeof(h))) {
		if (h.op == BENCH_PING && h.size <= BENCH_CHUNK) {
			uint64_t warm = h.count / 11; /* the client's iters / 10 */
			struct usmc_engine_stats e0;
			char per[256];

			engine_snap(&e0);
			for (uint64_t i = 0; !rc && i < h.count; i++) {
				if (i == warm)
					engine_snap(&e0);
				rc = recv_all(c, buf, h.size);
				if (!rc)
					rc = send_all(c, buf, h.size);
			}
			engine_per_msg(&e0, h.count - warm, per, sizeof(per));
			if (!rc && *per) {
				printf("server: test=pingpong size=%u iters=%llu%s\n", h.size,
				       (unsigned long long)(h.count - warm), per);
				fflush(stdout);
			}
		} else if (h.op == BENCH_STREAM) {
			rc = serve_stream(c, buf, h.count);
		} else {
			rc = -1;
		}
	}
	free(buf);
	b_close(c);
	free(c);
	return NULL;
}

static int accept_one(struct usmc_listener *l, int lfd, struct bconn *c)
{
	int one = 1;

	if (!use_tcp)
		return usmc_accept(l, 0, &c->u);
	c->fd = accept(lfd, NULL, NULL);
	if (c->fd < 0)
		return -errno;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

static int run_server(struct usmc_ctx *ctx, const struct sockaddr_in *sa)
{
	struct usmc_listener *l = NULL;
	int lfd = -1, one = 1;

	if (use_tcp) {
		lfd = socket(sock_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(lfd, (const struct sockaddr *)sa, sizeof(*sa)) || listen(lfd, 64)) {
			perror("listen");
			return 1;
		}
	} else if (usmc_listen(ctx, (const struct sockaddr *)sa, sizeof(*sa), 64, 0, &l)) {
		fprintf(stderr, "usmc_listen failed\n");
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	for (;;) {
		struct bconn *c = calloc(1, sizeof(*c));
		pthread_t th;

		if (!c || accept_one(l, lfd, c))
			return 1;
		pthread_create(&th, NULL, serve_conn, c);
		pthread_detach(th);
	}
}

/* ---- client ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int pingpong(struct bconn *c, const char *api, uint32_t size, uint64_t iters)
{
	uint64_t warm = iters / 10;
	struct hdr h = {.op = BENCH_PING, .size = size, .count = iters + warm};
	uint8_t *buf = calloc(1, size ? size : 1);
	double *lat = calloc(iters, sizeof(double)), sum = 0;
	int rc = buf && lat ? send_all(c, &h, sizeof(h)) : -ENOMEM;
	struct usmc_engine_stats e0;
	char per[256];

	engine_snap(&e0);
	for (uint64_t i = 0; !rc && i < h.count; i++) {
		double t0 = mono_ns() / 1e3; /* us */

		if (i == warm)
			engine_snap(&e0);
		rc = send_all(c, buf, size);
		if (!rc)
			rc = recv_all(c, buf, size);
		if (i >= warm)
			lat[i - warm] = mono_ns() / 1e3 - t0;
	}
	if (!rc) {
		engine_per_msg(&e0, iters, per, sizeof(per));
		for (uint64_t i = 0; i < iters; i++)
			sum += lat[i];
		qsort(lat, iters, sizeof(double), cmp_double);
		printf("api=%s test=pingpong size=%u iters=%llu rtt_us=%.1f p50_us=%.1f p99_us=%.1f%s\n",
		       api, size, (unsigned long long)iters, sum / (double)iters, lat[iters / 2],
		       lat[iters * 99 / 100], per);
	}
	free(lat);
	free(buf);
	return rc;
}

static int stream(struct bconn *c, const char *api, uint64_t bytes)
{
	struct hdr h = {.op = BENCH_STREAM, .count = bytes};
	uint8_t *buf = calloc(1, BENCH_CHUNK);
	double t0 = mono_ns() / 1e3; /* us */
	int rc = buf ? send_all(c, &h, sizeof(h)) : -ENOMEM;
	struct usmc_engine_stats e0;
	char per[256];

	engine_snap(&e0);

	for (uint64_t off = 0; !rc && off < bytes;) {
		size_t n = bytes - off < BENCH_CHUNK ? (size_t)(bytes - off) : BENCH_CHUNK;

		rc = send_all(c, buf, n);
		off += n;
	}
	if (!rc)
		rc = recv_all(c, buf, 1);
	if (!rc) {
		double us = mono_ns() / 1e3 - t0;

		engine_per_msg(&e0, bytes / STREAM_UNIT, per, sizeof(per));
		printf("api=%s test=stream bytes=%llu MBps=%.2f%s%s\n", api,
		       (unsigned long long)bytes, (double)bytes / us, *per ? " per_MiB:" : "", per);
	}
	free(buf);
	return rc;
}

/* The kernel's verdict on an AF_SMC connection, from its smc_diag dump. */
static const char *kernel_smc_mode(int fd)
{
	const char *kctl = getenv("USMC_BENCH_SMC_KCTL");
	char cmd[512], line[1024], want[64], ip[INET_ADDRSTRLEN];
	const char *api = "kernel-smc";
	struct sockaddr_in la;
	socklen_t len = sizeof(la);
	FILE *f;

	if (!kctl || getsockname(fd, (struct sockaddr *)&la, &len))
		return api;
	inet_ntop(AF_INET, &la.sin_addr, ip, sizeof(ip));
	snprintf(want, sizeof(want), "local=%s:%d ", ip, ntohs(la.sin_port));
	snprintf(cmd, sizeof(cmd), "'%s' diag", kctl);
	f = popen(cmd, "r");
	if (!f)
		return api;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, want))
			api = strstr(line, "mode=SMC-R ") ? "kernel-smcr" : "kernel-fallback";
	pclose(f);
	return api;
}

static int client_connect(struct usmc_ctx *ctx, const struct sockaddr_in *sa, struct bconn *c,
			  const char **api)
{
	struct usmc_conn_info info;
	int one = 1;

	if (use_tcp) {
		c->fd = socket(sock_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			return -errno;
		if (bind_ip) {
			struct sockaddr_in src = {.sin_family = AF_INET};

			inet_pton(AF_INET, bind_ip, &src.sin_addr);
			if (bind(c->fd, (const struct sockaddr *)&src, sizeof(src))) {
				int err = -errno;

				close(c->fd);
				return err;
			}
		}
		if (connect(c->fd, (const struct sockaddr *)sa, sizeof(*sa))) {
			int err = -errno;

			close(c->fd);
			return err;
		}
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		*api = sock_family == AF_SMC ? kernel_smc_mode(c->fd) : "tcp";
		return 0;
	}
	if (usmc_connect(ctx, (const struct sockaddr *)sa, sizeof(*sa), 0, &c->u))
		return -EIO;
	usmc_conn_info(c->u, &info);
	*api = info.mode == USMC_MODE_SMCR ? "usmc-smcr" : "usmc-tcp";
	return 0;
}

static int run_client(struct usmc_ctx *ctx, const struct sockaddr_in *sa, const char *sizes,
		      uint64_t iters, uint64_t sbytes)
{
	const char *api = NULL;
	struct bconn c = {0};
	int rc = 0;

	for (const char *p = sizes; !rc && *p;) {
		char *end;
		uint32_t size = (uint32_t)strtoul(p, &end, 0);

		rc = client_connect(ctx, sa, &c, &api);
		if (!rc) {
			rc = pingpong(&c, api, size, iters);
			b_close(&c);
		}
		p = *end == ',' ? end + 1 : end;
	}
	if (!rc && sbytes) {
		rc = client_connect(ctx, sa, &c, &api);
		if (!rc) {
			rc = stream(&c, api, sbytes);
			b_close(&c);
		}
	}
	if (rc)
		fprintf(stderr, "usmc_bench: %s\n", usmc_strerror(rc));
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *srv = NULL, *cli = NULL, *sizes = "1,1024,65536";
	uint64_t iters = 1000, sbytes = 64ull << 20;
	struct usmc_ctx *ctx = NULL;
	struct sockaddr_in sa;
	int rc;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : "";

		if (!strcmp(argv[i], "-s"))
			srv = v, i++;
		else if (!strcmp(argv[i], "-c"))
			cli = v, i++;
		else if (!strcmp(argv[i], "--api"))
			use_tcp = !strcmp(v, "tcp") || !strcmp(v, "smc"),
			sock_family = strcmp(v, "smc") ? AF_INET : AF_SMC, i++;
		else if (!strcmp(argv[i], "--bind"))
			bind_ip = v, i++;
		else if (!strcmp(argv[i], "--iters"))
			iters = strtoull(v, NULL, 0), i++;
		else if (!strcmp(argv[i], "--stream"))
			sbytes = strtoull(v, NULL, 0), i++;
		else if (!strcmp(argv[i], "--sizes"))
			sizes = v, i++;
		else
			srv = cli = NULL, i = argc;
	}
	if (!srv == !cli || iters < 10) {
		fprintf(stderr,
			"usage: usmc_bench -s|-c IPV4:PORT [--api usmc|tcp|smc] [--iters N>=10] [--bind IP]"
			" [--stream BYTES] [--sizes a,b,c]\n");
		return 2;
	}
	if (!use_tcp && usmc_ctx_create(&ctx)) {
		char msg[160];

		usmc_env_check(msg, sizeof(msg));
		fprintf(stderr, "usmc_ctx_create failed%s%s\n", *msg ? ": " : "", msg);
		return 1;
	}
	bench_ctx = ctx;
	parse_addr(srv ? srv : cli, &sa);
	if (srv)
		return run_server(ctx, &sa);
	rc = run_client(ctx, &sa, sizes, iters, sbytes);
	if (ctx)
		usmc_ctx_destroy(ctx);
	return rc;
}
