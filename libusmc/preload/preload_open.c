// SPDX-License-Identifier: MIT
/*
 * The calls that open descriptors or start threads (docs/preload.md): a
 * new descriptor has no entry in the table (a stale one goes); made from
 * libusmc (in_lib), their descriptors go to the top of the range
 * (preload_fds.c) and their threads inherit in_lib.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/eventfd.h>

#include "preload.h"

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

int fd_opened(int fd)
{
	/* libusmc's: out of the application's way; their calls never look
	 * at the table, nor may they change it (they may run under tab_lock) */
	return in_lib ? preload_relocate(fd) : tab_fresh(fd);
}

/* fd_opened() of both descriptors of a pair the call @rc made */
static int pair_opened(int rc, int fds[2])
{
	if (!rc) {
		fds[0] = fd_opened(fds[0]);
		fds[1] = fd_opened(fds[1]);
	}
	return rc;
}

#define OPENED(call)                    \
	do {                            \
		P_INIT();               \
		return fd_opened(call); \
	} while (0)

PRELOAD_EXPORT int socket(int domain, int type, int proto)
{
	OPENED(R.socket(domain, type, proto));
}

PRELOAD_EXPORT int socketpair(int domain, int type, int proto, int sv[2])
{
	P_INIT();
	return pair_opened(R.socketpair(domain, type, proto, sv), sv);
}

PRELOAD_EXPORT int pipe(int fds[2])
{
	P_INIT();
	return pair_opened(R.pipe(fds), fds);
}

PRELOAD_EXPORT int pipe2(int fds[2], int flags)
{
	P_INIT();
	return pair_opened(R.pipe2(fds, flags), fds);
}

PRELOAD_EXPORT int eventfd(unsigned int initval, int flags)
{
	OPENED(R.eventfd(initval, flags));
}

PRELOAD_EXPORT int epoll_create(int size)
{
	OPENED(R.epoll_create(size));
}

PRELOAD_EXPORT int epoll_create1(int flags)
{
	OPENED(R.epoll_create1(flags));
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
	OPENED(R.open(path, flags, mode));
}

PRELOAD_EXPORT int open64(const char *path, int flags, ...)
{
	mode_t mode;

	OPEN_MODE(flags, mode);
	OPENED(R.open64(path, flags, mode));
}

PRELOAD_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode;

	OPEN_MODE(flags, mode);
	OPENED(R.openat(dirfd, path, flags, mode));
}

PRELOAD_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode;

	OPEN_MODE(flags, mode);
	OPENED(R.openat64(dirfd, path, flags, mode));
}
