// SPDX-License-Identifier: MIT
/*
 * The event API (usmc.h "Events"; event.h): one descriptor per context
 * that an event loop polls, and usmc_ctx_poll(), which says which watched
 * connections are readable, writable, hung up or failed and which watched
 * listeners have connections to accept.
 *
 * TCP-mode connections and listeners are what the kernel's epoll already
 * knows: their descriptor goes into the context's epoll set, level-
 * triggered. An SMC-R connection has no kernel descriptor that carries its
 * readiness: its watch (smcr_conn_watch()) is told each change by whoever
 * ran the completion that made it, under the connection's lock, and feeds
 * the ready queue, whose eventfd is in the same epoll set. So
 * usmc_ctx_event_fd() is exact for all of them, and a watched SMC-R
 * connection needs no readiness socketpair.
 *
 * Who runs an SMC-R connection's completions: the caller of
 * usmc_ctx_poll(), as a blocking reader does for itself. Its link group's
 * engine is attached to the set (smcr_eng_loop_attach()): the links'
 * completion channels sit in the epoll set, and each poll takes the
 * engine's token when it is free, reads the channels' events, drains the
 * CQs (the dispatch tells the watches), arms them, polls once more and
 * lets the token go (smcr_eng_loop_run()). It never sleeps holding it.
 * When another thread holds it (a blocking call, the progress thread for
 * an LLC flow), that thread runs them, and the engine kicks the set's
 * kick_fd when the token goes free.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "conn.h"
#include "ctx.h"
#include "event.h"
#include "listen_core.h"
#include "smcr_conn.h"
#include "smcr_eng.h"

#define EV_BATCH 64 /* epoll events taken per epoll_wait() */

/* The ready queue hands back items: they are their watches. */
_Static_assert(offsetof(struct ev_watch, it) == 0, "struct ev_watch starts with its item");

/* Reported whatever was asked for, as epoll reports EPOLLERR. */
#define EV_ALWAYS USMC_EV_ERR

/* ---- the set ---------------------------------------------------------- */

static int evset_new(struct usmc_evset **out)
{
	struct usmc_evset *set = calloc(1, sizeof(*set));
	struct epoll_event ee = {.events = EPOLLIN, .data.ptr = NULL};
	int rc;

	if (!set)
		return -ENOMEM;
	rc = evq_init(&set->q, EV_ALWAYS);
	if (rc) {
		free(set);
		return rc;
	}
	set->epfd = epoll_create1(EPOLL_CLOEXEC);
	set->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (set->epfd < 0 || set->kick_fd < 0 ||
	    epoll_ctl(set->epfd, EPOLL_CTL_ADD, set->q.efd, &ee) ||
	    epoll_ctl(set->epfd, EPOLL_CTL_ADD, set->kick_fd,
		      &(struct epoll_event){.events = EPOLLIN, .data.ptr = &set->kick_tag})) {
		rc = -errno;
		if (set->epfd >= 0)
			close(set->epfd);
		if (set->kick_fd >= 0)
			close(set->kick_fd);
		evq_fini(&set->q);
		free(set);
		return rc;
	}
	pthread_mutex_init(&set->run_lock, NULL);
	*out = set;
	return 0;
}

/* The context's set, made at the first call (under the context's lock, a
 * leaf: nothing else is taken while it is held). */
static int evset_of(struct usmc_ctx *ctx, struct usmc_evset **out)
{
	struct usmc_evset *set = atomic_load_explicit(&ctx->evset, memory_order_acquire);
	int rc = 0;

	if (set) {
		*out = set;
		return 0;
	}
	pthread_mutex_lock(&ctx->lock);
	set = atomic_load_explicit(&ctx->evset, memory_order_relaxed);
	if (!set) {
		rc = evset_new(&set);
		if (!rc)
			atomic_store_explicit(&ctx->evset, set, memory_order_release);
	}
	pthread_mutex_unlock(&ctx->lock);
	*out = set;
	return rc;
}

static void graves_free_locked(struct usmc_evset *set)
{
	while (set->graves) {
		struct ev_watch *w = set->graves;

		set->graves = w->grave_next;
		free(w);
	}
}

void event_set_free(struct usmc_evset *set)
{
	if (!set)
		return;
	graves_free_locked(set); /* no poll runs: the context goes */
	close(set->epfd);
	close(set->kick_fd);
	pthread_mutex_destroy(&set->run_lock);
	evq_fini(&set->q);
	free(set);
}

/* ---- watches ---------------------------------------------------------- */

/* epoll's events for a TCP socket watched for @interest: our HUP is its
 * RDHUP (EPOLLHUP, which comes unasked, is masked unless HUP was asked);
 * EPOLLERR comes unasked, as our ERR. */
static uint32_t tcp_epoll_events(uint32_t interest)
{
	return (interest & USMC_EV_READ ? EPOLLIN : 0) | (interest & USMC_EV_WRITE ? EPOLLOUT : 0) |
	       (interest & USMC_EV_HUP ? EPOLLRDHUP : 0);
}

static uint32_t ev_of_epoll(const struct ev_watch *w, uint32_t e)
{
	uint32_t ev = 0;

	if (w->lis)
		return e & (EPOLLIN | EPOLLERR | EPOLLHUP) ? USMC_EV_ACCEPT : 0;
	if (e & EPOLLIN)
		ev |= USMC_EV_READ;
	if (e & EPOLLOUT)
		ev |= USMC_EV_WRITE;
	if (e & (EPOLLRDHUP | EPOLLHUP))
		ev |= USMC_EV_HUP;
	if (e & EPOLLERR)
		ev |= USMC_EV_ERR;
	return ev & (w->interest | EV_ALWAYS);
}

static uint32_t ev_of_smcr(unsigned state)
{
	return (state & SMCR_READY_RD ? USMC_EV_READ : 0) |
	       (state & SMCR_READY_WR ? USMC_EV_WRITE : 0) |
	       (state & SMCR_READY_RDHUP ? USMC_EV_HUP : 0) |
	       (state & SMCR_READY_ERR ? USMC_EV_ERR : 0);
}

/* An SMC-R connection's readiness changed (smcr_watch_fn: under its lock). */
static void smcr_watch_told(void *arg, unsigned state)
{
	struct ev_watch *w = arg;

	evq_set_state(&w->set->q, &w->it, ev_of_smcr(state));
}

/* ---- the engines it runs -------------------------------------------- */

/* A watched SMC-R connection runs on @e: attach it for the set's polls. */
static int eng_attach(struct usmc_evset *set, struct smcr_eng *e)
{
	struct ev_eng *g;
	int rc = 0;

	pthread_mutex_lock(&set->run_lock);
	for (g = set->engs; g && g->e != e; g = g->next)
		;
	if (!g && (g = calloc(1, sizeof(*g)))) {
		g->e = e;
		g->next = set->engs;
		set->engs = g;
	}
	if (g) {
		g->users++;
		smcr_eng_loop_attach(e, set->epfd, set->kick_fd, &set->eng_tag);
	} else {
		rc = -ENOMEM;
	}
	pthread_mutex_unlock(&set->run_lock);
	return rc;
}

static void eng_detach(struct usmc_evset *set, struct smcr_eng *e)
{
	pthread_mutex_lock(&set->run_lock);
	for (struct ev_eng **pp = &set->engs; *pp; pp = &(*pp)->next) {
		struct ev_eng *g = *pp;

		if (g->e != e)
			continue;
		smcr_eng_loop_detach(e);
		if (--g->users == 0) {
			*pp = g->next;
			free(g);
		}
		break;
	}
	pthread_mutex_unlock(&set->run_lock);
}

/* Run each attached engine's completions here if nobody else does. */
static void engs_run(struct usmc_evset *set)
{
	pthread_mutex_lock(&set->run_lock);
	for (struct ev_eng *g = set->engs; g; g = g->next)
		smcr_eng_loop_run(g->e);
	pthread_mutex_unlock(&set->run_lock);
}

/* Out of the set: no event names it from now on; freed at once, or by the
 * last poll that may hold its pointer. The caller took it off its owner. */
static void watch_drop(struct ev_watch *w)
{
	struct usmc_evset *set = w->set;

	if (w->fd >= 0)
		epoll_ctl(set->epfd, EPOLL_CTL_DEL, w->fd, NULL);
	pthread_mutex_lock(&set->q.lock);
	w->dead = true;
	w->interest = 0;
	pthread_mutex_unlock(&set->q.lock);
	evq_set_interest(&set->q, &w->it, 0); /* out of the ready queue */
	pthread_mutex_lock(&set->q.lock);
	if (set->pollers) {
		w->grave_next = set->graves;
		set->graves = w;
		w = NULL;
	}
	pthread_mutex_unlock(&set->q.lock);
	free(w);
}

/* A new watch of @conn or @lis through @fd (-1: SMC-R, fed by
 * smcr_conn_watch()); whole before a poll can see it. */
static int watch_new(struct usmc_evset *set, struct usmc_conn *conn, struct usmc_listener *lis,
		     int fd, uint32_t interest, void *user, struct ev_watch **out)
{
	struct ev_watch *w = calloc(1, sizeof(*w));
	struct epoll_event ee;

	if (!w)
		return -ENOMEM;
	w->set = set;
	w->conn = conn;
	w->lis = lis;
	w->fd = fd;
	w->user = user;
	w->interest = interest;
	if (fd >= 0) {
		ee = (struct epoll_event){
			.events = interest & USMC_EV_ACCEPT ? EPOLLIN : tcp_epoll_events(interest),
			.data.ptr = w};
		if (epoll_ctl(set->epfd, EPOLL_CTL_ADD, fd, &ee)) {
			int rc = -errno;

			free(w);
			return rc;
		}
	} else {
		evq_set_interest(&set->q, &w->it, interest);
	}
	*out = w;
	return 0;
}

/* The watch asks for @interest now, for @user. */
static int watch_change(struct ev_watch *w, uint32_t interest, void *user)
{
	struct usmc_evset *set = w->set;

	if (w->fd >= 0 && !w->lis) {
		struct epoll_event ee = {.events = tcp_epoll_events(interest), .data.ptr = w};

		if (epoll_ctl(set->epfd, EPOLL_CTL_MOD, w->fd, &ee))
			return -errno;
	}
	pthread_mutex_lock(&set->q.lock);
	w->user = user;
	w->interest = interest;
	pthread_mutex_unlock(&set->q.lock);
	if (w->fd < 0)
		evq_set_interest(&set->q, &w->it, interest);
	return 0;
}

/*
 * The watch of @c ends. A USMC_EV_FD watch's descriptor needs the library's
 * thread again, unless the connection is @closing: nobody polls it any
 * more, and the close runs its completions as any close does (a lingering
 * one itself, a background one at the progress thread's ticks).
 */
static void conn_unwatch(struct usmc_conn *c, bool closing)
{
	struct ev_watch *w = c->watch;

	if (!w)
		return;
	c->watch = NULL;
	if (w->via_fd) {
		if (!closing)
			smcr_conn_fd_loop(c->smcr, false);
	} else if (w->fd < 0 && c->smcr) {
		smcr_conn_watch(c->smcr, NULL, NULL); /* no more calls of the watch */
	}
	if (w->eng)
		eng_detach(w->set, w->eng);
	watch_drop(w);
}

void event_conn_forget(struct usmc_conn *c)
{
	conn_unwatch(c, true);
}

void event_listener_forget(struct usmc_listener *l)
{
	struct ev_watch *w = l->watch;

	if (!w)
		return;
	l->watch = NULL;
	watch_drop(w);
}

#define EV_CONN_BITS (USMC_EV_READ | USMC_EV_WRITE | USMC_EV_HUP | USMC_EV_ERR)

/*
 * USMC_EV_FD: the connection's readiness descriptor stays what its user
 * polls, and the set's polls run its link group's completions, so the
 * descriptor no longer needs the library's thread (smcr_conn_fd_loop()).
 * The watch is never queued: its interest is 0. Attached before the
 * descriptor stops counting, so that someone always runs them.
 */
static int watch_via_fd(struct usmc_conn *c, struct usmc_evset *set, void *user)
{
	struct smcr_eng *e = smcr_conn_eng(c->smcr);
	struct ev_watch *w;
	int rc = watch_new(set, c, NULL, -1, 0, user, &w);

	if (rc)
		return rc;
	w->via_fd = true;
	rc = eng_attach(set, e);
	if (rc) {
		watch_drop(w);
		return rc;
	}
	w->eng = e;
	c->watch = w;
	rc = smcr_conn_fd_loop(c->smcr, true);
	if (rc)
		conn_unwatch(c, false);
	return rc;
}

int usmc_conn_watch(struct usmc_conn *c, uint32_t events, void *user)
{
	struct usmc_evset *set;
	struct ev_watch *w;
	bool via_fd = events == USMC_EV_FD;
	int rc;

	if (!c || (events & ~EV_CONN_BITS && !via_fd))
		return -EINVAL;
	if (ctx_forked(c->ctx))
		return USMC_EFORKED;
	if (!events) {
		conn_unwatch(c, false);
		return 0;
	}
	if (c->fd < 0)
		return -ENOTCONN;
	if (c->mode == USMC_MODE_CONNECTING) {
		rc = usmc_connect_finish(c); /* its mode decides where it is watched */
		if (rc)
			return rc;
	}
	if (c->watch && c->watch->via_fd != via_fd)
		conn_unwatch(c, false); /* another kind of watch: it starts again */
	if (c->watch)
		return via_fd ? 0 : watch_change(c->watch, events, user);
	if (via_fd && !c->smcr)
		return 0; /* its descriptor is its socket: the kernel's */
	rc = evset_of(c->ctx, &set);
	if (!rc && via_fd)
		return watch_via_fd(c, set, user);
	if (!rc)
		rc = watch_new(set, c, NULL, c->smcr ? -1 : c->fd, events, user, &w);
	if (rc)
		return rc;
	c->watch = w;
	if (c->smcr) {
		smcr_conn_watch(c->smcr, smcr_watch_told, w); /* told the state at once */
		rc = eng_attach(set, smcr_conn_eng(c->smcr));
		if (rc) {
			conn_unwatch(c, false);
			return rc;
		}
		w->eng = smcr_conn_eng(c->smcr);
	}
	return 0;
}

int usmc_listener_watch(struct usmc_listener *l, uint32_t events, void *user)
{
	struct usmc_evset *set;
	struct ev_watch *w;
	int rc;

	if (!l || (events & ~USMC_EV_ACCEPT))
		return -EINVAL;
	if (ctx_forked(l->ctx))
		return USMC_EFORKED;
	if (!events) {
		event_listener_forget(l);
		return 0;
	}
	if (l->watch)
		return watch_change(l->watch, events, user);
	rc = evset_of(l->ctx, &set);
	if (!rc)
		rc = watch_new(set, NULL, l, l->afd, events, user, &w);
	if (rc)
		return rc;
	l->watch = w;
	return 0;
}

/* ---- the event loop's calls ------------------------------------------ */

int usmc_ctx_event_fd(struct usmc_ctx *ctx)
{
	struct usmc_evset *set;
	int rc;

	if (!ctx)
		return -EINVAL;
	if (ctx_forked(ctx))
		return USMC_EFORKED;
	rc = evset_of(ctx, &set);
	return rc ? rc : set->epfd;
}

static struct usmc_event ev_make(const struct ev_watch *w, uint32_t bits)
{
	return (struct usmc_event){
		.conn = w->conn, .listener = w->lis, .user = w->user, .events = bits};
}

/* Whether the engines asked to be run among @k epoll events (a channel's
 * event, the kick; the kick is read). */
static bool engs_called(struct usmc_evset *set, const struct epoll_event *ee, int k)
{
	bool called = false;
	uint64_t v;

	for (int i = 0; i < k; i++) {
		if (ee[i].data.ptr == &set->kick_tag) {
			called = true;
			if (read(set->kick_fd, &v, sizeof(v)) < 0) {
				/* read by another poll: it runs them too */
			}
		} else if (ee[i].data.ptr == &set->eng_tag) {
			called = true;
		}
	}
	return called;
}

/*
 * What @k events of the epoll set say, into @ev (up to @max): the watched
 * descriptors' readiness, then the queued SMC-R connections' if the ready
 * queue's eventfd was among them or @ran (the engines just ran: what they
 * queued may have come after epoll_wait()). Requires set->q.lock.
 */
static int ev_gather_locked(struct usmc_evset *set, const struct epoll_event *ee, int k,
			    struct usmc_event *ev, int max, bool ran)
{
	struct evq_item *items[EV_BATCH];
	uint32_t bits[EV_BATCH];
	bool queue = ran;
	int n = 0, m;

	for (int i = 0; i < k && n < max; i++) {
		const struct ev_watch *w = ee[i].data.ptr;
		uint32_t b;

		if (!w) {
			queue = true;
			continue;
		}
		if (ee[i].data.ptr == &set->kick_tag || ee[i].data.ptr == &set->eng_tag)
			continue;
		b = w->dead ? 0 : ev_of_epoll(w, ee[i].events);
		if (b)
			ev[n++] = ev_make(w, b);
	}
	if (!queue || n >= max)
		return n;
	m = evq_collect_locked(&set->q, items, bits, max - n < EV_BATCH ? max - n : EV_BATCH);
	for (int i = 0; i < m; i++) {
		/* a dead watch left the queue when it died */
		const struct ev_watch *w = (const struct ev_watch *)items[i];

		ev[n++] = ev_make(w, bits[i]);
	}
	return n;
}

int usmc_ctx_poll(struct usmc_ctx *ctx, struct usmc_event *ev, int max, int timeout_ms)
{
	struct epoll_event ee[EV_BATCH];
	struct usmc_evset *set;
	long deadline;
	int rc, n = 0;

	if (!ctx || !ev || max <= 0 || timeout_ms < -1)
		return -EINVAL;
	if (ctx_forked(ctx))
		return USMC_EFORKED;
	rc = evset_of(ctx, &set);
	if (rc)
		return rc;
	deadline = clock_now_ms() + timeout_ms;
	pthread_mutex_lock(&set->q.lock);
	set->pollers++;
	pthread_mutex_unlock(&set->q.lock);
	engs_run(set); /* what the CQs hold now: its events come at once below */
	for (;;) {
		int wait = timeout_ms < 0 ? -1 : (int)(deadline - clock_now_ms());
		int k = epoll_wait(set->epfd, ee, max < EV_BATCH ? max : EV_BATCH,
				   wait < 0 && timeout_ms >= 0 ? 0 : wait);
		bool ran = false;

		if (k < 0) {
			n = -errno;
			break;
		}
		if (engs_called(set, ee, k)) {
			engs_run(set);
			ran = true;
		}
		pthread_mutex_lock(&set->q.lock);
		n = ev_gather_locked(set, ee, k, ev, max, ran);
		pthread_mutex_unlock(&set->q.lock);
		/* nothing from what epoll said (an engine's call that made
		 * nothing ready, a watch that died meanwhile): wait again for
		 * what is left of the time */
		if (n || !k || (timeout_ms >= 0 && clock_now_ms() >= deadline))
			break;
	}
	pthread_mutex_lock(&set->q.lock);
	if (--set->pollers == 0)
		graves_free_locked(set);
	pthread_mutex_unlock(&set->q.lock);
	return n;
}
