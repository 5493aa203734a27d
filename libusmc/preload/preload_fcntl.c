// SPDX-License-Identifier: MIT
/*
 * fcntl(), fcntl64() and ioctl() (docs/preload.md): O_NONBLOCK is the
 * application's to see and set, whatever the library's files need; the
 * few ioctls a stream socket answers, for an SMC-R connection.
 */
#include <fcntl.h>
#include <linux/sockios.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/ioctl.h>

#include "preload.h"

/* O_NONBLOCK as the application sets it; the real file keeps what the
 * library needs (non-blocking for a listener or a readiness socketpair). */
static int setfl(struct pobj *o, int fd, int fl, int (*f)(int, int, ...))
{
	int rc = 0;

	pthread_mutex_lock(&o->lock);
	o->nonblock = (fl & O_NONBLOCK) != 0;
	switch (o->kind) {
	case PO_SMCR:
	case PO_LISTEN:
		rc = f(fd, F_SETFL, fl | O_NONBLOCK);
		break;
	case PO_CONNECTING:
		if (!o->bg)
			rc = f(fd, F_SETFL, fl);
		break;
	case PO_FAILED:
	case PO_PLAIN:
		rc = f(fd, F_SETFL, fl);
		break;
	}
	pthread_mutex_unlock(&o->lock);
	return rc;
}

static int do_fcntl(int fd, int cmd, void *arg, bool is64)
{
	int (*f)(int, int, ...);
	struct pobj *o;
	int rc;

	P_INIT();
	f = is64 ? R.fcntl64 : R.fcntl;
	switch (cmd) {
	case F_DUPFD:
	case F_DUPFD_CLOEXEC:
		rc = f(fd, cmd, (int)(long)arg);
		return rc >= 0 && tab_peek(fd) ? dup_managed(fd, rc) : tab_fresh(rc);
	case F_GETFL:
	case F_SETFL:
		o = tab_peek(fd) ? obj_get(fd) : NULL;
		if (!o)
			return f(fd, cmd, arg);
		if (cmd == F_SETFL) {
			rc = setfl(o, fd, (int)(long)arg, f);
		} else {
			rc = f(fd, F_GETFL);
			if (rc >= 0 && o->kind != PO_FAILED && o->kind != PO_PLAIN)
				rc = (rc & ~O_NONBLOCK) | (o->nonblock ? O_NONBLOCK : 0);
		}
		obj_put(o);
		return rc;
	}
	return f(fd, cmd, arg);
}

/* The third argument of fcntl() and ioctl(), whatever its type: a word. */
#define VA_WORD(last, word)                 \
	do {                                \
		va_list ap_;                \
		va_start(ap_, last);        \
		word = va_arg(ap_, void *); \
		va_end(ap_);                \
	} while (0)

PRELOAD_EXPORT int fcntl(int fd, int cmd, ...)
{
	void *arg;

	VA_WORD(cmd, arg);
	return do_fcntl(fd, cmd, arg, false);
}

PRELOAD_EXPORT int fcntl64(int fd, int cmd, ...)
{
	void *arg;

	VA_WORD(cmd, arg);
	return do_fcntl(fd, cmd, arg, true);
}

/* Bytes an SMC-R connection has to read (FIONREAD): a peek. */
static int smcr_inq(struct pobj *o)
{
	socklen_t len = sizeof(int);
	int rmb = 0;
	ssize_t n;
	void *buf;

	if (usmc_conn_getsockopt(o->c, SOL_SOCKET, SO_RCVBUF, &rmb, &len) || rmb <= 0)
		rmb = 1 << 20;
	buf = malloc((size_t)rmb);
	if (!buf)
		return -ENOMEM;
	n = usmc_recv(o->c, buf, (size_t)rmb, MSG_PEEK | MSG_DONTWAIT);
	free(buf);
	return n >= 0 ? (int)n : n == -EAGAIN ? 0 : (int)n;
}

PRELOAD_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	struct pobj *o;
	void *arg;
	int rc;

	VA_WORD(req, arg);
	P_INIT();
	o = tab_peek(fd) ? obj_get(fd) : NULL;
	if (!o)
		return R.ioctl(fd, req, arg);
	if (req == FIONBIO) {
		int fl = R.fcntl(fd, F_GETFL);

		rc = fl < 0 ? -1
			    : setfl(o, fd, *(int *)arg ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK),
				    R.fcntl);
	} else if (o->kind != PO_SMCR) {
		rc = R.ioctl(fd, req, arg);
	} else if (o->pid != my_pid) {
		count_forked();
		rc = (int)set_err(-ENOTCONN);
	} else if (req == FIONREAD) {
		rc = smcr_inq(o);
		if (rc >= 0) {
			*(int *)arg = rc;
			rc = 0;
		} else {
			rc = (int)set_err(rc);
		}
	} else if (req == SIOCOUTQ || req == SIOCATMARK) {
		*(int *)arg = 0;
		rc = 0;
	} else {
		count_unsupported("ioctl");
		rc = (int)set_err(-ENOTTY);
	}
	obj_put(o);
	return rc;
}
