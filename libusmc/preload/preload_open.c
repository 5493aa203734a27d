// SPDX-License-Identifier: MIT
/*
 * The calls that open descriptors or start threads (docs/preload.md):
 * made from libusmc (in_lib), their descriptors go to the top of the
 * range (preload_fds.c) and their threads inherit in_lib.
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
