// SPDX-License-Identifier: MIT
/*
 * The accept4 backend (accept_backend.h): the listen socket sits in the
 * accept thread's epoll set (level-triggered) while the listener has room,
 * and each of its events takes a burst of non-blocking accept4() calls,
 * bounded by the backlog cap. Used where io_uring cannot run (before Linux
 * 6.1, kernel.io_uring_disabled, seccomp, valgrind) or is switched off
 * (USMC_OPT_ACCEPT_URING=0), and by the io_uring backend for the last
 * connections up to the cap.
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "accept_backend.h"
#include "listen_core.h"

/* Whether the listen socket is polled for EPOLLIN in the epoll set. */
static void poll_lfd(struct usmc_listener *l, bool in)
{
	struct epoll_event ev = {.events = in ? EPOLLIN : 0, .data.ptr = ACCEPT_TAG_LFD(l)};

	if (l->lfd_in != in && !epoll_ctl(l->epfd, EPOLL_CTL_MOD, l->lfd, &ev)) {
		l->lfd_in = in;
		l->lfd_unread = in;
	}
}

void accept_epoll_take(struct usmc_listener *l, unsigned int room)
{
	poll_lfd(l, room > 0);
}

unsigned int accept_epoll_burst(struct usmc_listener *l, int *fds, unsigned int max)
{
	unsigned int n = 0;

	while (n < max) {
		int fd = accept4(l->lfd, NULL, NULL, ACCEPT_FLAGS);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (accept_out_of_fds(errno))
				l->nofd_err = errno; /* the accept thread backs off */
			break;			     /* EAGAIN: the queue is empty */
		}
		fds[n++] = fd;
	}
	return n;
}

static bool epoll_setup(struct usmc_listener *l)
{
	return true; /* the epoll set is the accept thread's, always there */
}

static int epoll_wait_ms(struct usmc_listener *l, int timeout_ms)
{
	return timeout_ms; /* the thread sleeps in its epoll set */
}

static int epoll_next(struct usmc_listener *l, unsigned int room)
{
	/* accept4() stops at the cap: nothing is ever held back, and the
	 * bursts go to the accept thread as they are taken */
	return -1;
}

static void epoll_teardown(struct usmc_listener *l)
{
	/* what the kernel still queues dies with the listen socket */
}

const struct accept_backend_ops accept_epoll_ops = {
	.name = "accept4",
	.setup = epoll_setup,
	.take = accept_epoll_take,
	.wait = epoll_wait_ms,
	.next = epoll_next,
	.teardown = epoll_teardown,
};
