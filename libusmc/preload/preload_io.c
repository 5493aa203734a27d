// SPDX-License-Identifier: MIT
/*
 * Data calls of the preload (docs/preload.md): read/write, readv/writev,
 * recv/send, recvfrom/sendto, recvmsg/sendmsg, their _FORTIFY_SOURCE
 * variants, sendfile, splice. Only SMC-R connections (and connects in
 * progress) are in the table; everything else goes straight to libc.
 *
 * Blocking is the preload's: libusmc is called with MSG_DONTWAIT and the
 * wait is a poll() of the connection's readiness descriptor, so signals
 * interrupt it (EINTR) and SO_RCVTIMEO/SO_SNDTIMEO apply, as for a socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "preload.h"

#define IOV_LOCAL 16

int po_wait(struct pobj *o, short events, int timeout_ms)
{
	struct pollfd p = {.fd = usmc_conn_fd(o->c), .events = events};
	int n = R.poll(&p, 1, timeout_ms);

	if (n < 0)
		return -errno;
	return n == 0 ? -EAGAIN : 0;
}

/* The state checks common to all data calls: 0 = go on with the SMC-R
 * connection; else the call's result (-1 with errno, PO_PASS, PO_RETRY). */
static ssize_t po_enter(struct pobj *o, bool nb)
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

/* ---- the wrappers --------------------------------------------------------------- */

/* Run @managed on the object of @fd, or @real when @fd is not managed. */
#define DISPATCH(fd, managed, real)                                         \
	do {                                                                \
		P_INIT();                                                   \
		for (;;) {                                                  \
			struct pobj *o = tab_peek(fd) ? obj_get(fd) : NULL; \
			ssize_t r_;                                         \
			if (!o)                                             \
				return real;                                \
			r_ = managed;                                       \
			obj_put(o);                                         \
			if (r_ == PO_PASS)                                  \
				return real;                                \
			if (r_ != PO_RETRY)                                 \
				return r_;                                  \
		}                                                           \
	} while (0)

#define ONE_IOV(buf, len) (&(struct iovec){.iov_base = (void *)(buf), .iov_len = (len)})

PRELOAD_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	DISPATCH(fd, po_recv(o, ONE_IOV(buf, len), 1, 0), R.read(fd, buf, len));
}

PRELOAD_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
	if (len > buflen)
		abort(); /* what glibc's __chk_fail does */
	DISPATCH(fd, po_recv(o, ONE_IOV(buf, len), 1, 0), R.read_chk(fd, buf, len, buflen));
}

PRELOAD_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	DISPATCH(fd, po_send(o, ONE_IOV(buf, len), 1, 0), R.write(fd, buf, len));
}

PRELOAD_EXPORT ssize_t readv(int fd, const struct iovec *iov, int n)
{
	DISPATCH(fd, po_recv(o, iov, n, 0), R.readv(fd, iov, n));
}

PRELOAD_EXPORT ssize_t writev(int fd, const struct iovec *iov, int n)
{
	DISPATCH(fd, po_send(o, iov, n, 0), R.writev(fd, iov, n));
}

PRELOAD_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	DISPATCH(fd, po_recv(o, ONE_IOV(buf, len), 1, flags), R.recv(fd, buf, len, flags));
}

PRELOAD_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	if (len > buflen)
		abort();
	DISPATCH(fd, po_recv(o, ONE_IOV(buf, len), 1, flags),
		 R.recv_chk(fd, buf, len, buflen, flags));
}

PRELOAD_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	DISPATCH(fd, po_send(o, ONE_IOV(buf, len), 1, flags), R.send(fd, buf, len, flags));
}

/* TCP fills no source address: *alen becomes 0, as the kernel's. */
static ssize_t recv_noaddr(struct pobj *o, void *buf, size_t len, int flags, socklen_t *alen)
{
	ssize_t r = po_recv(o, ONE_IOV(buf, len), 1, flags);

	if (r >= 0 && alen)
		*alen = 0;
	return r;
}

PRELOAD_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
				socklen_t *alen)
{
	DISPATCH(fd, recv_noaddr(o, buf, len, flags, alen),
		 R.recvfrom(fd, buf, len, flags, addr, alen));
}

PRELOAD_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
				      struct sockaddr *addr, socklen_t *alen)
{
	if (len > buflen)
		abort();
	DISPATCH(fd, recv_noaddr(o, buf, len, flags, alen),
		 R.recvfrom_chk(fd, buf, len, buflen, flags, addr, alen));
}

/* A connected TCP socket ignores a destination address. */
PRELOAD_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			      const struct sockaddr *addr, socklen_t alen)
{
	DISPATCH(fd, po_send(o, ONE_IOV(buf, len), 1, flags),
		 R.sendto(fd, buf, len, flags, addr, alen));
}

static ssize_t recvmsg_managed(struct pobj *o, struct msghdr *msg, int flags)
{
	ssize_t r;

	if (!msg)
		return set_err(-EFAULT);
	r = po_recv(o, msg->msg_iov, (int)msg->msg_iovlen, flags & ~MSG_CMSG_CLOEXEC);
	if (r >= 0) {
		msg->msg_namelen = 0;
		msg->msg_controllen = 0;
		msg->msg_flags = 0;
	}
	return r;
}

PRELOAD_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	DISPATCH(fd, recvmsg_managed(o, msg, flags), R.recvmsg(fd, msg, flags));
}

static ssize_t sendmsg_managed(struct pobj *o, const struct msghdr *msg, int flags)
{
	if (!msg)
		return set_err(-EFAULT);
	if (msg->msg_controllen)
		count_unsupported("sendmsg control data");
	return po_send(o, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

PRELOAD_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	DISPATCH(fd, sendmsg_managed(o, msg, flags), R.sendmsg(fd, msg, flags));
}

/* recvmmsg/sendmmsg: one message after the other, as a stream socket's
 * are; a later message that would block ends the batch. */
static int mmsg_managed(struct pobj *o, struct mmsghdr *v, unsigned int n, int flags, bool rx)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		ssize_t r = rx ? recvmsg_managed(o, &v[i].msg_hdr, flags)
			       : sendmsg_managed(o, &v[i].msg_hdr, flags);

		if (r < 0) {
			if (r == PO_PASS || r == PO_RETRY)
				return (int)r;
			return i ? (int)i : -1;
		}
		v[i].msg_len = (unsigned int)r;
		if (i == 0)
			flags |= MSG_DONTWAIT;
		if (rx && r == 0)
			return (int)i + 1; /* end of the stream */
	}
	return (int)i;
}

PRELOAD_EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags,
			    struct timespec *timeout)
{
	DISPATCH(fd, mmsg_managed(o, v, n, flags & ~MSG_WAITFORONE, true),
		 R.recvmmsg(fd, v, n, flags, timeout));
}

PRELOAD_EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	DISPATCH(fd, mmsg_managed(o, v, n, flags, false), R.sendmmsg(fd, v, n, flags));
}

/* ---- sendfile, splice ------------------------------------------------------------- */

#define SENDFILE_CHUNK (256 * 1024)

/* sendfile() to an SMC-R connection: the file's bytes through a buffer,
 * from *@off (or the file position, which then advances by what was
 * sent), as much as fits when non-blocking, all of @count otherwise. */
static ssize_t sendfile_managed(struct pobj *o, int in_fd, off_t *off, size_t count)
{
	bool nb = o->nonblock;
	size_t total = 0, chunk_max = SENDFILE_CHUNK;
	off_t pos;
	char *buf;
	ssize_t r = po_enter(o, nb);

	if (r)
		return r;
	pos = off ? *off : lseek(in_fd, 0, SEEK_CUR);
	if (pos < 0)
		return -1;
	if (nb) { /* no more than the send buffer takes: no read in vain */
		socklen_t len = sizeof(int);
		int snd = 0;

		if (!usmc_conn_getsockopt(o->c, SOL_SOCKET, SO_SNDBUF, &snd, &len) && snd > 0 &&
		    (size_t)snd < chunk_max)
			chunk_max = (size_t)snd;
	}
	buf = malloc(count < chunk_max ? (count ? count : 1) : chunk_max);
	if (!buf)
		return set_err(-ENOMEM);
	while (total < count) {
		size_t chunk = count - total < chunk_max ? count - total : chunk_max;
		ssize_t n = pread(in_fd, buf, chunk, pos + (off_t)total), s;

		if (n <= 0) {
			if (n < 0 && !total)
				r = -1;
			break;
		}
		s = po_send(o, ONE_IOV(buf, (size_t)n), 1, MSG_NOSIGNAL);
		if (s < 0) {
			if (!total) {
				r = -1;
				if (errno == EPIPE)
					raise(SIGPIPE);
			}
			break;
		}
		total += (size_t)s;
		if (s < n)
			break; /* non-blocking and full */
	}
	free(buf);
	if (r < 0)
		return r;
	if (off)
		*off = pos + (off_t)total;
	else
		lseek(in_fd, pos + (off_t)total, SEEK_SET);
	return (ssize_t)total;
}

static ssize_t do_sendfile(int out_fd, int in_fd, off_t *off, size_t count, bool is64)
{
	struct pobj *in;

	P_INIT();
	in = tab_peek(in_fd) ? obj_get(in_fd) : NULL;
	if (in) { /* reading from an SMC-R connection: not a file, as the kernel says */
		bool smcr = in->kind == PO_SMCR;

		obj_put(in);
		if (smcr) {
			count_unsupported("sendfile from a connection");
			return set_err(-EINVAL);
		}
	}
	DISPATCH(out_fd, sendfile_managed(o, in_fd, off, count),
		 is64 ? R.sendfile64(out_fd, in_fd, off, count)
		      : R.sendfile(out_fd, in_fd, off, count));
}

PRELOAD_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *off, size_t count)
{
	return do_sendfile(out_fd, in_fd, off, count, false);
}

PRELOAD_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off_t *off, size_t count)
{
	return do_sendfile(out_fd, in_fd, off, count, true);
}

/* splice() to or from an SMC-R connection: through a buffer, with the
 * pipe on the other side (the kernel requires one). */
static ssize_t splice_managed(struct pobj *o, bool to_conn, int pipe_fd, size_t len,
			      unsigned int flags)
{
	bool nb = o->nonblock || (flags & SPLICE_F_NONBLOCK);
	size_t chunk = len < 65536 ? len : 65536;
	ssize_t r = po_enter(o, nb), n;
	char *buf;

	if (r)
		return r;
	if (!chunk)
		return 0;
	buf = malloc(chunk);
	if (!buf)
		return set_err(-ENOMEM);
	if (to_conn) {
		n = R.read(pipe_fd, buf, chunk);
		/* bytes taken from the pipe must all go: blocking send */
		r = n > 0 ? po_send(o, ONE_IOV(buf, (size_t)n), 1, MSG_NOSIGNAL) : n;
	} else {
		int room = 0;

		/* no more than the pipe can take without blocking */
		if (R.ioctl(pipe_fd, FIONREAD, &room) == 0) {
			int cap = R.fcntl(pipe_fd, F_GETPIPE_SZ);

			if (cap > room && (size_t)(cap - room) < chunk)
				chunk = (size_t)(cap - room);
		}
		n = po_recv(o, ONE_IOV(buf, chunk), 1, nb ? MSG_DONTWAIT : 0);
		r = n > 0 ? R.write(pipe_fd, buf, (size_t)n) : n;
	}
	free(buf);
	return r;
}

PRELOAD_EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			      unsigned int flags)
{
	struct pobj *o;

	P_INIT();
	o = tab_peek(fd_in) ? obj_get(fd_in) : NULL;
	if (o) {
		ssize_t r =
			off_in ? set_err(-ESPIPE) : splice_managed(o, false, fd_out, len, flags);

		obj_put(o);
		if (r != PO_PASS && r != PO_RETRY)
			return r;
	}
	o = tab_peek(fd_out) ? obj_get(fd_out) : NULL;
	if (o) {
		ssize_t r = off_out ? set_err(-ESPIPE) : splice_managed(o, true, fd_in, len, flags);

		obj_put(o);
		if (r != PO_PASS && r != PO_RETRY)
			return r;
	}
	return R.splice(fd_in, off_in, fd_out, off_out, len, flags);
}
