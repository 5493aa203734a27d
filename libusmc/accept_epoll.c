// SPDX-License-Identifier: MIT
/*
 * The accept4 backend (accept_backend.h): the listen socket sits in the
 * accept thread's epoll set (level-triggered) while the listener has room,
 * and each of its events takes a burst of non-blocking accept4() calls,
 * checked one by one against the backlog cap. Used where io_uring cannot
 * run (before Linux 6.1, kernel.io_uring_disabled, seccomp, valgrind) or
 * is switched off (USMC_OPT_ACCEPT_URING=0), and by the io_uring backend
 * for the last connections up to the cap.
 */
#include <errno.h>
#include <sys/socket.h>

#include "accept_backend.h"
#include "listen.h"

void accept_epoll_take(struct usmc_listener *l, unsigned int room)
{
	accept_poll_lfd(l, room > 0);
}

void accept_epoll_burst(struct usmc_listener *l)
{
	while (accept_room(l) > 0) {
		int fd = accept4(l->lfd, NULL, NULL, ACCEPT_FLAGS);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return; /* EAGAIN, or EMFILE & co: retried on the next event */
		}
		accept_one(l, fd);
	}
}

static bool epoll_setup(struct usmc_listener *l)
{
	return true; /* the epoll set is the accept thread's, always there */
}

static void epoll_serve_held(struct usmc_listener *l)
{
	/* accept4() stops at the cap: nothing is ever held back */
}

static void epoll_teardown(struct usmc_listener *l)
{
	/* what the kernel still queues dies with the listen socket */
}

const struct accept_backend_ops accept_epoll_ops = {
	.name = "accept4",
	.setup = epoll_setup,
	.serve_held = epoll_serve_held,
	.take = accept_epoll_take,
	.wait = accept_dispatch_epoll,
	.teardown = epoll_teardown,
};
