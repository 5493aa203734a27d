// SPDX-License-Identifier: MIT
/*
 * The accept thread (docs/listener.md has the whole design).
 *
 * One thread runs one loop over an epoll set that holds the wake eventfd,
 * every connection being probed and, when connections are taken with
 * accept4(), the listen socket (level-triggered). How it takes connections
 * and where it sleeps is its accept backend's business (accept_backend.h:
 * io_uring multishot accept, or accept4); this file holds what both share:
 * the loop, what happens to each accepted socket, and flow control at the
 * backlog cap.
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
#include "clock.h"
#include "conn.h"
#include "ctx.h"
#include "listen.h"
#include "probe.h"
#include "thread_name.h"

#define ACCEPT_EVENTS 64

/* epoll data for the non-connection descriptors */
static char lfd_tag, wake_tag;

/* Room for connections in the listener proper (the stash of io_uring mode
 * is not in it: docs/listener.md, "Backlog"). */
unsigned int accept_room(struct usmc_listener *l)
{
	return listen_backlog_room(atomic_load(&l->in_handshake), atomic_load(&l->queued),
				   (unsigned int)l->backlog);
}

/* Accept thread only writes it, so a plain compare-and-store suffices. */
static void note_backlog_high(struct usmc_listener *l)
{
	unsigned int used = atomic_load(&l->in_handshake) + atomic_load(&l->queued);

	if (used > atomic_load(&l->backlog_high))
		atomic_store(&l->backlog_high, used);
}

/*
 * Kernel-compat mode (kcompat.h): the TCP handshake already said whether
 * the client runs CLC. Returns true when @c was decided here.
 */
static bool kcompat_accept(struct usmc_listener *l, struct usmc_conn *c)
{
	if (c->kc_peer == KC_PEER_NOSMC) {
		listener_finish_tcp(l, c, USMC_REASON_PEERNOSMC);
		return true;
	}
	if (c->kc_peer == KC_PEER_CONGESTED) { /* its SYN-ACK went without the option */
		usmc_log(
			&l->ctx->log, USMC_LOG_WARN,
			"listener %s: handshake queue congested: SYN-ACK to %s without the SMC option, TCP",
			log_local(c->fd).s, conn_log_peer(c).s);
		atomic_fetch_add(&l->congestion_fallbacks, 1);
		listener_storm_demand(l, &c->opts);
		listener_finish_tcp(l, c, USMC_REASON_HS_CONGESTED);
		return true;
	}
	return false;
}

/* Kernel-compat: what the handshake said. Every accepted socket goes
 * through it once, whatever becomes of it, so that the listener's count of
 * the sockets it took stays the program's (kcompat_server_peer()). */
static enum kc_peer accepted_peer(struct usmc_listener *l, int fd)
{
	return kcompat_server_peer(l->ctx->kc, &l->kc, fd);
}

void accept_refuse(struct usmc_listener *l, int fd)
{
	(void)accepted_peer(l, fd);
	close(fd);
	atomic_fetch_add(&l->hs_failed, 1);
}

void accept_one(struct usmc_listener *l, int fd)
{
	struct usmc_opts o;
	struct usmc_conn *c;

	listener_copy_opts(l, &o);
	atomic_fetch_add(&l->accepted, 1);
	c = conn_alloc(l->ctx, fd, &o, true);
	if (!c) {
		accept_refuse(l, fd);
		return;
	}
	c->kc_peer = accepted_peer(l, fd);
	c->t_accept_ns = clock_now_ns();
	if (!o.v[USMC_OPT_SMC]) {
		listener_finish_tcp(l, c, USMC_REASON_DISABLED);
		note_backlog_high(l);
		return;
	}
	listener_update_congestion(l, &o); /* kernel-compat */
	if (kcompat_accept(l, c)) {	   /* kernel-compat */
		note_backlog_high(l);
		return;
	}
	atomic_fetch_add(&l->in_handshake, 1);
	note_backlog_high(l);
	/* kernel-compat: a client that signalled SMC owes us CLC: wait for it
	 * as for any CLC message, not just the probe time */
	if (probe_new(
		    l, c,
		    o.v[c->kc_peer == KC_PEER_SMC ? USMC_OPT_CLC_TIMEOUT_MS : USMC_OPT_PROBE_MS])) {
		/* out of memory: let the application have it as TCP */
		atomic_fetch_sub(&l->in_handshake, 1);
		listener_finish_tcp(l, c, USMC_REASON_INTERR);
	}
}

static void wake_event(struct usmc_listener *l)
{
	uint64_t v;

	if (read(l->wakefd, &v, sizeof(v)) < 0) {
		/* spurious: nothing to do */
	}
}

void accept_dispatch_epoll(struct usmc_listener *l, int timeout_ms)
{
	struct epoll_event evs[ACCEPT_EVENTS];
	int n;

	l->lfd_unread = false;
	n = epoll_wait(l->epfd, evs, ACCEPT_EVENTS, timeout_ms);
	for (int i = 0; i < n; i++) {
		if (evs[i].data.ptr == &lfd_tag)
			accept_epoll_burst(l);
		else if (evs[i].data.ptr == &wake_tag)
			wake_event(l);
		else
			probe_event(l, evs[i].data.ptr);
	}
}

void accept_poll_lfd(struct usmc_listener *l, bool in)
{
	struct epoll_event ev = {.events = in ? EPOLLIN : 0, .data.ptr = &lfd_tag};

	if (l->lfd_in != in && !epoll_ctl(l->epfd, EPOLL_CTL_MOD, l->lfd, &ev)) {
		l->lfd_in = in;
		l->lfd_unread = in;
	}
}

/*
 * Stop taking connections at the cap (the kernel's queue holds them, then
 * overflows into listen drops, as for any TCP server) and resume when
 * there is room. paused is set BEFORE the last look at the counts, and
 * the threads that free room decrement a count before they look at
 * paused: one of the two always sees the other, so no wake-up is lost.
 */
void accept_flow_control(struct usmc_listener *l)
{
	unsigned int room;

	l->ab->serve_held(l);
	room = accept_room(l);
	if (!room) {
		bool was = atomic_exchange(&l->paused, true);

		room = accept_room(l);
		if (!room) {
			if (!was) {
				atomic_fetch_add(&l->backlog_full, 1);
				usmc_log(
					&l->ctx->log, USMC_LOG_WARN,
					"listener %s: backlog cap %d reached: not accepting until usmc_accept() makes room",
					log_local(l->lfd).s, l->backlog);
			}
			l->ab->take(l, 0);
			return;
		}
	}
	atomic_store(&l->paused, false);
	l->ab->take(l, room);
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

void *accept_thread_main(void *arg)
{
	struct usmc_listener *l = arg;

	accept_thread_start(l);
	while (!atomic_load(&l->stopping)) {
		l->ab->wait(l, probe_next_timeout(l));
		listener_take_parked(l);
		probes_expire(l);
		accept_flow_control(l);
	}
	l->ab->teardown(l);
	return NULL;
}

int accept_thread_fds(struct usmc_listener *l)
{
	struct epoll_event ev = {.events = 0, .data.ptr = &lfd_tag};

	l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->wakefd < 0 || l->epfd < 0)
		return -errno;
	/* polled for nothing until the accept thread's flow control says */
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->lfd, &ev))
		return -errno;
	ev.events = EPOLLIN;
	ev.data.ptr = &wake_tag;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &ev))
		return -errno;
	return 0;
}

void accept_thread_wake(struct usmc_listener *l)
{
	uint64_t one = 1;

	if (write(l->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the thread is awake anyway */
	}
}
