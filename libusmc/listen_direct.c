// SPDX-License-Identifier: MIT
/*
 * Direct mode (docs/listener.md "Plain TCP"): a connection whose SYN
 * decided TCP needs nothing of the accept thread, so usmc_accept() takes
 * it from the kernel's listen socket itself, in the caller's thread, as a
 * plain server's accept4() does: no hand-off, no eventfd, no wake-up of
 * another thread. The SYN decides in kernel-compat mode (no SMC option, or
 * congested at SYN time: kcompat.h) and when the listener runs without
 * SMC. A connection the SYN did not decide (it signalled SMC) goes to the
 * accept thread's probe, with its place of the backlog taken here.
 *
 * While usmc_accept() takes from the listen socket, the accept thread
 * leaves it alone (accept_cede(): no multishot accept, no epoll entry, one
 * look per LISTEN_APP_LEASE_MS), so no connection wakes two threads; it
 * takes connections again when the application has not looked for that
 * long, so that SMC handshakes go on when the application does not
 * accept.
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "accept_backend.h"
#include "clock.h"
#include "conn.h"
#include "ctx.h"
#include "listen_core.h"

/* Connections one usmc_accept() hands to the probe before it returns: the
 * rest wait for the next call (usmc_listener_fd() stays readable). */
#define DIRECT_BURST 16

int listener_direct_setup(struct usmc_listener *l)
{
	struct epoll_event ev = {.events = EPOLLIN};

	l->afd = l->qfd;
	l->direct = l->opts.v[USMC_OPT_ACCEPT_DIRECT] && (!l->opts.v[USMC_OPT_SMC] || l->kc.active);
	if (!l->direct)
		return 0; /* only the probe knows: everything via the accept thread */
	l->afd = epoll_create1(EPOLL_CLOEXEC);
	if (l->afd < 0)
		return -errno;
	ev.data.fd = l->qfd;
	if (epoll_ctl(l->afd, EPOLL_CTL_ADD, l->qfd, &ev))
		return -errno;
	/* the accept thread's first round says whether there is room */
	ev.events = 0;
	ev.data.fd = l->lfd;
	if (epoll_ctl(l->afd, EPOLL_CTL_ADD, l->lfd, &ev))
		return -errno;
	return 0;
}

void listener_offer_lfd(struct usmc_listener *l, bool on)
{
	struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.fd = l->lfd};

	if (!l->direct)
		return;
	pthread_mutex_lock(&l->afd_lock);
	if (l->afd_lfd != on && !epoll_ctl(l->afd, EPOLL_CTL_MOD, l->lfd, &ev))
		l->afd_lfd = on;
	pthread_mutex_unlock(&l->afd_lock);
}

/* A place of the backlog for a connection taken from the kernel before we
 * know where it goes: the cap holds for those that go to the probe. */
static bool room_reserve(struct usmc_listener *l)
{
	unsigned int h = atomic_load(&l->in_handshake);

	do {
		if (listen_backlog_room(h, atomic_load(&l->queued), (unsigned int)l->backlog) == 0)
			return false;
	} while (!atomic_compare_exchange_weak(&l->in_handshake, &h, h + 1));
	return true;
}

/* A place reserved and not used (the connection went to the caller, or
 * none came): decremented before paused is read, as listener_drop(). */
static void room_release(struct usmc_listener *l)
{
	atomic_fetch_sub(&l->in_handshake, 1);
	if (atomic_load(&l->paused))
		listener_wake(l);
}

/* Nothing to take now (no room, or no descriptor): usmc_listener_fd() stops
 * reporting the kernel's queue until the accept thread, woken here, sees
 * room again or has backed off (accept_thread.c). */
static int stop_offer(struct usmc_listener *l)
{
	listener_offer_lfd(l, false);
	listener_wake(l);
	return -EAGAIN;
}

/* @c goes to the probe, with the place reserved for it. */
static void hand_over(struct usmc_listener *l, struct usmc_conn *c)
{
	pthread_mutex_lock(&l->park_lock);
	conn_fifo_push(&l->handed, c);
	pthread_mutex_unlock(&l->park_lock);
	listener_wake(l);
}

/* One socket from the kernel's queue; -1 with *@err (0: none there). */
static int take_one(struct usmc_listener *l, int *err)
{
	for (;;) {
		int fd = accept4(l->lfd, NULL, NULL, ACCEPT_FLAGS);

		if (fd >= 0 || (errno != EINTR && errno != ECONNABORTED)) {
			*err = fd >= 0 || errno == EAGAIN ? 0 : errno;
			return fd;
		}
	}
}

/*
 * The application looks at the kernel's queue now. If the accept thread
 * takes from it (it took over while the application did not look), tell it
 * once to stop: else both would wake for every connection. The accept
 * thread sets lfd_held before it reads app_ns, this the other way round,
 * so one of the two sees the other (sequentially consistent atomics).
 */
static void app_looks(struct usmc_listener *l)
{
	atomic_store(&l->app_ns, (int64_t)clock_now_ns());
	if (atomic_load(&l->lfd_held) && !atomic_exchange(&l->cede_asked, true))
		listener_wake(l);
}

int listener_direct_accept(struct usmc_listener *l, struct usmc_conn **out)
{
	app_looks(l);
	for (int i = 0; i < DIRECT_BURST; i++) {
		struct usmc_opts o;
		struct usmc_conn *c;
		int fd, err;

		if (!room_reserve(l))
			return stop_offer(l);
		fd = take_one(l, &err);
		if (fd < 0) {
			room_release(l);
			if (!accept_out_of_fds(err))
				return -EAGAIN;
			/* the accept thread backs off and takes over, as when
			 * it meets this itself */
			atomic_store(&l->app_nofd, err);
			atomic_store(&l->app_ns, 0);
			return stop_offer(l);
		}
		c = listener_new_conn(l, fd, &o);
		if (!c) {
			room_release(l);
			continue;
		}
		if (listener_decided_at_syn(l, c, &o)) {
			room_release(l);
			mode_counts_add(&l->modes, c->mode, c->reason);
			*out = c;
			return 0;
		}
		hand_over(l, c); /* stays counted in in_handshake */
	}
	return -EAGAIN;
}
