// SPDX-License-Identifier: MIT
/*
 * usmc_bench - ping-pong latency and streaming throughput over libusmc
 * (SMC-R, or forced to TCP with USMC_SMC=0) or over plain sockets (-P), so
 * that all of them are measured by the same code in the same run.
 *
 *   usmc_bench server [-P] [-a ADDR] [-p PORT]
 *   usmc_bench pingpong [-P] [-s SIZE] [-d SECONDS] ADDR PORT
 *   usmc_bench stream   [-P] [-s SIZE] [-d SECONDS] ADDR PORT
 *
 * The client sends a 16-byte request header naming the test; the server
 * echoes (ping-pong) or sinks and then reports the byte count (stream). The
 * client prints one line: mode, fallback reason, and the figures.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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

#define BENCH_MAGIC	  0x5553424eu /* "USBN" */
#define BENCH_PINGPONG	  1
#define BENCH_STREAM	  2
#define BENCH_MAX_SIZE	  (16u << 20)
#define BENCH_MAX_SAMPLES 1000000

struct bench_hdr {
	uint32_t magic, test, size, pad;
};

/* ---- transport: libusmc or plain sockets --------------------------------- */

static bool plain;

struct bconn {
	struct usmc_conn *u;
	int fd;
};

static ssize_t b_send(struct bconn *c, const void *buf, size_t len)
{
	ssize_t n;

	if (!plain)
		return usmc_send(c->u, buf, len, 0);
	n = send(c->fd, buf, len, MSG_NOSIGNAL);
	return n < 0 ? -errno : n;
}

static ssize_t b_recv(struct bconn *c, void *buf, size_t len)
{
	ssize_t n;

	if (!plain)
		return usmc_recv(c->u, buf, len, 0);
	n = recv(c->fd, buf, len, 0);
	return n < 0 ? -errno : n;
}

static int send_all(struct bconn *c, const void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = b_send(c, (const char *)buf + off, len - off);

		if (n < 0)
			return (int)n;
		off += (size_t)n;
	}
	return 0;
}

/* 0, -ECONNRESET at EOF, or another negative error */
static int recv_all(struct bconn *c, void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = b_recv(c, (char *)buf + off, len - off);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return (int)n;
		off += (size_t)n;
	}
	return 0;
}

static void b_close(struct bconn *c)
{
	if (plain)
		close(c->fd);
	else
		usmc_close(c->u);
}

static void nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- server ---------------------------------------------------------------- */

static void serve_pingpong(struct bconn *c, uint8_t *buf, uint32_t size)
{
	while (recv_all(c, buf, size) == 0)
		if (send_all(c, buf, size))
			return;
}

static void serve_stream(struct bconn *c, uint8_t *buf)
{
	uint64_t total = 0;
	ssize_t n;

	while ((n = b_recv(c, buf, BENCH_MAX_SIZE)) > 0)
		total += (uint64_t)n;
	if (n == 0)
		send_all(c, &total, sizeof(total));
}

static void *serve(void *arg)
{
	struct bconn *c = arg;
	struct bench_hdr h;
	uint8_t *buf = malloc(BENCH_MAX_SIZE);

	if (buf && recv_all(c, &h, sizeof(h)) == 0 && h.magic == BENCH_MAGIC && h.size &&
	    h.size <= BENCH_MAX_SIZE) {
		if (h.test == BENCH_PINGPONG)
			serve_pingpong(c, buf, h.size);
		else if (h.test == BENCH_STREAM)
			serve_stream(c, buf);
	}
	free(buf);
	b_close(c);
	free(c);
	return NULL;
}

static int run_server(struct sockaddr_in *a)
{
	struct usmc_ctx *ctx = NULL;
	struct usmc_listener *l = NULL;
	int lfd = -1, one = 1, rc;

	if (plain) {
		lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(lfd, (struct sockaddr *)a, sizeof(*a)) || listen(lfd, 128)) {
			perror("listen");
			return 1;
		}
	} else {
		rc = usmc_ctx_create(&ctx);
		if (!rc)
			rc = usmc_listen(ctx, (struct sockaddr *)a, sizeof(*a), 128, 0, &l);
		if (rc) {
			fprintf(stderr, "usmc_listen: %s\n", usmc_strerror(rc));
			return 1;
		}
	}
	printf("usmc_bench server (%s) listening on port %u\n", plain ? "plain" : "libusmc",
	       ntohs(a->sin_port));
	fflush(stdout);
	for (;;) {
		struct bconn *c = calloc(1, sizeof(*c));
		pthread_t t;

		if (plain) {
			c->fd = accept(lfd, NULL, NULL);
			rc = c->fd < 0 ? -errno : 0;
			if (!rc)
				nodelay(c->fd);
		} else {
			rc = usmc_accept(l, 0, &c->u);
			if (!rc)
				nodelay(usmc_conn_fd(c->u));
		}
		if (rc) {
			fprintf(stderr, "accept: %s\n", usmc_strerror(rc));
			free(c);
			continue;
		}
		pthread_create(&t, NULL, serve, c);
		pthread_detach(t);
	}
}

/* ---- client ---------------------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

static int client_connect(struct sockaddr_in *a, struct bconn *c, struct usmc_ctx **ctx)
{
	int rc;

	if (plain) {
		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (connect(c->fd, (struct sockaddr *)a, sizeof(*a)))
			return -errno;
		nodelay(c->fd);
		return 0;
	}
	rc = usmc_ctx_create(ctx);
	if (!rc)
		rc = usmc_connect(*ctx, (struct sockaddr *)a, sizeof(*a), 0, &c->u);
	if (!rc)
		nodelay(usmc_conn_fd(c->u));
	return rc;
}

static void print_mode(struct bconn *c)
{
	struct usmc_conn_info info;

	if (plain) {
		printf("transport plain-tcp");
		return;
	}
	usmc_conn_info(c->u, &info);
	printf("transport usmc mode %s", usmc_mode_name(info.mode));
	if (info.mode != USMC_MODE_SMCR)
		printf(" reason %s", usmc_reason_name(info.reason));
}

static int run_pingpong(struct bconn *c, uint32_t size, double secs)
{
	uint8_t *buf = calloc(1, size);
	double *rtt = malloc(BENCH_MAX_SAMPLES * sizeof(*rtt));
	size_t n = 0;
	double end = now_s() + secs, sum = 0;
	int rc = 0;

	while (n < BENCH_MAX_SAMPLES && now_s() < end) {
		double t0 = now_s();

		rc = send_all(c, buf, size);
		if (!rc)
			rc = recv_all(c, buf, size);
		if (rc)
			break;
		rtt[n] = (now_s() - t0) * 1e6;
		sum += rtt[n++];
	}
	if (!rc && n) {
		qsort(rtt, n, sizeof(*rtt), cmp_double);
		print_mode(c);
		printf(" pingpong size %u round-trips %zu rtt-us mean %.1f p50 %.1f p99 %.1f\n",
		       size, n, sum / (double)n, rtt[n / 2], rtt[n * 99 / 100]);
	}
	free(buf);
	free(rtt);
	return rc;
}

static int run_stream(struct bconn *c, uint32_t size, double secs)
{
	uint8_t *buf = calloc(1, size);
	uint64_t sent = 0, acked = 0;
	double t0 = now_s(), end = t0 + secs;
	int rc = 0;

	while (now_s() < end && !(rc = send_all(c, buf, size)))
		sent += size;
	if (!rc)
		rc = plain ? (shutdown(c->fd, SHUT_WR) ? -errno : 0) : usmc_shutdown(c->u, SHUT_WR);
	if (!rc)
		rc = recv_all(c, &acked, sizeof(acked));
	if (!rc && acked != sent)
		rc = -EIO;
	if (!rc) {
		double s = now_s() - t0;

		print_mode(c);
		printf(" stream size %u bytes %llu seconds %.2f MB/s %.2f\n", size,
		       (unsigned long long)sent, s, (double)sent / s / 1e6);
	}
	free(buf);
	return rc;
}

static int run_client(int test, struct sockaddr_in *a, uint32_t size, double secs)
{
	struct bench_hdr h = {.magic = BENCH_MAGIC, .test = (uint32_t)test, .size = size};
	struct usmc_ctx *ctx = NULL;
	struct bconn c = {0};
	int rc = client_connect(a, &c, &ctx);

	if (!rc)
		rc = send_all(&c, &h, sizeof(h));
	if (!rc)
		rc = test == BENCH_PINGPONG ? run_pingpong(&c, size, secs)
					    : run_stream(&c, size, secs);
	if (rc)
		fprintf(stderr, "usmc_bench: %s\n", usmc_strerror(rc));
	if (plain ? c.fd > 0 : c.u != NULL)
		b_close(&c);
	if (ctx)
		usmc_ctx_destroy(ctx);
	return rc ? 1 : 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: usmc_bench server [-P] [-a ADDR] [-p PORT]\n"
		"       usmc_bench pingpong|stream [-P] [-s SIZE] [-d SECONDS] ADDR PORT\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(7878)};
	double secs = 3;
	uint32_t size = 0;
	int test, opt;

	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "server"))
		test = 0;
	else if (!strcmp(argv[1], "pingpong"))
		test = BENCH_PINGPONG;
	else if (!strcmp(argv[1], "stream"))
		test = BENCH_STREAM;
	else
		usage();
	optind = 2;
	while ((opt = getopt(argc, argv, "Pa:p:s:d:")) != -1) {
		switch (opt) {
		case 'P':
			plain = true;
			break;
		case 'a':
			if (inet_pton(AF_INET, optarg, &a.sin_addr) != 1)
				usage();
			break;
		case 'p':
			a.sin_port = htons((uint16_t)atoi(optarg));
			break;
		case 's':
			size = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'd':
			secs = atof(optarg);
			break;
		default:
			usage();
		}
	}
	if (!test)
		return run_server(&a);
	if (argc - optind != 2 || inet_pton(AF_INET, argv[optind], &a.sin_addr) != 1)
		usage();
	a.sin_port = htons((uint16_t)atoi(argv[optind + 1]));
	if (!size)
		size = test == BENCH_PINGPONG ? 1 : 65536;
	if (size > BENCH_MAX_SIZE)
		usage();
	return run_client(test, &a, size, secs);
}
