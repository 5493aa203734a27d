// SPDX-License-Identifier: MIT
/*
 * close(), close_range(), closefrom(), dup(), dup2() and dup3()
 * (docs/preload.md): the table follows the application's descriptors; an
 * object ends with its last one.
 */
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"

/* Close managed descriptor @fd: out of the table first, so that the
 * number the kernel frees is never found in it. */
static int close_managed(int fd)
{
	struct pobj *o = tab_remove(fd);
	int rc = R.close(fd);

	if (o)
		obj_put(o);
	return rc;
}

PRELOAD_EXPORT int close(int fd)
{
	P_INIT();
	if (!tab_peek(fd)) /* a lock-free look: most descriptors are not ours */
		return R.close(fd);
	if (getpid() != my_pid) /* a vfork() child: the table is the parent's */
		return R.close(fd);
	return close_managed(fd);
}

/* close() of each managed descriptor from @first to @last */
static void close_managed_range(unsigned int first, unsigned int last)
{
	for (int fd = tab_next(first, last); fd >= 0; fd = tab_next((unsigned int)fd + 1, last))
		close_managed(fd);
}

static int real_close_range(unsigned int first, unsigned int last, int flags)
{
	if (R.close_range)
		return R.close_range(first, last, flags);
	return (int)syscall(SYS_close_range, first, last, flags);
}

/*
 * The managed descriptors of the range are closed as close() closes them,
 * then the kernel closes the rest. Straight to the kernel: a call that
 * closes nothing (CLOSE_RANGE_CLOEXEC only marks; an invalid one fails)
 * and a vfork() child's.
 */
PRELOAD_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	P_INIT();
	if (first > last || (flags & ~CLOSE_RANGE_UNSHARE) || getpid() != my_pid)
		return real_close_range(first, last, flags);
	close_managed_range(first, last);
	return real_close_range(first, last, flags);
}

PRELOAD_EXPORT void closefrom(int lowfd)
{
	P_INIT();
	if (getpid() == my_pid)
		close_managed_range(lowfd > 0 ? (unsigned int)lowfd : 0, ~0U);
	if (R.closefrom)
		R.closefrom(lowfd);
	else
		real_close_range(lowfd > 0 ? (unsigned int)lowfd : 0, ~0U, 0);
}

int dup_managed(int oldfd, int newfd)
{
	struct pobj *o = obj_get(oldfd);

	if (!o)
		return tab_fresh(newfd);
	evloop_set_gone(newfd);
	if (tab_add(newfd, o)) /* tab_add() takes a stale entry's place */
		count_unsupported("dup beyond the table");
	obj_put(o);
	return newfd;
}

PRELOAD_EXPORT int dup(int fd)
{
	int r;

	P_INIT();
	r = R.dup(fd);
	return r >= 0 && tab_peek(fd) ? dup_managed(fd, r) : tab_fresh(r);
}

static int do_dup3(int oldfd, int newfd, int flags, bool three)
{
	struct pobj *victim = NULL;
	int r;

	P_INIT();
	if (oldfd == newfd || (!tab_peek(oldfd) && !tab_peek(newfd)) || getpid() != my_pid) {
		r = three ? R.dup3(oldfd, newfd, flags) : R.dup2(oldfd, newfd);
		if (r >= 0 && oldfd != newfd)
			evloop_set_gone(newfd); /* another epoll set, if it is one */
		return r;
	}
	if (R.fcntl(oldfd, F_GETFD) < 0) {
		errno = EBADF;
		return -1;
	}
	if (tab_peek(newfd))
		victim = tab_remove(newfd);
	r = three ? R.dup3(oldfd, newfd, flags) : R.dup2(oldfd, newfd);
	if (r >= 0 && tab_peek(oldfd))
		dup_managed(oldfd, newfd); /* forgets newfd's epoll set too */
	else if (r >= 0)
		evloop_set_gone(newfd);
	if (victim)
		obj_put(victim);
	return r;
}

PRELOAD_EXPORT int dup2(int oldfd, int newfd)
{
	return do_dup3(oldfd, newfd, 0, false);
}

PRELOAD_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	return do_dup3(oldfd, newfd, flags, true);
}
