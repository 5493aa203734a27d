// SPDX-License-Identifier: MIT
/*
 * libusmc's own descriptors out of the application's way (docs/preload.md).
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
 * starts from there (pthread_create below passes the flag on).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/eventfd.h>
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

/* ---- threads libusmc starts inherit in_lib --------------------------------------- */

struct tramp {
	void *(*fn)(void *);
	void *arg;
};

static void *tramp_main(void *p)
{
	struct tramp t = *(struct tramp *)p;

	free(p);
	in_lib_thread();
	return t.fn(t.arg);
}

PRELOAD_EXPORT int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
				  void *arg)
{
	struct tramp *t;
	int rc;

	P_INIT();
	if (!in_lib || !(t = malloc(sizeof(*t))))
		return R.pthread_create(th, attr, fn, arg);
	t->fn = fn;
	t->arg = arg;
	rc = R.pthread_create(th, attr, tramp_main, t);
	if (rc)
		free(t);
	return rc;
}

/* ---- the calls that open descriptors ------------------------------------------------ */

#define RELOCATED(call)                                      \
	do {                                                 \
		int fd_;                                     \
		P_INIT();                                    \
		fd_ = (call);                                \
		return in_lib ? preload_relocate(fd_) : fd_; \
	} while (0)

PRELOAD_EXPORT int socket(int domain, int type, int proto)
{
	RELOCATED(R.socket(domain, type, proto));
}

PRELOAD_EXPORT int socketpair(int domain, int type, int proto, int sv[2])
{
	int rc;

	P_INIT();
	rc = R.socketpair(domain, type, proto, sv);
	if (!rc && in_lib) {
		sv[0] = preload_relocate(sv[0]);
		sv[1] = preload_relocate(sv[1]);
	}
	return rc;
}

PRELOAD_EXPORT int eventfd(unsigned int initval, int flags)
{
	RELOCATED(R.eventfd(initval, flags));
}

PRELOAD_EXPORT int epoll_create(int size)
{
	RELOCATED(R.epoll_create(size));
}

PRELOAD_EXPORT int epoll_create1(int flags)
{
	RELOCATED(R.epoll_create1(flags));
}

/* open()'s third argument is there only with O_CREAT or O_TMPFILE. */
static bool open_takes_mode(int flags)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

#define OPEN_MODE(flags, mode)                                           \
	do {                                                             \
		va_list ap_;                                             \
		va_start(ap_, flags);                                    \
		mode = open_takes_mode(flags) ? va_arg(ap_, mode_t) : 0; \
		va_end(ap_);                                             \
	} while (0)

PRELOAD_EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode;

	OPEN_MODE(flags, mode);
	RELOCATED(R.open(path, flags, mode));
}

PRELOAD_EXPORT int open64(const char *path, int flags, ...)
{
	mode_t mode;

	OPEN_MODE(flags, mode);
	RELOCATED(R.open64(path, flags, mode));
}

PRELOAD_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode;

	OPEN_MODE(flags, mode);
	RELOCATED(R.openat(dirfd, path, flags, mode));
}

PRELOAD_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode;

	OPEN_MODE(flags, mode);
	RELOCATED(R.openat64(dirfd, path, flags, mode));
}
