// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "abi.h"
#include "conn.h"
#include "connect_handshake.h"
#include "ctx.h"
#include "error.h"
#include "event.h"
#include "kcompat.h"
#include "smcr_clc.h"
#include "smcr_conn.h"

/* Largest iovec count accepted by the vector calls (as the kernel's). */
#define CONN_IOV_MAX 1024

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

int conn_dismantle(struct usmc_conn *c)
{
	int fd = c->fd;

	ctx_unregister_conn(c->ctx, c); /* first: the stat thread no longer reads it */
	event_conn_forget(c);		/* before the SMC-R state goes */
	connect_hs_free(c->chs);	/* an asynchronous connect that did not end */
	c->chs = NULL;
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

/* The client handshake's inputs from @c (connect_handshake.h). */
static void conn_client_hs_init(struct usmc_conn *c, struct conn_client_hs *h)
{
	*h = (struct conn_client_hs){.kc = c->ctx->kc,
				     .kc_ticket = &c->kc_ticket,
				     .addr = &c->peer,
				     .addr_len = c->peer_len,
				     .nonblock = c->nonblock};
	conn_hs_init(c, &h->hs);
}

/* Decide the mode of an established client connection, waiting. */
static int connect_decide_mode(struct usmc_conn *c)
{
	struct conn_client_hs h;

	conn_client_hs_init(c, &h);
	return conn_apply_handshake(c, connect_hs_decide(&h), &h.hs);
}

/* ---- the asynchronous client handshake (USMC_CONNECT_ASYNC) ---------- */

/* The handshake ended: 0 (the mode is set) or an error, which every later
 * call returns too. */
static int chs_end(struct usmc_conn *c, int rc)
{
	connect_hs_free(c->chs);
	c->chs = NULL;
	if (rc) {
		c->connect_err = rc;
		return rc;
	}
	atomic_fetch_add(&c->ctx->connects, 1);
	return 0;
}

/* A step of the handshake returned @rc: not over yet, or its end. */
static int chs_step_done(struct usmc_conn *c, int rc)
{
	if (rc == SMCR_HS_AWAIT_ANSWER)
		return -EINPROGRESS;
	return chs_end(c, conn_apply_handshake(c, rc, &c->chs->hs));
}

static int connect_finish_async(struct usmc_conn *c)
{
	struct conn_client_hs *h = c->chs;
	int rc;

	if (c->connect_err)
		return c->connect_err;
	if (h->state == CHS_ANSWER)
		return chs_step_done(c, connect_hs_answer(h));
	rc = connect_hs_tcp_done(c->fd);
	if (rc == -EINPROGRESS)
		return rc;
	if (rc)
		return chs_end(c, rc);
	conn_client_hs_init(c, h); /* TCP is connected: the PROPOSAL next */
	return chs_step_done(c, connect_hs_propose(h));
}

int usmc_connect_events(struct usmc_conn *c, int *timeout_ms)
{
	int t = 0, ev = 0;

	if (!c || c->is_server || c->fd < 0)
		return -EINVAL;
	/* else nothing to wait for: usmc_connect_finish() says how it ended */
	if (c->mode == USMC_MODE_CONNECTING && !c->connect_err)
		ev = connect_hs_events(c->chs, &t);
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

/* Connect c->fd, a non-blocking TCP socket the connection owns. */
static int conn_connect_socket(struct usmc_conn *c, const struct sockaddr *addr, socklen_t addrlen,
			       unsigned int flags)
{
	int rc;

	atomic_store(&c->st_fd, c->fd);
	c->nonblock = flags & USMC_NONBLOCK;
	if (c->nonblock && (flags & USMC_CONNECT_ASYNC)) {
		c->chs = connect_hs_new();
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
	rc = connect_hs_wait_tcp(c->fd);
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
	rc = connect_hs_tcp_done(c->fd);
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

/* What every vector call checks first: its arguments (@flags within
 * @allowed), then that the connection is ready for data. */
static int conn_io_start(struct usmc_conn *c, const struct iovec *iov, int iovcnt, int flags,
			 int allowed)
{
	if (!c || iovcnt < 0 || iovcnt > CONN_IOV_MAX || (iovcnt && !iov) || (flags & ~allowed))
		return -EINVAL;
	return conn_ready(c);
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
	int rc = conn_io_start(c, iov, iovcnt, flags, MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE);
	ssize_t n;

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
	int rc = conn_io_start(c, iov, iovcnt, flags, MSG_DONTWAIT | MSG_WAITALL | MSG_PEEK);
	ssize_t n;

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
	event_conn_forget(c); /* out of the event set before the close */
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
