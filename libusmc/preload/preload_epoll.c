// SPDX-License-Identifier: MIT
/*
 * epoll_ctl, epoll_wait, epoll_pwait and epoll_pwait2 (docs/preload.md).
 *
 * A listener's descriptor is registered through its shadow
 * (preload_listener.c). An SMC-R connection's descriptor is its readiness
 * socketpair end, made readable and writable by whoever runs its link
 * group's completions. Once it is in an epoll set, that set also holds the
 * context's event descriptor (usmc_ctx_event_fd(), readable when a
 * completion comes) and the connection is watched with USMC_EV_FD: the
 * program's own epoll_wait() then runs the completions (usmc_ctx_poll())
 * and sees the pair's readiness at once, instead of the library's progress
 * thread waking for each completion and writing the pair from there.
 *
 * The event descriptor's registration carries EVLOOP_TAG and the
 * descriptor's number as its data: a non-canonical address, so no pointer
 * of the program's can be it. The waits take those events out before the
 * program sees them. It is edge-triggered: a set inherited from a parent,
 * with the parent's descriptor in it, wakes a child once, not for ever.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "../clock.h"
#include "preload.h"

#define EVLOOP_TAG	0x75736d6300000000ull /* "usmc" */
#define EVLOOP_TAG_MASK 0xffffffff00000000ull
#define EVLOOP_BATCH	16 /* usmc_event slots for usmc_ctx_poll(): it reports none */

/* ---- the epoll sets that hold the event descriptor ----------------------------- */

/*
 * A bit per epoll set, by descriptor number, for the sets this process put
 * its event descriptor in: an event loop that deletes and adds a
 * connection at every reply (redis's) then adds it to the set once, not
 * once per ADD (an epoll_ctl() that fails with EEXIST). A number that
 * becomes another file through a call the preload sees (epoll_create,
 * dup2, socket, ...: tab_fresh()) loses its bit; one the kernel hands out
 * behind it (docs/preload.md "close") keeps it until then. Sets numbered
 * from EVSETS_MAX on are asked every time.
 */
#define EVSETS_MAX 65536
static _Atomic uint64_t evsets[EVSETS_MAX / 64];

static bool evset_holds(int epfd)
{
	return epfd >= 0 && epfd < EVSETS_MAX &&
	       (atomic_load_explicit(&evsets[epfd / 64], memory_order_relaxed) >> (epfd % 64) & 1);
}

static void evset_mark(int epfd)
{
	if (epfd >= 0 && epfd < EVSETS_MAX)
		atomic_fetch_or_explicit(&evsets[epfd / 64], 1ull << (epfd % 64),
					 memory_order_relaxed);
}

void evloop_set_gone(int fd)
{
	if (evset_holds(fd))
		atomic_fetch_and_explicit(&evsets[fd / 64], ~(1ull << (fd % 64)),
					  memory_order_relaxed);
}

/* A child's sets hold its parent's event descriptor, not its own. */
void evloop_fork_child(void)
{
	for (size_t i = 0; i < EVSETS_MAX / 64; i++)
		atomic_store_explicit(&evsets[i], 0, memory_order_relaxed);
}

/* ---- the connections whose completions the program's waits run --------------- */

/* Requires o->lock: @o is PO_SMCR, in epoll set @epfd now. */
void evloop_register(struct pobj *o, int epfd)
{
	struct epoll_event ee = {.events = EPOLLIN | EPOLLET};
	int efd, err = errno; /* the program's call succeeded: errno as it was */

	if (o->noloop || o->pid != my_pid)
		return;
	efd = preload_ctx_event_fd();
	if (efd < 0)
		return;
	ee.data.u64 = EVLOOP_TAG | (uint32_t)efd;
	if (!evset_holds(epfd) && R.epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ee) && errno != EEXIST) {
		/* a wait on @epfd would not run them: the library's thread does */
		evloop_forgo_locked(o);
		errno = err;
		return;
	}
	evset_mark(epfd);
	if (!o->looped)
		o->looped = IN_LIB(usmc_conn_watch(o->c, USMC_EV_FD, NULL)) == 0;
	errno = err;
}

/* Requires o->lock: the library's thread runs @o's completions from now on. */
void evloop_forgo_locked(struct pobj *o)
{
	o->noloop = true;
	if (o->looped && o->c)
		(void)IN_LIB(usmc_conn_watch(o->c, 0, NULL));
	o->looped = false;
}

int evloop_fd(struct pobj *o)
{
	int fd = -1;

	pthread_mutex_lock(&o->lock);
	if (o->looped)
		fd = preload_ctx_event_fd();
	pthread_mutex_unlock(&o->lock);
	return fd;
}

void evloop_forgo(struct pobj *o)
{
	pthread_mutex_lock(&o->lock);
	if (o->kind == PO_SMCR && !o->noloop)
		evloop_forgo_locked(o);
	pthread_mutex_unlock(&o->lock);
}

/* ---- epoll_ctl ------------------------------------------------------------------ */

/* The events the kernel lets go with EPOLLEXCLUSIVE (fs/eventpoll.c) */
#define EXCLUSIVE_OK \
	(EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE)

/*
 * epoll_ctl() of listener shadow @sfd. In direct mode the shadow is an
 * epoll set (usmc_listener_fd()), for which the kernel refuses
 * EPOLLEXCLUSIVE (EINVAL), and a pre-fork server's workers ask it for
 * their listening socket (nginx's, with accept_mutex off): they would
 * exit. So a request the socket would take goes in without the flag. The
 * cost is a shared wake-up: every set that holds the listener wakes for a
 * connection and one takes it (usmc_accept(): the others get EAGAIN), as
 * the workers' accept threads did before direct mode. An eventfd shadow
 * keeps the flag.
 */
static int shadow_epoll_ctl(int epfd, int op, int sfd, struct epoll_event *ev)
{
	struct epoll_event plain;
	int rc = R.epoll_ctl(epfd, op, sfd, ev);

	if (rc == 0 || errno != EINVAL || op != EPOLL_CTL_ADD || !ev ||
	    !(ev->events & EPOLLEXCLUSIVE) || (ev->events & ~(uint32_t)EXCLUSIVE_OK))
		return rc;
	plain = *ev;
	plain.events &= ~(uint32_t)EPOLLEXCLUSIVE;
	return R.epoll_ctl(epfd, op, sfd, &plain);
}

PRELOAD_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct pobj *o;
	int target = fd, rc, act = 0;

	P_INIT();
	o = tab_peek(fd) ? obj_get(fd) : NULL;
	if (!o)
		return R.epoll_ctl(epfd, op, fd, ev);
	pthread_mutex_lock(&o->lock);
	if (o->kind == PO_LISTEN) {
		act = listener_activate(o, fd);
		if (!act)
			target = shadow_fd(o, fd);
		if (target < 0) {
			pthread_mutex_unlock(&o->lock);
			obj_put(o);
			return (int)set_err(-ENOMEM);
		}
	}
	if (act > 0) {
		pthread_mutex_unlock(&o->lock);
		listener_giveup(o, fd, act);
		obj_put(o);
		return R.epoll_ctl(epfd, op, fd, ev);
	}
	rc = o->kind == PO_LISTEN ? shadow_epoll_ctl(epfd, op, target, ev)
				  : R.epoll_ctl(epfd, op, fd, ev);
	if (rc == 0)
		regs_record(o, epfd, op, fd, ev);
	/* a MOD's set got the event descriptor at the ADD, and an ADD's
	 * set at its first (redis changes its registrations at every
	 * reply: no system call more for it) */
	if (rc == 0 && o->kind == PO_SMCR &&
	    (op == EPOLL_CTL_ADD || (op == EPOLL_CTL_MOD && !o->looped)))
		evloop_register(o, epfd);
	pthread_mutex_unlock(&o->lock);
	obj_put(o);
	return rc;
}

/* ---- epoll_wait, epoll_pwait, epoll_pwait2 -------------------------------------- */

enum wait_kind { W_WAIT, W_PWAIT, W_PWAIT2 };

struct wait_call {
	enum wait_kind kind;
	int epfd, max;
	struct epoll_event *ev;
	const sigset_t *mask;
	int64_t deadline_ns; /* -1: none */
};

/* The real wait of @w for what is left of its time. */
static int wait_again(const struct wait_call *w)
{
	int64_t left = w->deadline_ns < 0 ? -1 : w->deadline_ns - (int64_t)clock_now_ns();
	struct timespec ts;

	if (w->deadline_ns >= 0 && left < 0)
		left = 0;
	if (w->kind == W_PWAIT2) {
		ts.tv_sec = left / 1000000000;
		ts.tv_nsec = left % 1000000000;
		return R.epoll_pwait2(w->epfd, w->ev, w->max, left < 0 ? NULL : &ts, w->mask);
	}
	/* milliseconds, rounded up: never back before the time */
	left = left < 0 ? -1 : (left + 999999) / 1000000;
	if (left > INT32_MAX)
		left = INT32_MAX;
	return w->kind == W_PWAIT ? R.epoll_pwait(w->epfd, w->ev, w->max, (int)left, w->mask)
				  : R.epoll_wait(w->epfd, w->ev, w->max, (int)left);
}

/* Take the event descriptors' events out of @ev[0..@n); returns how many
 * events are left, and whether this process's descriptor was among them. */
static int take_tags(struct epoll_event *ev, int n, bool *mine)
{
	int k = 0, efd = -2;

	for (int i = 0; i < n; i++) {
		if ((ev[i].data.u64 & EVLOOP_TAG_MASK) != EVLOOP_TAG) {
			ev[k++] = ev[i];
			continue;
		}
		if (efd == -2)
			efd = preload_ctx_event_fd();
		if ((uint32_t)ev[i].data.u64 == (uint32_t)efd)
			*mine = true;
	}
	return k;
}

void evloop_run(void)
{
	struct usmc_event ev[EVLOOP_BATCH];
	struct usmc_ctx *ctx = preload_ctx();

	if (ctx)
		(void)IN_LIB(usmc_ctx_poll(ctx, ev, EVLOOP_BATCH, 0));
}

/* The program's wait @w, whose first real wait returned @n. */
static int wait_done(struct wait_call *w, int n)
{
	for (int rounds = 0;; rounds++) {
		bool mine = false;

		if (n <= 0)
			return n;
		n = take_tags(w->ev, n, &mine);
		if (mine)
			evloop_run();
		/* nothing but the tag: the run made a pair ready, or nothing
		 * did, and the program waits for what is left of its time (a
		 * wait of 0 looks once more) */
		if (n > 0 || (w->deadline_ns == 0 && rounds > 0))
			return n;
		n = wait_again(w);
	}
}

static int64_t deadline_of_ms(int timeout_ms)
{
	if (timeout_ms < 0)
		return -1;
	return timeout_ms ? (int64_t)clock_now_ns() + (int64_t)timeout_ms * 1000000 : 0;
}

PRELOAD_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	struct wait_call w;

	P_INIT();
	if (in_lib)
		return R.epoll_wait(epfd, ev, max, timeout);
	w = (struct wait_call){W_WAIT, epfd, max, ev, NULL, deadline_of_ms(timeout)};
	return wait_done(&w, R.epoll_wait(epfd, ev, max, timeout));
}

PRELOAD_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
			       const sigset_t *mask)
{
	struct wait_call w;

	P_INIT();
	if (in_lib)
		return R.epoll_pwait(epfd, ev, max, timeout, mask);
	w = (struct wait_call){W_PWAIT, epfd, max, ev, mask, deadline_of_ms(timeout)};
	return wait_done(&w, R.epoll_pwait(epfd, ev, max, timeout, mask));
}

PRELOAD_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max,
				const struct timespec *timeout, const sigset_t *mask)
{
	struct wait_call w;

	P_INIT();
	if (in_lib || !R.epoll_pwait2)
		return R.epoll_pwait2 ? R.epoll_pwait2(epfd, ev, max, timeout, mask)
				      : (int)set_err(-ENOSYS);
	w = (struct wait_call){W_PWAIT2, epfd, max, ev, mask, -1};
	if (timeout && timeout->tv_sec >= 0 && timeout->tv_nsec >= 0)
		w.deadline_ns = timeout->tv_sec || timeout->tv_nsec
					? (int64_t)clock_now_ns() + timeout->tv_sec * 1000000000 +
						  timeout->tv_nsec
					: 0;
	return wait_done(&w, R.epoll_pwait2(epfd, ev, max, timeout, mask));
}
