/* SPDX-License-Identifier: MIT */
/*
 * How the accept thread takes connections from the kernel's listen socket:
 * a small set of operations with two implementations, chosen once per
 * listener by the accept thread (docs/listener.md, "Which mode"):
 *
 *   accept_uring_ops  io_uring multishot accept while the listener has room
 *                     to spare, accept4() near the cap (accept_uring.c);
 *   accept_epoll_ops  the listen socket in the accept thread's epoll set
 *                     and a burst of accept4() per event (accept_epoll.c).
 *
 * Every operation runs on the accept thread. A backend hands back what it
 * took (next()) and says whether the epoll set has events (wait()), as
 * Redis's ae_epoll.c aeApiPoll() returns the fired events to ae.c: the
 * accept thread's loop (accept_thread.c) serves them; no backend calls it.
 * The epoll set itself (wake eventfd, probes, listen socket) belongs to the
 * accept thread; a backend only decides whether the listen socket is in it,
 * and where the thread sleeps.
 */
#ifndef USMC_ACCEPT_BACKEND_H
#define USMC_ACCEPT_BACKEND_H

#include <errno.h>
#include <stdbool.h>
#include <sys/socket.h>

struct usmc_listener;

/*
 * Accepted sockets stay blocking, as connections use them (conn.c): every
 * read the listener does on them is MSG_DONTWAIT, and its one write, a
 * DECLINE, always fits a new socket's send buffer. That saves the two
 * fcntl() calls per connection that O_NONBLOCK would cost to undo.
 */
#define ACCEPT_FLAGS SOCK_CLOEXEC

/* The epoll data of the listen socket and of the wake eventfd in the accept
 * thread's set: addresses of the listener's own fields, never a probe's. */
#define ACCEPT_TAG_LFD(l)  ((void *)&(l)->lfd)
#define ACCEPT_TAG_WAKE(l) ((void *)&(l)->wakefd)

/* An accept that failed with @err left the connection in the kernel's
 * queue for want of a descriptor or of memory: taking it again at once
 * fails again (accept_thread.c backs off). */
static inline bool accept_out_of_fds(int err)
{
	return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/* wait(): the epoll set has nothing to say this round. */
#define ACCEPT_EPOLL_SKIP (-2)

struct accept_backend_ops {
	const char *name;
	/* Set up; false when this kernel or its policy does not allow it
	 * (the caller then uses the next backend). */
	bool (*setup)(struct usmc_listener *l);
	/* Take connections from the kernel while @room > 0; none at 0. */
	void (*take)(struct usmc_listener *l, unsigned int room);
	/* Sleep until an event or @timeout_ms (-1: no timeout). Returns how
	 * long the accept thread then waits on its epoll set for its events
	 * (0: it looks without waiting), or ACCEPT_EPOLL_SKIP; the sockets
	 * that came are next()'s. */
	int (*wait)(struct usmc_listener *l, int timeout_ms);
	/* The next socket taken, in order, to be served now that the
	 * listener has @room; -1 when there is none to serve now (none, or
	 * held back at the cap for a later call). */
	int (*next)(struct usmc_listener *l, unsigned int room);
	/* Stop, and close every socket taken that nobody will accept. */
	void (*teardown)(struct usmc_listener *l);
};

extern const struct accept_backend_ops accept_uring_ops;
extern const struct accept_backend_ops accept_epoll_ops;

/* accept4 mode's operations, which the io_uring backend uses near the cap,
 * and the accept thread when the listen socket is readable: */

/* Poll the listen socket in the epoll set for EPOLLIN while @room > 0. */
void accept_epoll_take(struct usmc_listener *l, unsigned int room);

/* Up to @max sockets from the kernel's queue into @fds, with accept4();
 * how many (fewer: the queue is empty, or accept4() failed; for want of
 * descriptors it notes l->nofd_err). */
unsigned int accept_epoll_burst(struct usmc_listener *l, int *fds, unsigned int max);

#endif
