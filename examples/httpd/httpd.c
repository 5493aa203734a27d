// SPDX-License-Identifier: MIT
/*
 * httpd - a small HTTP/1.1 server on libev over libusmc: every request gets
 * the same body; keep-alive by default, "Connection: close" (or HTTP/1.0
 * without keep-alive) closes after the response.
 *
 * usage: httpd [-a ADDR] [-p PORT] [-s BODY_BYTES] [-P] [-t] [-f]
 *   -P  plain sockets instead of libusmc (the baseline, same code otherwise)
 *   -t  libusmc, TCP only (no SMC-R, no probing)
 *   -f  libusmc listener with USMC_LISTEN_AUTO_FALLBACK
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include <usmc/usmc.h>

#define RX_SIZE	   8192
#define MAX_HEADER RX_SIZE

/* ---- the transport: libusmc or plain sockets, chosen at start ---------- */

static bool plain;
static struct usmc_ctx *ctx;
static struct usmc_listener *ulst;
static int plain_lfd = -1;

struct conn {
	ev_io w;
	struct usmc_conn *uc; /* libusmc */
	int fd;		      /* plain */
	char rx[RX_SIZE];
	size_t rx_len;
	char *tx;
	size_t tx_len, tx_off;
	bool close_after;
};

static ssize_t t_recv(struct conn *c, void *buf, size_t len)
{
	ssize_t n;

	if (!plain)
		return usmc_recv(c->uc, buf, len, 0);
	n = recv(c->fd, buf, len, MSG_DONTWAIT);
	return n < 0 ? -errno : n;
}

static ssize_t t_send(struct conn *c, const void *buf, size_t len)
{
	ssize_t n;

	if (!plain)
		return usmc_send(c->uc, buf, len, 0);
	n = send(c->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	return n < 0 ? -errno : n;
}

/* Accept one connection; returns its fd, or -1 when there is none. */
static int t_accept(struct conn *c)
{
	int rc;

	if (plain) {
		c->fd = accept4(plain_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		return c->fd;
	}
	rc = usmc_accept(ulst, USMC_NONBLOCK, &c->uc);
	return rc ? -1 : usmc_conn_fd(c->uc);
}

static void t_close(struct conn *c)
{
	if (plain)
		close(c->fd);
	else
		usmc_close(c->uc);
}

/* ---- HTTP ---------------------------------------------------------------- */

static char *response_keep, *response_close;
static size_t response_keep_len, response_close_len;

static void build_responses(size_t body_len)
{
	char *body = malloc(body_len + 1);
	size_t cap = body_len + 256;

	for (size_t i = 0; i < body_len; i++)
		body[i] = (char)('a' + i % 26);
	if (body_len)
		body[body_len - 1] = '\n';
	body[body_len] = '\0';
	response_keep = malloc(cap);
	response_close = malloc(cap);
	response_keep_len = (size_t)snprintf(response_keep, cap,
					     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
					     "Content-Length: %zu\r\n\r\n%s",
					     body_len, body);
	response_close_len = (size_t)snprintf(response_close, cap,
					      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
					      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
					      body_len, body);
	free(body);
}

/* Does the request head ask to close? HTTP/1.0 closes unless keep-alive. */
static bool wants_close(const char *head, size_t len)
{
	bool http10 = len > 8 && memmem(head, len, "HTTP/1.0", 8);
	const char *p = head;

	while ((p = memmem(p, len - (size_t)(p - head), "\r\n", 2))) {
		p += 2;
		if ((size_t)(head + len - p) > 11 && !strncasecmp(p, "Connection:", 11)) {
			const char *v = p + 11,
				   *end = memmem(v, len - (size_t)(v - head), "\r\n", 2);
			size_t vlen = end ? (size_t)(end - v) : 0;

			if (memmem(v, vlen, "close", 5) || memmem(v, vlen, "Close", 5))
				return true;
			if (memmem(v, vlen, "keep-alive", 10) || memmem(v, vlen, "Keep-Alive", 10))
				return false;
		}
	}
	return http10;
}

static void conn_free(struct ev_loop *loop, struct conn *c)
{
	ev_io_stop(loop, &c->w);
	t_close(c);
	free(c->tx);
	free(c);
}

static void queue_tx(struct conn *c, const char *buf, size_t len)
{
	if (c->tx_len + len > 0) {
		c->tx = realloc(c->tx, c->tx_len + len);
		memcpy(c->tx + c->tx_len, buf, len);
		c->tx_len += len;
	}
}

/* Send what is queued; returns false when the connection must go. */
static bool flush_tx(struct ev_loop *loop, struct conn *c)
{
	while (c->tx_off < c->tx_len) {
		ssize_t n = t_send(c, c->tx + c->tx_off, c->tx_len - c->tx_off);

		if (n == -EAGAIN) {
			ev_io_stop(loop, &c->w);
			ev_io_set(&c->w, c->w.fd, EV_WRITE);
			ev_io_start(loop, &c->w);
			return true;
		}
		if (n < 0)
			return false;
		c->tx_off += (size_t)n;
	}
	c->tx_len = c->tx_off = 0;
	if (c->close_after)
		return false;
	if (c->w.events & EV_WRITE) {
		ev_io_stop(loop, &c->w);
		ev_io_set(&c->w, c->w.fd, EV_READ);
		ev_io_start(loop, &c->w);
	}
	return true;
}

/* Answer every complete request in the receive buffer. */
static bool handle_requests(struct conn *c)
{
	char *end;

	while (!c->close_after && (end = memmem(c->rx, c->rx_len, "\r\n\r\n", 4))) {
		size_t head_len = (size_t)(end - c->rx) + 4;

		if (wants_close(c->rx, head_len)) {
			c->close_after = true;
			queue_tx(c, response_close, response_close_len);
		} else {
			queue_tx(c, response_keep, response_keep_len);
		}
		memmove(c->rx, c->rx + head_len, c->rx_len - head_len);
		c->rx_len -= head_len;
	}
	return c->rx_len < MAX_HEADER; /* a head larger than the buffer: refuse */
}

static void conn_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct conn *c = (struct conn *)w;

	if (revents & EV_WRITE) {
		if (!flush_tx(loop, c))
			conn_free(loop, c);
		return;
	}
	for (;;) {
		size_t want = sizeof(c->rx) - c->rx_len;
		ssize_t n = t_recv(c, c->rx + c->rx_len, want);

		if (n == -EAGAIN)
			break;
		if (n <= 0) {
			conn_free(loop, c);
			return;
		}
		c->rx_len += (size_t)n;
		if (!handle_requests(c)) {
			conn_free(loop, c);
			return;
		}
		if ((size_t)n < want)
			break; /* the socket had less than we asked: drained */
	}
	if (!flush_tx(loop, c))
		conn_free(loop, c);
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	for (;;) {
		struct conn *c = calloc(1, sizeof(*c));
		int fd = t_accept(c);
		int one = 1;

		if (fd < 0) {
			free(c);
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		ev_io_init(&c->w, conn_cb, fd, EV_READ);
		ev_io_start(loop, &c->w);
	}
}

static int open_listener(struct sockaddr_in *a, unsigned int flags)
{
	int one = 1, rc;

	if (!plain) {
		char msg[160];

		rc = usmc_ctx_create(&ctx);
		if (rc == -EINVAL && usmc_env_check(msg, sizeof(msg))) {
			fprintf(stderr, "usmc_ctx_create: %s\n", msg);
			return -1;
		}
		if (!rc)
			rc = usmc_listen(ctx, (struct sockaddr *)a, sizeof(*a), 4096,
					 flags | USMC_LISTEN_NONBLOCK, &ulst);
		if (rc) {
			fprintf(stderr, "usmc_listen: %s\n", usmc_strerror(rc));
			return -1;
		}
		return usmc_listener_fd(ulst);
	}
	plain_lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	setsockopt(plain_lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(plain_lfd, (struct sockaddr *)a, sizeof(*a)) || listen(plain_lfd, 4096)) {
		perror("listen");
		return -1;
	}
	return plain_lfd;
}

/* The port actually bound (the one asked for, or the kernel's pick for 0). */
static unsigned int bound_port(int lfd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (plain ? getsockname(lfd, (struct sockaddr *)&ss, &len)
		  : usmc_listener_addr(ulst, &ss, &len))
		return 0;
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(8080)};
	struct ev_loop *loop = EV_DEFAULT;
	unsigned int flags = 0;
	size_t body = 13;
	ev_io lw;
	int opt, lfd;

	a.sin_addr.s_addr = htonl(INADDR_ANY);
	while ((opt = getopt(argc, argv, "a:p:s:Ptf")) != -1) {
		switch (opt) {
		case 'a':
			if (inet_pton(AF_INET, optarg, &a.sin_addr) != 1)
				goto usage;
			break;
		case 'p':
			a.sin_port = htons((uint16_t)atoi(optarg));
			break;
		case 's':
			body = (size_t)atol(optarg);
			break;
		case 'P':
			plain = true;
			break;
		case 't':
			flags |= USMC_LISTEN_TCP_ONLY;
			break;
		case 'f':
			flags |= USMC_LISTEN_AUTO_FALLBACK;
			break;
		default:
			goto usage;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	build_responses(body);
	lfd = open_listener(&a, flags);
	if (lfd < 0)
		return 1;
	printf("httpd (%s) listening on port %u\n", plain ? "plain sockets" : "libusmc",
	       bound_port(lfd));
	fflush(stdout);
	ev_io_init(&lw, accept_cb, lfd, EV_READ);
	ev_io_start(loop, &lw);
	ev_run(loop, 0);
	return 0;
usage:
	fprintf(stderr, "usage: %s [-a ADDR] [-p PORT] [-s BODY_BYTES] [-P] [-t] [-f]\n", argv[0]);
	return 2;
}
