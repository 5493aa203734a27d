// SPDX-License-Identifier: MIT
/*
 * The accept thread (docs/listener.md has the whole design).
 *
 * One thread runs one loop over an epoll set that holds the wake eventfd,
 * every connection being probed and, when connections are taken with
 * accept4(), the listen socket (level-triggered). How it takes connections
 * and where it sleeps is its accept backend's business (accept_backend.h:
 * io_uring multishot accept, or accept4); the backend hands back what it
 * took. This file holds what both share: the loop, what happens to each
 * accepted socket, and flow control at the backlog cap.
 *
 * The thread never waits on a handshake: SMC clients go to the handshake
 * pool (handshake_pool.c), plain clients straight to the accept queue.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "accept_backend.h"
#include "accept_thread.h"
#include "clock.h"
#include "conn.h"
#include "ctx.h"
#include "listen_core.h"
#include "probe.h"
#include "thread_name.h"

#define ACCEPT_EVENTS 64
/* accept4() calls between two looks at the listener's room */
#define ACCEPT_BURST 64
/* Out of descriptors: no connection is taken for this long. */
#define ACCEPT_NOFD_BACKOFF_MS 100

/* Accept thread only writes it, so a plain compare-and-store suffices. */
static void note_backlog_high(struct usmc_listener *l)
{
	unsigned int used = atomic_load(&l->in_handshake) + atomic_load(&l->queued);

	if (used > atomic_load(&l->backlog_high))
		atomic_store(&l->backlog_high, used);
}

/* Tests only: the accept thread took socket @fd from the kernel (defined by
 * a test that proves usmc_accept() took a connection without this thread). */
extern void listen_test_hook_accept_thread_took(int fd) __attribute__((weak));

/* Probe new connection @c, counted in in_handshake already. */
static void accept_probe(struct usmc_listener *l, struct usmc_conn *c, const struct usmc_opts *o)
{
	note_backlog_high(l);
	/* kernel-compat: a client that signalled SMC owes us CLC: wait for it
	 * as for any CLC message, not just the probe time */
	if (probe_new(l, c,
		      o->v[c->kc_peer == KC_PEER_SMC ? USMC_OPT_CLC_TIMEOUT_MS
						     : USMC_OPT_PROBE_MS])) {
		/* out of memory: let the application have it as TCP */
		atomic_fetch_sub(&l->in_handshake, 1);
		listener_finish_tcp(l, c, USMC_REASON_INTERR);
	}
}

/* Probe, classify or queue a socket just taken from the kernel. */
static void accept_one(struct usmc_listener *l, int fd)
{
	struct usmc_opts o;
	struct usmc_conn *c;

	if (listen_test_hook_accept_thread_took)
		listen_test_hook_accept_thread_took(fd);
	c = listener_new_conn(l, fd, &o);
	if (!c)
		return;
	if (listener_decided_at_syn(l, c, &o)) { /* SMC off, or kernel-compat */
		listener_enqueue(l, c);
		note_backlog_high(l);
		return;
	}
	atomic_fetch_add(&l->in_handshake, 1);
	accept_probe(l, c, &o);
}

/* Probe the connections usmc_accept() took from the kernel (direct mode),
 * each counted in in_handshake when it was taken. */
static void probe_handed(struct usmc_listener *l)
{
	struct usmc_conn *c = listener_take_handed(l);

	while (c) {
		struct usmc_conn *next = c->next;

		c->next = NULL;
		accept_probe(l, c, &c->opts);
		c = next;
	}
}

static void wake_event(struct usmc_listener *l)
{
	uint64_t v;

	if (read(l->wakefd, &v, sizeof(v)) < 0) {
		/* spurious: nothing to do */
	}
}

/* The listen socket is readable: take what the kernel queued, up to the
 * room there is. */
static void accept_burst(struct usmc_listener *l)
{
	int fds[ACCEPT_BURST];
	unsigned int room, want, n;

	do {
		room = listener_room(l);
		want = room < ACCEPT_BURST ? room : ACCEPT_BURST;
		n = want ? accept_epoll_burst(l, fds, want) : 0;
		for (unsigned int i = 0; i < n; i++)
			accept_one(l, fds[i]);
	} while (want && n == want);
}

/* Wait up to @timeout_ms on the epoll set and handle its events. */
static void dispatch_epoll(struct usmc_listener *l, int timeout_ms)
{
	struct epoll_event evs[ACCEPT_EVENTS];
	int n;

	l->lfd_unread = false;
	n = epoll_wait(l->epfd, evs, ACCEPT_EVENTS, timeout_ms);
	for (int i = 0; i < n; i++) {
		if (evs[i].data.ptr == ACCEPT_TAG_LFD(l))
			accept_burst(l);
		else if (evs[i].data.ptr == ACCEPT_TAG_WAKE(l))
			wake_event(l);
		else
			probe_event(l, evs[i].data.ptr);
	}
}

/* Serve the sockets the backend took, while the listener has room. */
static void serve_taken(struct usmc_listener *l)
{
	int fd;

	while ((fd = l->ab->next(l, listener_room(l))) >= 0)
		accept_one(l, fd);
}

/*
 * The kernel keeps a connection it cannot hand over for want of a
 * descriptor (RLIMIT_NOFILE) or of memory in its queue, where the
 * level-triggered listen socket reports it again at once and a multishot
 * accept re-armed at once fails again: the thread spun at 100 % CPU. So a
 * backend notes the failure (nofd_err) and the thread stops taking
 * connections for ACCEPT_NOFD_BACKOFF_MS, as nginx disables its accept
 * events for accept_mutex_delay on EMFILE (ngx_event_accept()), then tries
 * again: a descriptor freed meanwhile lets the queue move on. The clients
 * wait in the kernel's queue meanwhile, as at the backlog cap. True while
 * it backs off.
 */
static bool accept_nofd_backoff(struct usmc_listener *l)
{
	long now = clock_now_ms();

	if (!l->nofd_err) /* usmc_accept() met it taking from the kernel itself */
		l->nofd_err = atomic_exchange(&l->app_nofd, 0);
	if (l->nofd_err) {
		usmc_log(&l->ctx->log, USMC_LOG_WARN,
			 "listener %s: accept: %s: not accepting for %d ms", log_local(l->lfd).s,
			 log_errname(-l->nofd_err), ACCEPT_NOFD_BACKOFF_MS);
		l->nofd_until_ms = now + ACCEPT_NOFD_BACKOFF_MS;
		l->nofd_err = 0;
	}
	if (l->nofd_until_ms && now >= l->nofd_until_ms)
		l->nofd_until_ms = 0;
	return l->nofd_until_ms != 0;
}

/* The shorter of two sleeps in ms (-1: no bound). */
static int min_sleep(int a, long b)
{
	b = b < 0 ? 0 : b;
	return a < 0 || a > b ? (int)b : a;
}

#define MS_NS	 ((int64_t)CLOCK_NSEC_PER_MSEC)
#define LEASE_NS (LISTEN_APP_LEASE_MS * MS_NS)

/* How long the thread may sleep: until the next probe's deadline, no
 * longer than a back-off lasts, nor, in direct mode, than the application
 * is known to take connections itself (-1: no bound). */
static int accept_sleep_ms(struct usmc_listener *l)
{
	int ms = probe_next_timeout(l);

	if (l->nofd_until_ms)
		ms = min_sleep(ms, l->nofd_until_ms - clock_now_ms());
	if (l->ceded) /* rounded up: look once the lease is over */
		ms = min_sleep(ms, (atomic_load(&l->app_ns) + LEASE_NS - (int64_t)clock_now_ns() +
				    MS_NS - 1) /
					   MS_NS);
	return ms;
}

/*
 * Direct mode: whether to leave the listen socket to usmc_accept(), which
 * takes from it in the application's thread (listen_direct.c). Two
 * consumers of one listen socket would both wake for each connection, and
 * race for it; so while the application looked at the socket within
 * LISTEN_APP_LEASE_MS, this thread takes nothing from it and does not
 * watch it: it looks again when the lease ends (one wake-up per lease
 * however many connections come). An application that stopped looking
 * leaves the socket to this thread again, as without direct mode, so that
 * SMC clients are served while nobody accepts.
 */
static bool accept_cede(struct usmc_listener *l)
{
	int64_t now = (int64_t)clock_now_ns();

	if (!l->direct)
		return false;
	atomic_store(&l->cede_asked, false); /* this is the look it asked for */
	l->ceded = now - atomic_load(&l->app_ns) < LEASE_NS;
	if (!l->ceded && !atomic_load(&l->lfd_held)) {
		/* about to take from the socket: say so before the last look at
		 * app_ns (app_looks() does the reverse), so that an application
		 * that looks meanwhile asks this thread back */
		atomic_store(&l->lfd_held, true);
		l->ceded = now - atomic_load(&l->app_ns) < LEASE_NS;
	}
	if (l->ceded && atomic_load(&l->lfd_held))
		atomic_store(&l->lfd_held, false);
	return l->ceded;
}

/*
 * Take connections while there is @room, unless the application takes
 * them itself (accept_cede()); either way usmc_listener_fd() reports the
 * kernel's queue while there is room.
 */
static void accept_take(struct usmc_listener *l, unsigned int room)
{
	listener_offer_lfd(l, room > 0);
	l->ab->take(l, room && accept_cede(l) ? 0 : room);
}

/*
 * Stop taking connections at the cap (the kernel's queue holds them, then
 * overflows into listen drops, as for any TCP server) and resume when
 * there is room. paused is set BEFORE the last look at the counts, and
 * the threads that free room decrement a count before they look at
 * paused: one of the two always sees the other, so no wake-up is lost.
 */
static void accept_flow_control(struct usmc_listener *l)
{
	unsigned int room;

	serve_taken(l);
	if (accept_nofd_backoff(l)) {
		accept_take(l, 0);
		return;
	}
	room = listener_room(l);
	if (!room) {
		bool was = atomic_exchange(&l->paused, true);

		room = listener_room(l);
		if (!room) {
			if (!was) {
				atomic_fetch_add(&l->backlog_full, 1);
				usmc_log(
					&l->ctx->log, USMC_LOG_WARN,
					"listener %s: backlog cap %d reached: not accepting until usmc_accept() makes room",
					log_local(l->lfd).s, l->backlog);
			}
			accept_take(l, 0);
			return;
		}
	}
	atomic_store(&l->paused, false);
	accept_take(l, room);
}

/*
 * USMC_OPT_ACCEPT_BATCH: the accept thread wakes for every connection, does
 * a few microseconds of work and sleeps again. As an ordinary thread its
 * wake-up preempts whatever runs on the CPU, so under a storm on busy CPUs
 * every connection costs two context switches (measured: 10 us of the
 * thread's CPU per connection, 0.4 sleeps per connection). SCHED_BATCH
 * keeps its share of CPU but gives up wake-up preemption: with an idle CPU
 * it still runs at once, on busy CPUs at the next scheduling point (a
 * running thread blocks, or one slice at most), and then takes everything
 * that arrived meanwhile in one round (3-4 us per connection, 0.05 sleeps).
 * Failure (a seccomp policy, say) leaves the thread as it was.
 */
static void accept_thread_batch(void)
{
	struct sched_param sp = {.sched_priority = 0};

	pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
}

/* Choose the backend (the io_uring one belongs to this thread: see
 * accept_uring.c) and tell usmc_listen() which it is. */
static void accept_thread_start(struct usmc_listener *l)
{
	struct usmc_opts o;

	thread_name_set(pthread_self(), "usmc-accept");
	listener_copy_opts(l, &o);
	if (o.v[USMC_OPT_ACCEPT_BATCH])
		accept_thread_batch();
	l->ab = o.v[USMC_OPT_ACCEPT_URING] && accept_uring_ops.setup(l) ? &accept_uring_ops
									: &accept_epoll_ops;
	accept_flow_control(l);
	pthread_mutex_lock(&l->start_lock);
	l->started = true;
	pthread_cond_signal(&l->start_cond);
	pthread_mutex_unlock(&l->start_lock);
}

/* Sleep where the backend says, then serve what came: the sockets it took,
 * then the epoll set's events. */
static void accept_round(struct usmc_listener *l)
{
	int epoll_ms = l->ab->wait(l, accept_sleep_ms(l));

	serve_taken(l);
	if (epoll_ms != ACCEPT_EPOLL_SKIP)
		dispatch_epoll(l, epoll_ms);
}

/* Watch the handshakes that workers parked since the last round. */
static void watch_parked(struct usmc_listener *l)
{
	struct usmc_conn *c = listener_take_parked(l);

	while (c) {
		struct usmc_conn *next = c->next;

		c->next = NULL;
		probe_park(l, c);
		c = next;
	}
}

void *accept_thread_main(void *arg)
{
	struct usmc_listener *l = arg;

	accept_thread_start(l);
	while (!atomic_load(&l->stopping)) {
		accept_round(l);
		probe_handed(l);
		watch_parked(l);
		probes_hs_events(l);
		probes_expire(l);
		accept_flow_control(l);
	}
	l->ab->teardown(l);
	return NULL;
}

int accept_thread_fds(struct usmc_listener *l)
{
	struct epoll_event ev = {.events = 0, .data.ptr = ACCEPT_TAG_LFD(l)};

	l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->wakefd < 0 || l->epfd < 0)
		return -errno;
	/* polled for nothing until the accept thread's flow control says */
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->lfd, &ev))
		return -errno;
	ev.events = EPOLLIN;
	ev.data.ptr = ACCEPT_TAG_WAKE(l);
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &ev))
		return -errno;
	return 0;
}
