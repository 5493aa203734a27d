// SPDX-License-Identifier: MIT
/*
 * libusmc's own descriptors out of the application's way (docs/preload.md),
 * and the flags of a descriptor the preload sets for the application.
 *
 * An SMC-R connection costs libusmc three descriptors besides the
 * application's (its TCP socket and a readiness socketpair), a link group
 * a few more (the device, its completion channel, an eventfd, an epoll
 * set). Programs size tables by the descriptors they expect to own: wrk's
 * event loop takes descriptors below 10 + 3 x connections only, and failed
 * with "connect" errors once libusmc's took the low numbers. So every
 * descriptor libusmc opens is moved to the top of the range
 * (preload_fd_base(): RLIMIT_NOFILE's soft limit less 256, at most
 * 65280), where the application's lowest-free-number allocation does not
 * reach. "libusmc opens" = a call made while in_lib is set: the preload's
 * own calls into libusmc, the preload's threads, and every thread libusmc
 * starts from there (pthread_create, preload_open.c, passes the flag on).
 */
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "preload.h"

static int fd_base = -1;

int preload_fd_base(void)
{
	struct rlimit rl;
	long top;

	if (fd_base >= 0)
		return fd_base;
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY)
		top = 65536;
	else
		top = rl.rlim_cur > 65536 ? 65536 : (long)rl.rlim_cur;
	fd_base = top > 512 ? (int)(top - 256) : (int)(top / 2);
	return fd_base;
}

int preload_relocate(int fd)
{
	int base = preload_fd_base(), fl, nfd;

	if (fd < 0 || fd >= base)
		return fd;
	fl = R.fcntl(fd, F_GETFD);
	nfd = R.fcntl(fd, fl >= 0 && (fl & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, base);
	if (nfd < 0)
		return fd; /* the range is full up there: keep the low one */
	R.close(fd);
	return nfd;
}

int dup_high(int fd)
{
	int nfd = R.fcntl(fd, F_DUPFD_CLOEXEC, preload_fd_base());

	return nfd >= 0 ? nfd : R.fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

/* ---- a descriptor's flags ------------------------------------------------------------ */

void fd_set_nonblock(int fd, bool nb)
{
	int fl = R.fcntl(fd, F_GETFL);

	if (fl >= 0)
		R.fcntl(fd, F_SETFL, nb ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

void fd_point(int fd, int target, int fdfl)
{
	R.dup3(target, fd, fdfl > 0 && (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0);
}

bool fd_is_inet_tcp(int fd)
{
	int v = 0;
	socklen_t len = sizeof(v);

	if (R.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) || (v != AF_INET && v != AF_INET6))
		return false;
	len = sizeof(v);
	return !R.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &len) && v == IPPROTO_TCP;
}
