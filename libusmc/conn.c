// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "abi.h"
#include "clock.h"
#include "conn.h"
#include "ctx.h"
#include "error.h"
#include "kcompat.h"
#include "smcr_clc.h"
#include "smcr_conn.h"

/* Client link groups to one server held during a handshake (its caps
 * allow USMC_OPT_MAX_LGRS_PER_PEER, default 8). */
#define LGR_HOLD_MAX 16

/* Largest iovec count accepted by the vector calls (as the kernel's). */
#define CONN_IOV_MAX 1024

static void chs_free(struct usmc_conn *c);

struct usmc_conn *conn_alloc(struct usmc_ctx *ctx, int fd, const struct usmc_opts *opts,
			     bool is_server)
{
	struct usmc_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->ctx = ctx;
	c->fd = fd;
	c->opts = *opts;
	c->is_server = is_server;
	c->mode = USMC_MODE_CONNECTING;
	atomic_init(&c->st_fd, fd);
	atomic_init(&c->st_mode, USMC_MODE_CONNECTING);
	atomic_fetch_add(&ctx->open_conns, 1);
	c->counted_open = true;
	ctx_register_conn(ctx, c); /* last: the stat thread may read it now */
	return c;
}

void conn_keep_peer(struct usmc_conn *c)
{
	if (c->peer_len)
		return;
	c->peer_len = sizeof(c->peer);
	if (getpeername(c->fd, (struct sockaddr *)&c->peer, &c->peer_len))
		c->peer_len = 0;
}

struct log_addr conn_log_peer(const struct usmc_conn *c)
{
	return c->peer_len ? log_sockaddr(&c->peer) : log_peer(c->fd);
}

void conn_set_mode(struct usmc_conn *c, enum usmc_mode mode, uint32_t reason, bool peer_declined)
{
	c->mode = mode;
	c->reason = mode == USMC_MODE_SMCR ? USMC_REASON_NONE : reason;
	c->peer_declined = peer_declined;
	atomic_store_explicit(&c->st_reason, c->reason, memory_order_relaxed);
	atomic_store_explicit(&c->st_peer_declined, peer_declined, memory_order_relaxed);
	atomic_store_explicit(&c->st_mode, mode, memory_order_relaxed);
	ctx_count_mode(c->ctx, mode, c->reason);
}

int conn_make_blocking(struct usmc_conn *c)
{
	/* our own socket (usmc_conn_connect()): its only file status flag is
	 * O_NONBLOCK, so one F_SETFL clears it without an F_GETFL first */
	return fcntl(c->fd, F_SETFL, 0) ? -errno : 0;
}

/*
 * The client socket before the CLC, whose I/O blocks (with its own
 * deadlines). A non-blocking user's calls pass MSG_DONTWAIT, so its socket
 * is made blocking only when a CLC comes next: one that falls back to TCP
 * before any CLC (a kernel-compat server that did not echo the option, as
 * in a storm) keeps O_NONBLOCK and saves the fcntl(). A blocking user's
 * socket was made blocking when the TCP connect ended.
 */
static int connect_clc_blocking(struct usmc_conn *c)
{
	return c->nonblock ? conn_make_blocking(c) : 0;
}

int conn_dismantle(struct usmc_conn *c)
{
	int fd = c->fd;

	ctx_unregister_conn(c->ctx, c); /* first: the stat thread no longer reads it */
	chs_free(c);			/* an asynchronous connect that did not end */
	kcompat_client_forget(c->ctx->kc, &c->kc_ticket);
	if (c->serve)
		smcr_clc_serve_abort(c->serve); /* listener closed while it waited */
	free(c->serve);
	if (c->smcr)
		smcr_close(c->smcr, true, 0, c->opts.v[USMC_OPT_CLOSE_WAIT_MS]);
	c->smcr = NULL;
	/* last use of the context: once the count drops, usmc_ctx_destroy()
	 * may free it (closing the socket needs no context) */
	if (c->counted_open)
		atomic_fetch_sub(&c->ctx->open_conns, 1);
	free(c);
	return fd;
}

void conn_destroy(struct usmc_conn *c)
{
	int fd = conn_dismantle(c);

	if (fd >= 0)
		close(fd);
}

/* ---- the SMC-R handshake's answer ----------------------------------- */

void conn_hs_init(struct usmc_conn *c, struct smcr_hs *hs)
{
	*hs = (struct smcr_hs){.fd = c->fd, .sctx = &c->ctx->rdma, .opts = &c->opts};
}

int conn_apply_handshake(struct usmc_conn *c, int rc, const struct smcr_hs *hs)
{
	switch (rc) {
	case SMCR_HS_SMCR:
		c->smcr = hs->sc;
		atomic_store_explicit(&c->st_lgr_id, hs->sc->lgr->id, memory_order_relaxed);
		conn_set_mode(c, USMC_MODE_SMCR, USMC_REASON_NONE, false);
		return 0;
	case SMCR_HS_TCP:
		conn_set_mode(c, USMC_MODE_TCP, hs->reason, hs->peer_declined);
		return 0;
	}
	return usmc_err_of_wire(rc);
}

/* ---- connect --------------------------------------------------------- */

static int check_sockaddr(const struct sockaddr *addr, socklen_t len)
{
	if (!addr)
		return -EINVAL;
	if (addr->sa_family == AF_INET)
		return len >= sizeof(struct sockaddr_in) ? 0 : -EINVAL;
	if (addr->sa_family == AF_INET6)
		return len >= sizeof(struct sockaddr_in6) ? 0 : -EINVAL;
	return -EAFNOSUPPORT;
}

/*
 * Our link groups to the server answer its LLC at once while a client
 * handshake runs (lgr_hold_peer(): the server may run a CONFIRM_RKEY flow
 * on one before it answers). The peer's address goes to @ss, and
 * hs->peer points at it, so the handshake need not ask again. Returns how
 * many link groups @held holds (lgr_unhold_peer() them).
 */
static int connect_hold(struct usmc_conn *c, struct smcr_hs *hs, struct sockaddr_storage *ss,
			struct lgr **held)
{
	socklen_t len = sizeof(*ss);
	struct in_addr peer = {0};

	/* the address connect() was given is the peer's (usmc_conn_connect()
	 * kept it): no getpeername() */
	if (c->peer_len)
		memcpy(ss, &c->peer, c->peer_len);
	else if (getpeername(c->fd, (struct sockaddr *)ss, &len))
		return 0;
	hs->peer = ss;
	smcr_addr_ipv4(ss, &peer);
	return peer.s_addr ? lgr_hold_peer(&c->ctx->rdma, peer, held, LGR_HOLD_MAX) : 0;
}

/* The client handshake, waiting, with our link groups held meanwhile. */
static int connect_held(struct usmc_conn *c, struct smcr_hs *hs)
{
	struct sockaddr_storage ss;
	struct lgr *held[LGR_HOLD_MAX];
	int n = connect_hold(c, hs, &ss, held), rc;

	rc = smcr_clc_connect(hs);
	hs->peer = NULL; /* @ss ends here; @hs lives on */
	lgr_unhold_peer(held, n);
	return rc;
}

/*
 * What decides the mode of an established client connection before any
 * CLC: 0 when it is decided (TCP: SMC-R disabled, or a kernel-compat
 * server whose SYN-ACK had no SMC option), 1 when the CLC comes next.
 * Without an SMC-R device (or with SMC-R disabled) no CLC byte is ever
 * sent, so the server sees a plain TCP client.
 */
static int connect_precheck(struct usmc_conn *c)
{
	if (!c->opts.v[USMC_OPT_SMC]) {
		conn_set_mode(c, USMC_MODE_TCP, USMC_REASON_DISABLED, false);
		return 0;
	}
	/* kernel-compat: no SMC option on the SYN-ACK, no CLC (kcompat.h) */
	c->kc_peer = kcompat_client_peer(c->ctx->kc, c->fd, &c->kc_ticket);
	if (c->kc_peer == KC_PEER_NOSMC) {
		conn_set_mode(c, USMC_MODE_TCP, USMC_REASON_PEERNOSMC, false);
		return 0;
	}
	return 1;
}

/* No SMC-R device for the local address: TCP. A kernel-compat server that
 * expects CLC gets a DECLINE. */
static int connect_nodev(struct usmc_conn *c)
{
	int rc = kcompat_client_decline(c->kc_peer, c->fd, USMC_REASON_NOSMCRDEV);

	if (rc)
		return rc;
	conn_set_mode(c, USMC_MODE_TCP, USMC_REASON_NOSMCRDEV, false);
	return 0;
}

/* Decide the mode of an established client connection, waiting. */
static int connect_decide_mode(struct usmc_conn *c)
{
	struct smcr_hs hs;
	int rc = connect_precheck(c);

	if (rc <= 0)
		return rc;
	rc = connect_clc_blocking(c);
	if (rc)
		return rc;
	conn_hs_init(c, &hs);
	rc = connect_held(c, &hs);
	if (rc != SMCR_HS_NODEV)
		return conn_apply_handshake(c, rc, &hs);
	return connect_nodev(c);
}

/* ---- the asynchronous client handshake (USMC_CONNECT_ASYNC) ---------- */

/* How often a handshake asks again for a link group that a first contact
 * of ours (on another thread) is still setting up. */
#define CHS_LGR_RETRY_MS 2

/*
 * An asynchronous client handshake between two usmc_connect_finish()
 * calls: the same steps as connect_decide_mode() (smcr_clc_propose(),
 * then smcr_clc_answer() without waiting), with what they need kept here.
 */
struct conn_client_hs {
	enum { CHS_TCP, CHS_ANSWER } state; /* TCP connect; PROPOSAL sent */
	long deadline_ms;		    /* CHS_ANSWER: the answer is due then */
	struct smcr_hs hs;
	struct smcr_client cl;
	struct sockaddr_storage peer; /* hs.peer */
	struct lgr *held[LGR_HOLD_MAX];
	int nheld;
};

static void chs_free(struct usmc_conn *c)
{
	struct conn_client_hs *h = c->chs;

	if (!h)
		return;
	lgr_unhold_peer(h->held, h->nheld);
	free(h);
	c->chs = NULL;
}

/* The handshake ended: 0 (the mode is set) or an error, which every later
 * call returns too. */
static int chs_end(struct usmc_conn *c, int rc)
{
	chs_free(c);
	if (rc) {
		c->connect_err = rc;
		return rc;
	}
	atomic_fetch_add(&c->ctx->connects, 1);
	return 0;
}

/*
 * The TCP connect: 0 when it is done, -EINPROGRESS, or its error. One
 * getsockopt(TCP_INFO), where poll() and SO_ERROR took two, and the order
 * kernel-compat mode needs. The kernel's tcp_finish_connect()
 * (net/ipv4/tcp_input.c) sets ESTABLISHED and then runs the sock_ops
 * program's ACTIVE_ESTABLISHED callback, which records whether the SYN-ACK
 * carried the SMC option, both under the socket's lock. tcp_poll() takes no
 * lock and reports POLLOUT in between, so a poll() then the map lookup could
 * read "no option" for a SYN-ACK that had it, and skip the CLC a kernel
 * server waits for. tcp_get_info() (net/ipv4/tcp.c) reads the state and then
 * takes the lock: a connected state it returns comes with the record done.
 */
static int tcp_connect_done(struct usmc_conn *c)
{
	uint8_t state; /* struct tcp_info's first byte: tcpi_state */
	socklen_t len = sizeof(state);
	int err = 0;

	if (getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &state, &len))
		return -errno;
	if (state == TCP_SYN_SENT)
		return -EINPROGRESS;
	if (state != TCP_CLOSE)
		return 0; /* connected, perhaps closed by the peer since */
	len = sizeof(err);
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len))
		return -errno;
	return err ? -err : -ENOTCONN;
}

_Static_assert(offsetof(struct tcp_info, tcpi_state) == 0, "tcpi_state leads struct tcp_info");

/* TCP is connected: the checks, then the PROPOSAL (never waits). */
static int chs_propose(struct usmc_conn *c, struct conn_client_hs *h)
{
	int rc = connect_precheck(c);

	if (rc <= 0)
		return chs_end(c, rc);
	rc = connect_clc_blocking(c);
	if (rc)
		return chs_end(c, rc);
	conn_hs_init(c, &h->hs);
	h->nheld = connect_hold(c, &h->hs, &h->peer, h->held);
	rc = smcr_clc_propose(&h->hs, &h->cl);
	if (rc == SMCR_HS_NODEV)
		return chs_end(c, connect_nodev(c));
	if (rc)
		return chs_end(c, conn_apply_handshake(c, rc, &h->hs));
	h->deadline_ms = clock_now_ms() + c->opts.v[USMC_OPT_CLC_TIMEOUT_MS];
	h->state = CHS_ANSWER;
	return -EINPROGRESS; /* the answer cannot be there yet */
}

/* The server's answer, and what follows it, without waiting for it. */
static int chs_answer(struct usmc_conn *c, struct conn_client_hs *h)
{
	int rc;

	/* no link group to that server at the PROPOSAL: one may have been set
	 * up since (many connects at once), on which the server runs its
	 * CONFIRM_RKEY before it answers us; hold it as connect_hold() would */
	if (!h->nheld && !h->cl.accepted && h->cl.server.s_addr)
		h->nheld = lgr_hold_peer(&c->ctx->rdma, h->cl.server, h->held, LGR_HOLD_MAX);
	rc = smcr_clc_answer(&h->hs, &h->cl, false);

	if (rc == SMCR_HS_AWAIT_LGR)
		return -EINPROGRESS;
	if (rc == SMCR_HS_AWAIT_ANSWER) {
		if (clock_now_ms() < h->deadline_ms)
			return -EINPROGRESS;
		rc = -ETIMEDOUT; /* as the waiting handshake's CLC wait */
	}
	h->hs.peer = NULL;
	return chs_end(c, conn_apply_handshake(c, rc, &h->hs));
}

static int connect_finish_async(struct usmc_conn *c)
{
	struct conn_client_hs *h = c->chs;
	int rc;

	if (c->connect_err)
		return c->connect_err;
	if (h->state == CHS_ANSWER)
		return chs_answer(c, h);
	rc = tcp_connect_done(c);
	if (rc == -EINPROGRESS)
		return rc;
	return rc ? chs_end(c, rc) : chs_propose(c, h);
}

int usmc_connect_events(struct usmc_conn *c, int *timeout_ms)
{
	const struct conn_client_hs *h;
	long left;
	int t = 0, ev = 0;

	if (!c || c->is_server || c->fd < 0)
		return -EINVAL;
	h = c->chs;
	if (c->mode != USMC_MODE_CONNECTING || c->connect_err) {
		/* nothing to wait for: usmc_connect_finish() says how it ended */
	} else if (!h || h->state == CHS_TCP) {
		ev = POLLOUT; /* the TCP connect; its own timeout */
		t = -1;
	} else if (h->cl.accepted) {
		/* a first contact of ours sets up the link group: ask again soon */
		left = h->cl.reuse_deadline_ms - clock_now_ms();
		t = left < CHS_LGR_RETRY_MS ? (left > 0 ? (int)left : 0) : CHS_LGR_RETRY_MS;
	} else {
		ev = POLLIN;
		left = h->deadline_ms - clock_now_ms();
		t = left > 0 ? (int)left : 0;
	}
	if (timeout_ms)
		*timeout_ms = t;
	return ev;
}

int usmc_conn_create(struct usmc_ctx *ctx, struct usmc_conn **out)
{
	struct usmc_opts opts;
	struct usmc_conn *c;

	if (!ctx || !out)
		return -EINVAL;
	if (ctx_forked(ctx))
		return USMC_EFORKED;
	ctx_copy_opts(ctx, &opts);
	c = conn_alloc(ctx, -1, &opts, false);
	if (!c)
		return -ENOMEM;
	*out = c;
	return 0;
}

static int wait_connected(int fd)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLOUT};

		if (poll(&p, 1, -1) >= 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

/* Connect c->fd, a non-blocking TCP socket the connection owns. */
static int conn_connect_socket(struct usmc_conn *c, const struct sockaddr *addr, socklen_t addrlen,
			       unsigned int flags)
{
	int rc;

	atomic_store(&c->st_fd, c->fd);
	c->nonblock = flags & USMC_NONBLOCK;
	if (c->nonblock && (flags & USMC_CONNECT_ASYNC)) {
		c->chs = calloc(1, sizeof(*c->chs));
		if (!c->chs)
			return -ENOMEM;
	}
	memcpy(&c->peer, addr, addrlen < sizeof(c->peer) ? addrlen : sizeof(c->peer));
	c->peer_len = addrlen < sizeof(c->peer) ? addrlen : sizeof(c->peer);
	/* kernel-compat: the SYN carries the option */
	if (c->opts.v[USMC_OPT_SMC])
		c->kc_ticket = kcompat_mark_client(c->ctx->kc, c->fd);
	if (connect(c->fd, addr, addrlen) && errno != EINPROGRESS)
		return -errno;
	if (c->nonblock)
		return 0;
	rc = wait_connected(c->fd);
	return rc ? rc : usmc_connect_finish(c);
}

int usmc_conn_connect(struct usmc_conn *c, const struct sockaddr *addr, socklen_t addrlen,
		      unsigned int flags)
{
	int rc;

	if (!c || c->is_server || c->fd >= 0 || (flags & ~(USMC_NONBLOCK | USMC_CONNECT_ASYNC)))
		return -EINVAL;
	rc = check_sockaddr(addr, addrlen);
	if (rc)
		return rc;
	c->fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd < 0)
		return -errno;
	return conn_connect_socket(c, addr, addrlen, flags);
}

/* @fd is an unconnected TCP socket of @family: -EBADF, -ENOTSOCK,
 * -EAFNOSUPPORT (another family) or -EINVAL (not TCP, or connected). */
static int check_connect_fd(int fd, int family)
{
	struct sockaddr_storage ss;
	int v = 0;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len))
		return -errno;
	if (v != family)
		return -EAFNOSUPPORT;
	len = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) || v != SOCK_STREAM)
		return -EINVAL;
	len = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &len) || v != IPPROTO_TCP)
		return -EINVAL;
	len = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) || v)
		return -EINVAL;
	len = sizeof(ss);
	if (!getpeername(fd, (struct sockaddr *)&ss, &len) || errno != ENOTCONN)
		return -EINVAL; /* connected already */
	return 0;
}

int usmc_conn_connect_fd(struct usmc_conn *c, int fd, const struct sockaddr *addr,
			 socklen_t addrlen, unsigned int flags)
{
	int rc, fl;

	if (!c || c->is_server || c->fd >= 0 || (flags & ~(USMC_NONBLOCK | USMC_CONNECT_ASYNC)))
		return -EINVAL;
	rc = check_sockaddr(addr, addrlen);
	if (!rc)
		rc = check_connect_fd(fd, addr->sa_family);
	if (rc)
		return rc;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) || fcntl(fd, F_SETFD, FD_CLOEXEC))
		return -errno;
	c->fd = fd; /* the connection's from here on, whatever happens */
	return conn_connect_socket(c, addr, addrlen, flags);
}

int usmc_connect(struct usmc_ctx *ctx, const struct sockaddr *addr, socklen_t addrlen,
		 unsigned int flags, struct usmc_conn **out)
{
	struct usmc_conn *c;
	int rc;

	if (!out)
		return -EINVAL;
	rc = usmc_conn_create(ctx, &c);
	if (rc)
		return rc;
	rc = usmc_conn_connect(c, addr, addrlen, flags);
	if (rc) {
		conn_destroy(c);
		return rc;
	}
	*out = c;
	return 0;
}

int usmc_connect_finish(struct usmc_conn *c)
{
	int rc;

	if (!c || c->is_server || c->fd < 0)
		return -EINVAL;
	if (c->mode != USMC_MODE_CONNECTING)
		return 0;
	if (c->chs || c->connect_err)
		return connect_finish_async(c);
	rc = tcp_connect_done(c);
	if (rc)
		return rc;
	if (!c->nonblock && (rc = conn_make_blocking(c))) /* its TCP calls block */
		return rc;
	rc = connect_decide_mode(c);
	if (rc)
		return rc;
	atomic_fetch_add(&c->ctx->connects, 1);
	return 0;
}

/* ---- data path ------------------------------------------------------- */

static int conn_ready(struct usmc_conn *c)
{
	int rc;

	if (!c)
		return -EINVAL;
	if (c->fd < 0)
		return -ENOTCONN;
	if (c->mode != USMC_MODE_CONNECTING)
		return 0;
	rc = usmc_connect_finish(c);
	return rc == -EINPROGRESS ? -EAGAIN : rc;
}

static int io_flags(const struct usmc_conn *c, int flags)
{
	return MSG_NOSIGNAL | (c->nonblock ? MSG_DONTWAIT : 0) | flags;
}

ssize_t usmc_send(struct usmc_conn *c, const void *buf, size_t len, int flags)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};

	if (!buf && len)
		return -EINVAL;
	return usmc_sendv(c, &iov, 1, flags);
}

ssize_t usmc_recv(struct usmc_conn *c, void *buf, size_t len, int flags)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};

	if (!buf && len)
		return -EINVAL;
	return usmc_recvv(c, &iov, 1, flags);
}

/* send(2) and recv(2) for one buffer: they skip the copy-in of a msghdr,
 * a measurable part of a small message's cost on the TCP path. */
static ssize_t tcp_sendv(const struct usmc_conn *c, const struct iovec *iov, int iovcnt, int flags)
{
	struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};

	if (iovcnt == 1)
		return send(c->fd, iov->iov_base, iov->iov_len, io_flags(c, flags));
	return sendmsg(c->fd, &msg, io_flags(c, flags));
}

static ssize_t tcp_recvv(const struct usmc_conn *c, const struct iovec *iov, int iovcnt, int flags)
{
	struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};

	if (iovcnt == 1)
		return recv(c->fd, iov->iov_base, iov->iov_len, io_flags(c, flags));
	return recvmsg(c->fd, &msg, io_flags(c, flags));
}

/* recvmsg() restarted on EINTR; a negative errno on failure. */
static ssize_t tcp_recvv_retry(const struct usmc_conn *c, const struct iovec *iov, int iovcnt,
			       int flags)
{
	ssize_t n;

	do {
		n = tcp_recvv(c, iov, iovcnt, flags);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return n;
}

/*
 * SMC-R mode reports a peer reset as TCP does (usmc.h): -ECONNRESET once,
 * to the first send or receive that sees it, then -EPIPE to sends. The
 * engine says -EPIPE to every send after the peer's abort flag and
 * -ECONNRESET while its error is a reset; this turns both into that rule.
 */
static ssize_t smcr_send_error(struct usmc_conn *c, ssize_t n)
{
	bool abort;

	if (n == -EPIPE) {
		pthread_mutex_lock(&c->smcr->lock);
		abort = c->smcr->rx.peer_abort && !c->smcr->shut_wr;
		pthread_mutex_unlock(&c->smcr->lock);
		if (abort && !atomic_exchange(&c->reset_reported, true))
			return -ECONNRESET;
	} else if (n == -ECONNRESET && atomic_exchange(&c->reset_reported, true)) {
		return -EPIPE;
	}
	return n;
}

ssize_t usmc_sendv(struct usmc_conn *c, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t n;
	int rc;

	if (!c || iovcnt < 0 || iovcnt > CONN_IOV_MAX || (iovcnt && !iov) ||
	    (flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE)))
		return -EINVAL;
	rc = conn_ready(c);
	if (rc)
		return rc;
	/* MSG_NOSIGNAL: every send is MSG_NOSIGNAL (io_flags()). MSG_MORE goes
	 * to the kernel in TCP mode; SMC-R mode ignores it (usmc.h). */
	if (c->smcr)
		n = smcr_sendv(c->smcr, iov, iovcnt, c->nonblock || (flags & MSG_DONTWAIT));
	else
		n = tcp_sendv(c, iov, iovcnt, flags);
	if (n < 0)
		return c->smcr ? smcr_send_error(c, n) : errno == EWOULDBLOCK ? -EAGAIN : -errno;
	atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)n, memory_order_relaxed);
	return n;
}

ssize_t usmc_recvv(struct usmc_conn *c, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t n;
	int rc;

	if (!c || iovcnt < 0 || iovcnt > CONN_IOV_MAX || (iovcnt && !iov) ||
	    (flags & ~(MSG_DONTWAIT | MSG_WAITALL | MSG_PEEK)))
		return -EINVAL;
	rc = conn_ready(c);
	if (rc)
		return rc;
	if (c->smcr)
		n = smcr_recvv(c->smcr, iov, iovcnt, flags, c->nonblock || (flags & MSG_DONTWAIT));
	else
		n = tcp_recvv_retry(c, iov, iovcnt, flags);
	if (n == -ECONNRESET && c->smcr)
		atomic_store(&c->reset_reported, true); /* later sends: -EPIPE */
	if (n < 0)
		return n;
	if (!(flags & MSG_PEEK))
		atomic_fetch_add_explicit(&c->bytes_received, (uint64_t)n, memory_order_relaxed);
	return n;
}

int usmc_shutdown(struct usmc_conn *c, int how)
{
	if (!c || (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR))
		return -EINVAL;
	if (c->fd < 0)
		return -ENOTCONN;
	if (c->smcr)
		return smcr_shutdown(c->smcr, how);
	return shutdown(c->fd, how) ? -errno : 0;
}

/* An inherited connection closed in a child of fork(): close the child's
 * copy of the socket and free the child's copy of the memory; the SMC-R
 * state (link group, buffers, progress thread) is the parent's. */
static int conn_forget_forked(struct usmc_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c);
	return 0;
}

int usmc_close(struct usmc_conn *c)
{
	if (!c)
		return -EINVAL;
	if (ctx_forked(c->ctx))
		return conn_forget_forked(c);
	/* In TCP mode the kernel keeps sending unsent data after close(). */
	if (c->smcr) {
		bool kept = smcr_close(c->smcr, false, c->opts.v[USMC_OPT_LINGER_MS],
				       c->opts.v[USMC_OPT_CLOSE_WAIT_MS]);

		c->smcr = NULL;
		if (kept)
			c->fd = -1; /* closed behind the data still unsent */
		else
			shutdown(c->fd, SHUT_RDWR); /* as Linux: the active closer shuts it down */
	}
	conn_destroy(c);
	return 0;
}

int usmc_abort(struct usmc_conn *c)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};

	if (!c)
		return -EINVAL;
	if (ctx_forked(c->ctx))
		return conn_forget_forked(c); /* no RST: the parent's connection */
	setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	conn_destroy(c);
	return 0;
}

int usmc_conn_fd(const struct usmc_conn *c)
{
	if (!c)
		return -EINVAL;
	return c->smcr ? smcr_conn_fd(c->smcr) : c->fd;
}

int usmc_conn_setopt(struct usmc_conn *c, enum usmc_opt opt, long value)
{
	return c ? opts_set(&c->opts, opt, value) : -EINVAL;
}

int usmc_conn_getopt(const struct usmc_conn *c, enum usmc_opt opt, long *value)
{
	return c ? opts_get(&c->opts, opt, value) : -EINVAL;
}

static void conn_info_fill(const struct usmc_conn *c, struct usmc_conn_info *info)
{
	socklen_t len;

	memset(info, 0, sizeof(*info));
	info->mode = c->mode;
	info->reason = c->reason;
	info->peer_declined = c->peer_declined;
	info->is_server = c->is_server;
	len = sizeof(info->local);
	getsockname(c->fd, (struct sockaddr *)&info->local, &len);
	if (c->peer_len) {
		memcpy(&info->peer, &c->peer, c->peer_len);
	} else {
		len = sizeof(info->peer);
		getpeername(c->fd, (struct sockaddr *)&info->peer, &len);
	}
	if (c->smcr) {
		info->lgr_id = c->smcr->lgr->id;
		info->smc_version = CLC_V2;
		lgr_engine_stats(c->smcr->lgr, &info->lgr_engine);
		smcr_conn_flow_info(c->smcr, info);
	}
	info->bytes_sent = atomic_load_explicit(&c->bytes_sent, memory_order_relaxed);
	info->bytes_received = atomic_load_explicit(&c->bytes_received, memory_order_relaxed);
}

int usmc_conn_info_sized(const struct usmc_conn *c, struct usmc_conn_info *info, size_t size)
{
	struct usmc_conn_info full;

	if (!c || !info || !size)
		return -EINVAL;
	conn_info_fill(c, &full);
	abi_fill(info, size, &full, sizeof(full));
	return 0;
}

/* usmc_conn_info@USMC_0.1: the 0.1 layout, which ends at bytes_received */
USMC_SYMVER_OLD(usmc_conn_info_v0_1, usmc_conn_info, "USMC_0.1");
int usmc_conn_info_v0_1(const struct usmc_conn *c, struct usmc_conn_info *info);
int usmc_conn_info_v0_1(const struct usmc_conn *c, struct usmc_conn_info *info)
{
	return usmc_conn_info_sized(c, info,
				    USMC_OFFSETOFEND(struct usmc_conn_info, bytes_received));
}

/* ---- TCP options ----------------------------------------------------- */

/* SO_RCVBUF / SO_SNDBUF of an SMC-R connection are its RMB and send buffer. */
static bool is_smcr_bufopt(int level, int optname)
{
	return level == SOL_SOCKET && (optname == SO_RCVBUF || optname == SO_SNDBUF);
}

int usmc_conn_setsockopt(struct usmc_conn *c, int level, int optname, const void *val,
			 socklen_t len)
{
	if (!c || (!val && len))
		return -EINVAL;
	if (c->fd < 0)
		return -ENOTCONN;
	if (c->smcr && is_smcr_bufopt(level, optname))
		return -EOPNOTSUPP; /* fixed by the handshake: USMC_OPT_RMB/SNDBUF_SIZE */
	return setsockopt(c->fd, level, optname, val, len) ? -errno : 0;
}

/* An int answer, truncated to *@len as the kernel does. */
static int put_int_opt(int v, void *val, socklen_t *len)
{
	if (*len > sizeof(v))
		*len = sizeof(v);
	memcpy(val, &v, *len);
	return 0;
}

int usmc_conn_getsockopt(const struct usmc_conn *c, int level, int optname, void *val,
			 socklen_t *len)
{
	if (!c || !len || (!val && *len))
		return -EINVAL;
	if (c->fd < 0)
		return -ENOTCONN;
	if (c->smcr && is_smcr_bufopt(level, optname))
		return put_int_opt(
			(int)(optname == SO_RCVBUF ? c->smcr->rx.rmb_len : c->smcr->snd_len), val,
			len);
	if (c->smcr && level == SOL_SOCKET && optname == SO_ERROR) {
		int err;

		pthread_mutex_lock(&c->smcr->lock);
		err = c->smcr->err;
		pthread_mutex_unlock(&c->smcr->lock);
		if (err)
			return put_int_opt(-err, val, len);
	}
	return getsockopt(c->fd, level, optname, val, len) ? -errno : 0;
}
