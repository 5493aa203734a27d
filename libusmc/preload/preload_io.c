// SPDX-License-Identifier: MIT
/*
 * Data calls of the preload (docs/preload.md): read/write, readv/writev,
 * recv/send, recvfrom/sendto, recvmsg/sendmsg, recvmmsg/sendmmsg and their
 * _FORTIFY_SOURCE variants. Only SMC-R connections (and connects in
 * progress) are in the table; everything else goes straight to libc.
 */
#include <stdlib.h>

#include "preload.h"

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
