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
 * Every operation runs on the accept thread. The epoll set itself (wake
 * eventfd, probes, listen socket) belongs to the accept thread
 * (accept_thread.c); a backend only decides whether the listen socket is
 * in it, and where the thread sleeps.
 */
#ifndef USMC_ACCEPT_BACKEND_H
#define USMC_ACCEPT_BACKEND_H

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

struct accept_backend_ops {
	const char *name;
	/* Set up; false when this kernel or its policy does not allow it
	 * (the caller then uses the next backend). */
	bool (*setup)(struct usmc_listener *l);
	/* Hand sockets held back at the cap to accept_one() while there is
	 * room (io_uring: what the ring delivered after its cancel). */
	void (*serve_held)(struct usmc_listener *l);
	/* Take connections from the kernel while @room > 0; none at 0. */
	void (*take)(struct usmc_listener *l, unsigned int room);
	/* Sleep until an event or @timeout_ms (-1: no timeout) and handle
	 * what came, the epoll set's events included. */
	void (*wait)(struct usmc_listener *l, int timeout_ms);
	/* Stop, and close every socket taken that nobody will accept. */
	void (*teardown)(struct usmc_listener *l);
};

extern const struct accept_backend_ops accept_uring_ops;
extern const struct accept_backend_ops accept_epoll_ops;

/* accept4 mode's operations, which the io_uring backend uses near the cap. */
void accept_epoll_take(struct usmc_listener *l, unsigned int room);
void accept_epoll_burst(struct usmc_listener *l);

#endif
