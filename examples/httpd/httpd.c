// SPDX-License-Identifier: MIT
/*
 * httpd - a small HTTP/1.1 server on libev over libusmc: every request gets
 * the same body; keep-alive by default, "Connection: close" (or HTTP/1.0
 * without keep-alive) closes after the response. HEAD gets the headers
 * alone; a request body (Content-Length) is read and ignored; lines may
 * end in CRLF or a bare LF. A malformed request gets 400, a head larger
 * than 8 KiB 431, a Transfer-Encoding 501; each closes the connection
 * after the answer (shutting down our side first and reading what the
 * client still sends, so that the answer is not lost to a reset).
 *
 * The loop is libev's. Over libusmc it watches one descriptor, the
 * context's (usmc_ctx_event_fd()), and asks usmc_ctx_poll() what is ready:
 * the listener (accept) and each connection (read or write), whatever its
 * mode; no connection needs a descriptor of its own (usmc.h "Events").
 * With plain sockets each connection's socket is a libev watcher.
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

#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include <usmc/usmc.h>

#define RX_SIZE	   8192
#define MAX_HEADER RX_SIZE
#define MAX_BODY   (1ull << 40) /* a Content-Length beyond is refused */
#define LINGER_S   2.0		/* reading what a refused client still sends */

/* ---- the transport: libusmc or plain sockets, chosen at start ---------- */

static bool plain;
static struct usmc_ctx *ctx;
static struct usmc_listener *ulst;
static int plain_lfd = -1;

struct conn {
	ev_io w; /* plain: first, the watcher's pointer is the connection's */
	ev_timer linger;
	int want;	      /* EV_READ or EV_WRITE: what the loop waits for */
	struct usmc_conn *uc; /* libusmc */
	int fd;		      /* plain */
	char rx[RX_SIZE];
	size_t rx_len;
	uint64_t body_left; /* bytes of the current request's body not yet read */
	char *tx;
	size_t tx_len, tx_off;
	bool close_after; /* close once the answer is out */
	bool refused;	  /* ... after reading what the client still sends */
	bool draining;	  /* our side is shut down; reading until EOF */
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

static void conn_cb(struct ev_loop *loop, ev_io *w, int revents);

/* Wait for @events (EV_READ or EV_WRITE) of @c from now on: its libev
 * watcher, or its libusmc watch (usmc_ctx_poll() reports it). */
static void t_want(struct ev_loop *loop, struct conn *c, int events)
{
	if (c->want == events)
		return;
	c->want = events;
	if (!plain) {
		usmc_conn_watch(c->uc, events == EV_READ ? USMC_EV_READ : USMC_EV_WRITE, c);
		return;
	}
	ev_io_stop(loop, &c->w);
	ev_io_set(&c->w, c->fd, events);
	ev_io_start(loop, &c->w);
}

/* Accept one connection and wait for its request; false when there is none. */
static bool t_accept(struct ev_loop *loop, struct conn *c)
{
	int one = 1;

	if (plain) {
		c->fd = accept4(plain_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (c->fd < 0)
			return false;
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		ev_io_init(&c->w, conn_cb, c->fd, 0);
	} else {
		if (usmc_accept(ulst, USMC_NONBLOCK, &c->uc))
			return false;
		usmc_conn_setsockopt(c->uc, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	t_want(loop, c, EV_READ);
	return true;
}

static void t_shutdown_wr(struct conn *c)
{
	if (plain)
		shutdown(c->fd, SHUT_WR);
	else
		usmc_shutdown(c->uc, SHUT_WR);
}

static void t_close(struct ev_loop *loop, struct conn *c)
{
	if (plain) {
		ev_io_stop(loop, &c->w);
		close(c->fd);
	} else {
		usmc_close(c->uc); /* out of the context's event set too */
	}
}

/* ---- HTTP ---------------------------------------------------------------- */

/* The four answers to a good request: keep-alive or close, GET or HEAD
 * (HEAD: the same head, no body). */
static char *response_keep, *response_close;
static size_t response_keep_len, response_close_len;
static size_t response_keep_head, response_close_head; /* up to the body */

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
	response_keep_head = response_keep_len - body_len;
	response_close_head = response_close_len - body_len;
	free(body);
}

/* An error answer; the connection closes after it. */
#define ERROR_RESPONSE(status, text)                                                       \
	"HTTP/1.1 " status "\r\nContent-Type: text/plain\r\nContent-Length: " #text "\r\n" \
	"Connection: close\r\n\r\n"

static const char resp_400[] = ERROR_RESPONSE("400 Bad Request", 12) "bad request\n";
static const char resp_431[] =
	ERROR_RESPONSE("431 Request Header Fields Too Large", 24) "request head too large\n";
static const char resp_501[] = ERROR_RESPONSE("501 Not Implemented", 16) "not implemented\n";

/* ---- request parsing (RFC 9112) ---- */

enum req_verdict {
	REQ_INCOMPLETE = 0, /* no empty line yet */
	REQ_OK,
	REQ_BAD,     /* 400 */
	REQ_NOTIMPL, /* 501: a transfer coding (chunked bodies are not read) */
};

struct request {
	size_t head_len; /* bytes up to and including the empty line */
	bool head;	 /* HEAD: no body in the answer */
	bool close;	 /* the client asked to close (or HTTP/1.0 without keep-alive) */
	uint64_t body_len;
};

static bool is_tchar(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Length of the token at @p (at most @len bytes). */
static size_t token_len(const char *p, size_t len)
{
	size_t n = 0;

	while (n < len && is_tchar(p[n]))
		n++;
	return n;
}

/* Does the comma-separated list @v (@len bytes) hold @tok (any case)? */
static bool list_has(const char *v, size_t len, const char *tok)
{
	size_t tl = strlen(tok);

	for (size_t i = 0; i < len;) {
		size_t e = i;

		while (e < len && v[e] != ',')
			e++;
		size_t a = i, b = e;

		while (a < b && (v[a] == ' ' || v[a] == '\t'))
			a++;
		while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
			b--;
		if (b - a == tl && !strncasecmp(v + a, tok, tl))
			return true;
		i = e + 1;
	}
	return false;
}

/* "GET /path HTTP/1.1": method, one space, target, one space, version. */
static enum req_verdict parse_request_line(const char *p, size_t len, struct request *r,
					   bool *http10)
{
	size_t m = token_len(p, len), t = m + 1, v;

	if (!m || t >= len || p[m] != ' ')
		return REQ_BAD;
	while (t < len && p[t] > ' ' && p[t] != 0x7f)
		t++;
	if (t == m + 1 || t >= len || p[t] != ' ')
		return REQ_BAD;
	v = t + 1;
	if (len - v != 8 || strncmp(p + v, "HTTP/1.", 7) || p[v + 7] < '0' || p[v + 7] > '9')
		return REQ_BAD;
	r->head = m == 4 && !strncmp(p, "HEAD", 4);
	*http10 = p[v + 7] == '0';
	return REQ_OK;
}

/* One header line "Name: value"; notes what matters to us in @r. */
static enum req_verdict parse_header(const char *p, size_t len, struct request *r, bool *seen_cl,
				     bool *keep_alive, bool *host)
{
	size_t n = token_len(p, len);
	const char *v;
	size_t vlen;

	if (!n || n >= len || p[n] != ':') /* also obs-fold and "Name :" */
		return REQ_BAD;
	v = p + n + 1;
	vlen = len - n - 1;
	for (size_t i = 0; i < vlen; i++)
		if ((unsigned char)v[i] < ' ' && v[i] != '\t')
			return REQ_BAD;
	while (vlen && (*v == ' ' || *v == '\t'))
		v++, vlen--;
	while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
		vlen--;
	if (n == 14 && !strncasecmp(p, "Content-Length", 14)) {
		uint64_t cl = 0;

		if (!vlen)
			return REQ_BAD;
		for (size_t i = 0; i < vlen; i++) {
			if (v[i] < '0' || v[i] > '9' || cl > MAX_BODY)
				return REQ_BAD;
			cl = cl * 10 + (uint64_t)(v[i] - '0');
		}
		if (cl > MAX_BODY || (*seen_cl && cl != r->body_len))
			return REQ_BAD;
		*seen_cl = true;
		r->body_len = cl;
	} else if (n == 17 && !strncasecmp(p, "Transfer-Encoding", 17)) {
		return REQ_NOTIMPL;
	} else if (n == 10 && !strncasecmp(p, "Connection", 10)) {
		if (list_has(v, vlen, "close"))
			r->close = true;
		if (list_has(v, vlen, "keep-alive"))
			*keep_alive = true;
	} else if (n == 4 && !strncasecmp(p, "Host", 4)) {
		*host = true;
	}
	return REQ_OK;
}

/*
 * The request head at the start of @buf (@len bytes): REQ_INCOMPLETE until
 * its empty line arrived. Lines end in CRLF or a bare LF; empty lines
 * before the request line are skipped (RFC 9112 section 2.2).
 */
static enum req_verdict parse_request(const char *buf, size_t len, struct request *r)
{
	bool first = true, http10 = false, seen_cl = false, keep_alive = false, host = false;
	size_t pos = 0;

	memset(r, 0, sizeof(*r));
	for (;;) {
		const char *nl = memchr(buf + pos, '\n', len - pos);
		size_t end, llen;
		enum req_verdict v;

		if (!nl)
			return REQ_INCOMPLETE;
		end = (size_t)(nl - buf);
		llen = end - pos;
		if (llen && buf[end - 1] == '\r')
			llen--;
		if (!llen && first) {
			pos = end + 1;
			continue;
		}
		if (!llen) {
			r->head_len = end + 1;
			break;
		}
		v = first ? parse_request_line(buf + pos, llen, r, &http10)
			  : parse_header(buf + pos, llen, r, &seen_cl, &keep_alive, &host);
		if (v != REQ_OK)
			return v;
		first = false;
		pos = end + 1;
	}
	if (!http10 && !host) /* RFC 9112 section 3.2: an HTTP/1.1 request names its host */
		return REQ_BAD;
	if (http10 && !keep_alive)
		r->close = true;
	return REQ_OK;
}

/* ---- connections ---- */

static void conn_free(struct ev_loop *loop, struct conn *c)
{
	ev_timer_stop(loop, &c->linger);
	t_close(loop, c);
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

/* A refused request: answer, then close (after draining: see flush_tx). */
static void refuse(struct conn *c, const char *resp, size_t len)
{
	queue_tx(c, resp, len);
	c->close_after = true;
	c->refused = true;
	c->rx_len = 0;
}

static void linger_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	conn_free(loop, (struct conn *)((char *)t - offsetof(struct conn, linger)));
}

/*
 * Our answer to a refused request is out: shut down our side and read what
 * the client still sends until it closes (or LINGER_S passed). Closing with
 * unread bytes would send a reset, which may destroy the answer before the
 * client read it.
 */
static void start_draining(struct ev_loop *loop, struct conn *c)
{
	t_shutdown_wr(c);
	c->draining = true;
	ev_timer_init(&c->linger, linger_cb, LINGER_S, 0.);
	ev_timer_start(loop, &c->linger);
}

/* Send what is queued; returns false when the connection must go. */
static bool flush_tx(struct ev_loop *loop, struct conn *c)
{
	while (c->tx_off < c->tx_len) {
		ssize_t n = t_send(c, c->tx + c->tx_off, c->tx_len - c->tx_off);

		if (n == -EAGAIN) {
			t_want(loop, c, EV_WRITE);
			return true;
		}
		if (n < 0)
			return false;
		c->tx_off += (size_t)n;
	}
	c->tx_len = c->tx_off = 0;
	if (c->close_after && !c->refused)
		return false;
	t_want(loop, c, EV_READ);
	if (c->refused && !c->draining)
		start_draining(loop, c);
	return true;
}

/* Answer every complete request in the receive buffer and skip bodies. */
static void handle_requests(struct conn *c)
{
	while (!c->close_after && c->rx_len) {
		struct request r;
		size_t skip;

		if (c->body_left) { /* a request body: read, not parsed */
			skip = c->body_left < c->rx_len ? (size_t)c->body_left : c->rx_len;
			c->body_left -= skip;
		} else {
			switch (parse_request(c->rx, c->rx_len, &r)) {
			case REQ_INCOMPLETE:
				if (c->rx_len >= MAX_HEADER)
					refuse(c, resp_431, sizeof(resp_431) - 1);
				return;
			case REQ_BAD:
				refuse(c, resp_400, sizeof(resp_400) - 1);
				return;
			case REQ_NOTIMPL:
				refuse(c, resp_501, sizeof(resp_501) - 1);
				return;
			case REQ_OK:
				break;
			}
			if (r.close) {
				c->close_after = true;
				queue_tx(c, response_close,
					 r.head ? response_close_head : response_close_len);
			} else {
				queue_tx(c, response_keep,
					 r.head ? response_keep_head : response_keep_len);
			}
			skip = r.head_len;
			c->body_left = r.body_len;
		}
		memmove(c->rx, c->rx + skip, c->rx_len - skip);
		c->rx_len -= skip;
	}
}

/* Refused: read and drop until EOF; false when the connection must go. */
static bool drain(struct conn *c)
{
	for (;;) {
		ssize_t n = t_recv(c, c->rx, sizeof(c->rx));

		if (n == -EAGAIN)
			return true;
		if (n <= 0)
			return false;
	}
}
/* @c is ready for @revents (EV_READ, EV_WRITE). */
static void conn_ready(struct ev_loop *loop, struct conn *c, int revents)
{
	if (revents & EV_WRITE) {
		if (!flush_tx(loop, c))
			conn_free(loop, c);
		return;
	}
	if (c->draining) {
		if (!drain(c))
			conn_free(loop, c);
		return;
	}
	/* after an answer that closes, nothing more is read (a refusal drains
	 * once the answer is out) */
	while (!c->close_after) {
		size_t want = sizeof(c->rx) - c->rx_len;
		ssize_t n = t_recv(c, c->rx + c->rx_len, want);

		if (n == -EAGAIN)
			break;
		if (n <= 0) {
			conn_free(loop, c);
			return;
		}
		c->rx_len += (size_t)n;
		handle_requests(c);
		if ((size_t)n < want)
			break; /* the socket had less than we asked: drained */
	}
	if (!flush_tx(loop, c))
		conn_free(loop, c);
}

static void conn_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	conn_ready(loop, (struct conn *)w, revents);
}

static void accept_all(struct ev_loop *loop)
{
	for (;;) {
		struct conn *c = calloc(1, sizeof(*c));

		if (!c)
			return;
		ev_init(&c->linger, linger_cb);
		if (!t_accept(loop, c)) {
			free(c);
			return;
		}
	}
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	accept_all(loop);
}

/*
 * libusmc: the context's descriptor is readable, so usmc_ctx_poll() has
 * events (level-triggered: what this batch leaves is reported again).
 * HUP and ERR go to the read side, whose receive says how it ended; a
 * connection waiting to write hears of them through its send.
 */
static void events_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct usmc_event ev[64];
	int n = usmc_ctx_poll(ctx, ev, 64, 0);

	for (int i = 0; i < n; i++) {
		struct conn *c = ev[i].user;

		if (ev[i].listener)
			accept_all(loop);
		else if (ev[i].events & USMC_EV_WRITE)
			conn_ready(loop, c, EV_WRITE);
		else
			conn_ready(loop, c, EV_READ);
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
		if (!rc)
			rc = usmc_listener_watch(ulst, USMC_EV_ACCEPT, NULL);
		if (rc) {
			fprintf(stderr, "usmc_listen: %s\n", usmc_strerror(rc));
			return -1;
		}
		return usmc_ctx_event_fd(ctx);
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
	ev_io_init(&lw, plain ? accept_cb : events_cb, lfd, EV_READ);
	ev_io_start(loop, &lw);
	ev_run(loop, 0);
	return 0;
usage:
	fprintf(stderr, "usage: %s [-a ADDR] [-p PORT] [-s BODY_BYTES] [-P] [-t] [-f]\n", argv[0]);
	return 2;
}
