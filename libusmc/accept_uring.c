// SPDX-License-Identifier: MIT
/*
 * The io_uring accept backend (accept_backend.h; docs/listener.md).
 *
 * One multishot accept on the listen socket posts one completion per
 * accepted socket, and the accept thread sleeps in the ring, not in
 * epoll_wait(): a multishot poll on the epoll set tells it when to look
 * there. The ring is created and every request on it submitted by the
 * accept thread, with deferred task work, so the accepts run inside the one
 * io_uring_enter() the thread sleeps in: no signal interrupts it to run
 * them, no eventfd relays their completions (two wake-ups and three system
 * calls per batch fewer than an eventfd registered in the epoll set), and
 * none of it ever touches the application's threads.
 *
 * A multishot accept cannot stop at a count, so near the backlog cap the
 * backend takes connections as accept_epoll_ops does, with accept4() one at
 * a time, which stops exactly at it.
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accept_backend.h"
#include "clock.h"
#include "listen_core.h"

#define ACCEPT_RING_ENTRIES 64 /* SQ size; the CQ gets twice as many */
#define RING_UD_ACCEPT	    1  /* user_data of the multishot accept */
#define RING_UD_CANCEL	    2  /* user_data of its cancellation */
#define RING_UD_EPOLL	    3  /* user_data of the multishot poll on the epoll set */
/* one issuer (the accept thread), task work run when it waits: see the top */
#define RING_FLAGS	  (IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN)
#define STASH_INITIAL	  16
#define RING_ROOM_DIVISOR 2 /* multishot while room > backlog / this */
#define RING_STOP_WAIT_MS 100

/* The backend's state (listener->ab_data); the accept thread's only. */
struct accept_ring {
	bool on;	 /* the listener takes connections through the ring */
	bool armed;	 /* a multishot accept is outstanding */
	bool cancelling; /* and its cancellation was submitted */
	bool polling;	 /* its multishot poll on the epoll set is armed */
	bool served;	 /* next() just handed out a socket the ring took */
	struct io_uring ring;
	/*
	 * The sockets the ring accepted, in order, from stash[head] on: first
	 * @nheld held back at the cap, then those the last wait() reaped, not
	 * served yet. A multishot accept drains the kernel's whole accept
	 * queue at once, and completions in flight when the cancel goes out
	 * still come: what the listener has no room for stays here, and is
	 * served first, in order, when there is room.
	 */
	int *stash;
	unsigned int head, nstash, stash_cap, nheld;
};

static struct accept_ring *ring_of(struct usmc_listener *l)
{
	return l->ab_data;
}

static int ring_submit_one(struct usmc_listener *l, uint64_t what)
{
	struct accept_ring *ar = ring_of(l);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ar->ring);
	int rc;

	if (!sqe)
		return -EBUSY; /* cannot happen: at most three requests in flight */
	if (what == RING_UD_CANCEL)
		io_uring_prep_cancel64(sqe, RING_UD_ACCEPT, 0);
	else if (what == RING_UD_ACCEPT)
		io_uring_prep_multishot_accept(sqe, l->lfd, NULL, NULL, ACCEPT_FLAGS);
	else
		io_uring_prep_poll_multishot(sqe, l->epfd, POLLIN);
	io_uring_sqe_set_data64(sqe, what);
	rc = io_uring_submit(&ar->ring);
	return rc < 0 ? rc : 0;
}

static void ring_arm(struct usmc_listener *l)
{
	struct accept_ring *ar = ring_of(l);

	if (!ar->armed && !ring_submit_one(l, RING_UD_ACCEPT))
		ar->armed = true;
}

static void ring_cancel(struct usmc_listener *l)
{
	struct accept_ring *ar = ring_of(l);

	/* armed stays true until the request's last completion */
	if (ar->armed && !ar->cancelling && !ring_submit_one(l, RING_UD_CANCEL))
		ar->cancelling = true;
}

/* The poll that wakes the ring's waiter when the epoll set has events. */
static int ring_poll_epoll(struct usmc_listener *l)
{
	struct accept_ring *ar = ring_of(l);
	int rc = 0;

	if (!ar->polling) {
		rc = ring_submit_one(l, RING_UD_EPOLL);
		ar->polling = !rc;
	}
	return rc;
}

/* A socket the ring accepted, behind the others. */
static void stash_push(struct usmc_listener *l, int fd)
{
	struct accept_ring *ar = ring_of(l);

	if (ar->head && ar->nstash == ar->stash_cap) { /* room at the front */
		ar->nstash -= ar->head;
		memmove(ar->stash, ar->stash + ar->head, ar->nstash * sizeof(*ar->stash));
		ar->head = 0;
	}
	if (ar->nstash == ar->stash_cap) {
		unsigned int cap = ar->stash_cap ? 2 * ar->stash_cap : STASH_INITIAL;
		int *st = realloc(ar->stash, cap * sizeof(*st));

		if (!st) {
			listener_refuse(l, fd); /* out of memory: the client sees a reset */
			return;
		}
		ar->stash = st;
		ar->stash_cap = cap;
	}
	ar->stash[ar->nstash++] = fd;
}

/* The oldest socket of the stash, taken off it. */
static int stash_pop(struct accept_ring *ar)
{
	int fd = ar->stash[ar->head++];

	if (ar->head == ar->nstash)
		ar->head = ar->nstash = 0;
	return fd;
}

/* The listener is at its cap, or sockets are held already (they go
 * first): hold back all that the last wait() reaped. */
static void stash_hold_all(struct usmc_listener *l)
{
	struct accept_ring *ar = ring_of(l);

	ar->nheld = ar->nstash - ar->head;
	if (ar->nheld > atomic_load(&l->stash_high))
		atomic_store(&l->stash_high, ar->nheld);
}

/*
 * A multishot accept cannot stop at a count: once armed it takes whatever
 * the kernel queue holds and whatever arrives until its cancellation is
 * processed. So it runs only while the listener has more room than this;
 * the last part up to the cap is taken with accept4(), one at a time,
 * which stops exactly at the cap.
 */
static unsigned int ring_min_room(const struct usmc_listener *l)
{
	return (unsigned int)l->backlog / RING_ROOM_DIVISOR;
}

static void ring_take(struct usmc_listener *l, unsigned int room)
{
	if (ring_of(l)->on && room > ring_min_room(l)) {
		ring_arm(l);
		accept_epoll_take(l, 0);
		return;
	}
	ring_cancel(l);
	accept_epoll_take(l, room); /* accept4 up to the cap */
}

/*
 * next() (accept_backend.h): the sockets held back go first; one the last
 * wait() reaped is served at once only while nothing is held and there is
 * room, else it is held behind the others.
 */
static int ring_next(struct usmc_listener *l, unsigned int room)
{
	struct accept_ring *ar = ring_of(l);
	bool fresh = ar->nstash - ar->head > ar->nheld;

	/* the socket handed out last went in: cancel the multishot accept
	 * now if the room ran low, not after the whole batch */
	if (ar->served && room <= ring_min_room(l))
		ring_take(l, room);
	ar->served = false;
	if (fresh && (ar->nheld || !room)) {
		stash_hold_all(l);
		return -1;
	}
	if (!room || ar->nstash == ar->head)
		return -1;
	if (fresh)
		ar->served = true;
	else
		ar->nheld--;
	return stash_pop(ar);
}

/* The kernel cannot do multishot accept: use accept4 from now on. */
static void ring_give_up(struct usmc_listener *l)
{
	ring_of(l)->on = false;
	atomic_store(&l->uring_on, false);
}

/* One completion of the multishot accept. */
static void ring_accepted(struct usmc_listener *l, const struct io_uring_cqe *cqe)
{
	struct accept_ring *ar = ring_of(l);

	if (!(cqe->flags & IORING_CQE_F_MORE))
		ar->armed = ar->cancelling = false; /* re-armed by the next take() */
	if (cqe->res >= 0)
		stash_push(l, cqe->res);
	else if (cqe->res == -EINVAL || cqe->res == -EOPNOTSUPP)
		ring_give_up(l);
	else if (accept_out_of_fds(-cqe->res))
		l->nofd_err = -cqe->res; /* ended: re-armed after the back-off */
}

/* Handle every completion; true if the epoll set's poll fired. */
static bool ring_reap_all(struct usmc_listener *l)
{
	struct accept_ring *ar = ring_of(l);
	struct io_uring_cqe *cqe;
	bool epoll_ready = false;

	while (!io_uring_peek_cqe(&ar->ring, &cqe)) {
		uint64_t ud = io_uring_cqe_get_data64(cqe);

		if (ud == RING_UD_ACCEPT)
			ring_accepted(l, cqe);
		else if (ud == RING_UD_EPOLL) {
			epoll_ready = true;
			if (!(cqe->flags & IORING_CQE_F_MORE))
				ar->polling = false; /* re-armed on the next round */
		}
		io_uring_cqe_seen(&ar->ring, cqe);
	}
	return epoll_ready;
}

/*
 * Sleep in the ring until a completion or @timeout_ms (the next probe
 * deadline), then reap every completion (the sockets go to next()), and
 * say whether the epoll set is to be read: its poll fired.
 */
static int ring_wait(struct usmc_listener *l, int timeout_ms)
{
	struct accept_ring *ar = ring_of(l);
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;

	/*
	 * Enabling the listen socket in the epoll set wakes the set's pollers
	 * only if its entry is not on the set's ready list already, and a
	 * level-triggered entry goes back on that list each time the set
	 * reports it (fs/eventpoll.c: ep_modify(), ep_send_events()). So the
	 * ring's poll would sleep through connections queued before: read the
	 * set once instead of sleeping.
	 */
	if (l->lfd_unread)
		return 0;
	/* without its poll the epoll set is looked at on every round */
	if (ring_poll_epoll(l))
		timeout_ms = timeout_ms < 0 || timeout_ms > RING_STOP_WAIT_MS ? RING_STOP_WAIT_MS
									      : timeout_ms;
	ts.tv_sec = timeout_ms / 1000;
	ts.tv_nsec = (long long)(timeout_ms % 1000) * (long long)CLOCK_NSEC_PER_MSEC;
	if (io_uring_wait_cqe_timeout(&ar->ring, &cqe, timeout_ms < 0 ? NULL : &ts) && ar->polling)
		return ACCEPT_EPOLL_SKIP; /* timed out (probes_expire() follows) or interrupted */
	return ring_reap_all(l) || !ar->polling ? 0 : ACCEPT_EPOLL_SKIP;
}

/*
 * Create the ring and arm the multishot accept; false if this kernel (or
 * its policy, e.g. kernel.io_uring_disabled) does not allow it. A kernel
 * without multishot accept fails the request at once with -EINVAL.
 */
static bool ring_start(struct usmc_listener *l)
{
	struct accept_ring *ar = ring_of(l);
	struct io_uring_cqe *cqe;

	if (io_uring_queue_init(ACCEPT_RING_ENTRIES, &ar->ring, RING_FLAGS))
		return false; /* before 6.1: no deferred task work */
	ring_arm(l);
	if (!ar->armed || io_uring_get_events(&ar->ring))
		goto fail;
	if (!io_uring_peek_cqe(&ar->ring, &cqe) && cqe->res == -EINVAL &&
	    !(cqe->flags & IORING_CQE_F_MORE)) {
		io_uring_cqe_seen(&ar->ring, cqe);
		ar->armed = false;
		goto fail;
	}
	if (ring_poll_epoll(l))
		goto fail;
	ar->on = true;
	return true;
fail:
	io_uring_queue_exit(&ar->ring); /* cancels whatever is in flight */
	return false;
}

static bool ring_setup(struct usmc_listener *l)
{
	l->ab_data = calloc(1, sizeof(struct accept_ring));
	if (l->ab_data && ring_start(l)) {
		atomic_store(&l->uring_on, true);
		return true;
	}
	free(l->ab_data);
	l->ab_data = NULL;
	return false;
}

/* A completion seen at teardown: close what nobody will take. */
static void ring_reap(struct accept_ring *ar, struct io_uring_cqe *cqe)
{
	if (io_uring_cqe_get_data64(cqe) == RING_UD_ACCEPT) {
		if (cqe->res >= 0)
			close(cqe->res);
		if (!(cqe->flags & IORING_CQE_F_MORE))
			ar->armed = false;
	}
	io_uring_cqe_seen(&ar->ring, cqe);
}

/* Cancel the accept and close what it accepted that nobody took. */
static void ring_teardown(struct usmc_listener *l)
{
	struct accept_ring *ar = ring_of(l);
	struct io_uring_cqe *cqe;

	ring_cancel(l);
	while (ar->armed) {
		struct __kernel_timespec ts = {.tv_nsec = RING_STOP_WAIT_MS * CLOCK_NSEC_PER_MSEC};

		if (io_uring_wait_cqe_timeout(&ar->ring, &cqe, &ts))
			break; /* io_uring_queue_exit() cancels it anyway */
		ring_reap(ar, cqe);
	}
	while (!io_uring_peek_cqe(&ar->ring, &cqe))
		ring_reap(ar, cqe);
	for (unsigned int i = ar->head; i < ar->nstash; i++)
		close(ar->stash[i]);
	free(ar->stash);
	io_uring_queue_exit(&ar->ring);
	free(ar);
	l->ab_data = NULL;
}

const struct accept_backend_ops accept_uring_ops = {
	.name = "io_uring",
	.setup = ring_setup,
	.take = ring_take,
	.wait = ring_wait,
	.next = ring_next,
	.teardown = ring_teardown,
};
