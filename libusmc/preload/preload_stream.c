// SPDX-License-Identifier: MIT
/*
 * The data path of an SMC-R connection (docs/preload.md), under every data
 * call of the preload (preload_io.c, preload_sendfile.c).
 *
 * Blocking is the preload's: libusmc is called with MSG_DONTWAIT and the
 * wait is a poll() of the connection's readiness descriptor, so signals
 * interrupt it (EINTR) and SO_RCVTIMEO/SO_SNDTIMEO apply, as for a socket.
 */
#include <limits.h>
#include <stdlib.h>

#include "../clock.h"
#include "preload.h"

#define IOV_LOCAL 16

/*
 * Wait up to @timeout_ms for @events on @o's readiness descriptor: 0, or
 * -EAGAIN at the timeout, or a negative errno (-EINTR: a signal). When the
 * program's epoll waits run @o's completions (preload_epoll.c), this wait
 * runs them too: nobody else does.
 */
static int po_wait(struct pobj *o, short events, int timeout_ms)
{
	struct pollfd p[2] = {{.fd = usmc_conn_fd(o->c), .events = events},
			      {.fd = evloop_fd(o), .events = POLLIN}};
	int64_t deadline = timeout_ms < 0 ? -1 : clock_now_ms() + timeout_ms;

	for (;;) {
		int64_t left = deadline < 0 ? -1 : deadline - clock_now_ms();
		int n = R.poll(p, 2, deadline < 0 ? -1 : left > 0 ? (int)left : 0);

		if (n < 0)
			return -errno;
		if (n == 0)
			return -EAGAIN;
		if (p[0].revents)
			return 0;
		evloop_run();
	}
}

/* The state checks common to all data calls: 0 = go on with the SMC-R
 * connection; else the call's result (-1 with errno, PO_PASS, PO_RETRY). */
ssize_t po_enter(struct pobj *o, bool nb)
{
	int rc;

	switch (o->kind) {
	case PO_SMCR:
		if (o->pid == my_pid)
			return 0;
		count_forked();
		return set_err(-ENOTCONN);
	case PO_CONNECTING:
		rc = conn_finish(o, !nb);
		if (rc == 0)
			return PO_RETRY;
		return set_err(rc == -EINPROGRESS ? -EAGAIN : rc);
	case PO_FAILED:
		rc = failed_take(o);
		return rc ? set_err(-rc) : PO_RETRY;
	default:
		return PO_PASS; /* a listener: the kernel's answer */
	}
}

/* A private copy of @iov that can be advanced. */
struct iovcur {
	struct iovec *v; /* the first piece left */
	int n;
	struct iovec *mem; /* local, or allocated for a long vector */
	struct iovec local[IOV_LOCAL];
};

static int iovcur_init(struct iovcur *ic, const struct iovec *iov, int n, size_t *total)
{
	if (n < 0 || n > IOV_MAX || (n && !iov))
		return -EINVAL;
	ic->mem = n <= IOV_LOCAL ? ic->local : malloc((size_t)n * sizeof(*iov));
	if (!ic->mem)
		return -ENOMEM;
	memcpy(ic->mem, iov, (size_t)n * sizeof(*iov));
	ic->v = ic->mem;
	ic->n = n;
	*total = 0;
	for (int i = 0; i < n; i++)
		*total += iov[i].iov_len;
	return 0;
}

static void iovcur_advance(struct iovcur *ic, size_t k)
{
	while (ic->n && k >= ic->v->iov_len) {
		k -= ic->v->iov_len;
		ic->v++;
		ic->n--;
	}
	if (ic->n && k) {
		ic->v->iov_base = (char *)ic->v->iov_base + k;
		ic->v->iov_len -= k;
	}
}

static void iovcur_free(struct iovcur *ic)
{
	if (ic->mem != ic->local)
		free(ic->mem);
}

/* Flags an SMC-R connection does not have: 0, or the call's result. */
static ssize_t po_refuse(int flags, bool rx)
{
	if (flags & MSG_OOB) {
		count_unsupported("MSG_OOB");
		return set_err(-EOPNOTSUPP);
	}
	if (rx && (flags & MSG_ERRQUEUE)) {
		count_unsupported("MSG_ERRQUEUE");
		return set_err(-EAGAIN);
	}
	return 0;
}

/* Read @want bytes into @ic: all of them with MSG_WAITALL, else what is there. */
static ssize_t recv_loop(struct pobj *o, struct iovcur *ic, size_t want, int flags, bool nb)
{
	size_t got = 0;

	for (;;) {
		ssize_t n = usmc_recvv(o->c, ic->v, ic->n, MSG_DONTWAIT | (flags & MSG_PEEK));

		if (n > 0) {
			got += (size_t)n;
			if (!(flags & MSG_WAITALL) || (flags & MSG_PEEK) || got == want)
				return (ssize_t)got;
			iovcur_advance(ic, (size_t)n);
			continue;
		}
		if (n == 0)
			return (ssize_t)got; /* end of the stream */
		if (n == -EAGAIN && !nb)
			n = po_wait(o, POLLIN, o->rcvtimeo_ms);
		if (n == 0)
			continue;
		return got ? (ssize_t)got : set_err(n);
	}
}

/* Send the @want bytes of @ic: a blocking socket takes everything, a
 * non-blocking one what fits. */
static ssize_t send_loop(struct pobj *o, struct iovcur *ic, size_t want, int flags, bool nb)
{
	size_t sent = 0;

	for (;;) {
		ssize_t n = usmc_sendv(o->c, ic->v, ic->n, MSG_DONTWAIT | (flags & MSG_MORE));

		if (n > 0) {
			sent += (size_t)n;
			if (sent == want || nb)
				return (ssize_t)sent;
			iovcur_advance(ic, (size_t)n);
			continue;
		}
		if (n == 0)
			n = -EAGAIN;
		if (n == -EAGAIN && !nb)
			n = po_wait(o, POLLOUT, o->sndtimeo_ms);
		if (n == 0)
			continue;
		if (sent)
			return (ssize_t)sent;
		if (n == -EPIPE && !(flags & MSG_NOSIGNAL))
			raise(SIGPIPE); /* as the kernel: to the thread that wrote */
		return set_err(n);
	}
}

/* A data call on @o: its state checks, then the bytes of @iov moved. */
static ssize_t po_io(struct pobj *o, const struct iovec *iov, int iovcnt, int flags, bool rx)
{
	bool nb = o->nonblock || (flags & MSG_DONTWAIT);
	struct iovcur ic;
	size_t want;
	ssize_t r = po_enter(o, nb);
	int rc;

	if (!r)
		r = po_refuse(flags, rx);
	if (r)
		return r;
	rc = iovcur_init(&ic, iov, iovcnt, &want);
	if (rc)
		return set_err(rc);
	if (want)
		r = rx ? recv_loop(o, &ic, want, flags, nb) : send_loop(o, &ic, want, flags, nb);
	iovcur_free(&ic);
	return r;
}

ssize_t po_recv(struct pobj *o, const struct iovec *iov, int iovcnt, int flags)
{
	return po_io(o, iov, iovcnt, flags, true);
}

ssize_t po_send(struct pobj *o, const struct iovec *iov, int iovcnt, int flags)
{
	return po_io(o, iov, iovcnt, flags, false);
}
