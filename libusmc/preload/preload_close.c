// SPDX-License-Identifier: MIT
/*
 * close(), dup(), dup2() and dup3() (docs/preload.md): the table follows
 * the application's descriptors; an object ends with its last one.
 */
#include <fcntl.h>
#include <unistd.h>

#include "preload.h"

PRELOAD_EXPORT int close(int fd)
{
	struct pobj *o;
	int rc;

	P_INIT();
	if (!tab_peek(fd)) /* a lock-free look: most descriptors are not ours */
		return R.close(fd);
	if (getpid() != my_pid) /* a vfork() child: the table is the parent's */
		return R.close(fd);
	o = tab_remove(fd);
	rc = R.close(fd);
	if (o)
		obj_put(o);
	return rc;
}

int dup_managed(int oldfd, int newfd)
{
	struct pobj *o = obj_get(oldfd);

	if (o) {
		if (tab_add(newfd, o))
			count_unsupported("dup beyond the table");
		obj_put(o);
	}
	return newfd;
}

PRELOAD_EXPORT int dup(int fd)
{
	int r;

	P_INIT();
	r = R.dup(fd);
	return r >= 0 && tab_peek(fd) ? dup_managed(fd, r) : r;
}

static int do_dup3(int oldfd, int newfd, int flags, bool three)
{
	struct pobj *victim = NULL;
	int r;

	P_INIT();
	if (oldfd == newfd || (!tab_peek(oldfd) && !tab_peek(newfd)) || getpid() != my_pid)
		return three ? R.dup3(oldfd, newfd, flags) : R.dup2(oldfd, newfd);
	if (R.fcntl(oldfd, F_GETFD) < 0) {
		errno = EBADF;
		return -1;
	}
	if (tab_peek(newfd))
		victim = tab_remove(newfd);
	r = three ? R.dup3(oldfd, newfd, flags) : R.dup2(oldfd, newfd);
	if (r >= 0 && tab_peek(oldfd))
		dup_managed(oldfd, newfd);
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
