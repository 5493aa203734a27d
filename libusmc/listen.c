// SPDX-License-Identifier: MIT
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "conn.h"
#include "ctx.h"
#include "probe.h"
#include "listen.h"
#include "srv_clc.h"

#define LISTEN_BACKLOG_MAX 65535
#define ACCEPT_EVENTS	   64

/* A connection whose first bytes the accept thread is waiting for. */
struct probing {
	struct usmc_conn *c;
	long deadline_ms;
	struct probing *prev, *next;
};

/* epoll data for the two non-connection descriptors */
static char lfd_tag, wake_tag;

static void wake_accept_thread(struct usmc_listener *l)
{
	uint64_t one = 1;

	if (write(l->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the thread is awake anyway */
	}
}

static unsigned int backlog_used(struct usmc_listener *l)
{
	return atomic_load(&l->in_handshake) + atomic_load(&l->queued);
}

/* ---- accept queue ------------------------------------------------------ */

void listener_enqueue(struct usmc_listener *l, struct usmc_conn *c)
{
	uint64_t one = 1;

	atomic_fetch_add(c->mode == USMC_MODE_SMCR ? &l->smcr : &l->fallbacks, 1);
	c->next = NULL;
	pthread_mutex_lock(&l->qlock);
	if (l->qtail)
		l->qtail->next = c;
	else
		l->qhead = c;
	l->qtail = c;
	/* counted before the handshake count drops, so the sum never dips
	 * below the truth and the cap is never overshot */
	atomic_fetch_add(&l->queued, 1);
	pthread_mutex_unlock(&l->qlock);
	/* one semaphore count per queued connection: the fd is readable
	 * exactly while the queue is not empty */
	if (write(l->qfd, &one, sizeof(one)) < 0) {
		/* cannot happen below 2^64 - 1 queued connections */
	}
}

void listener_drop(struct usmc_listener *l, struct usmc_conn *c)
{
	atomic_fetch_add(&l->hs_failed, 1);
	atomic_fetch_add(&c->ctx->hs_errors, 1);
	atomic_fetch_sub(&l->in_handshake, 1);
	if (atomic_load(&l->paused))
		wake_accept_thread(l);
	conn_destroy(c); /* last: the peer sees EOF only once we are consistent */
}

static struct usmc_conn *queue_pop(struct usmc_listener *l)
{
	struct usmc_conn *c;

	pthread_mutex_lock(&l->qlock);
	c = l->qhead;
	if (c) {
		l->qhead = c->next;
		if (!l->qhead)
			l->qtail = NULL;
		c->next = NULL;
		atomic_fetch_sub(&l->queued, 1);
	}
	pthread_mutex_unlock(&l->qlock);
	return c;
}

/* ---- probing (accept thread) ------------------------------------------- */

static void probe_unlink(struct usmc_listener *l, struct probing *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		l->probes = p->next;
	if (p->next)
		p->next->prev = p->prev;
	else
		l->probes_tail = p->prev;
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, p->c->fd, NULL);
}

/* The connection is TCP: give it to the application. */
static void finish_tcp(struct usmc_listener *l, struct usmc_conn *c, uint32_t reason)
{
	conn_make_blocking(c);
	conn_set_mode(c, USMC_MODE_TCP, reason, false);
	listener_enqueue(l, c);
}

static uint32_t plain_client_reason(struct usmc_listener *l)
{
	return ctx_has_smcr_device(l->ctx) ? USMC_REASON_PEERNOSMC : USMC_REASON_NOSMCRDEV;
}

static void kcompat_update_congestion(struct usmc_listener *l, const struct usmc_opts *o);

static void probe_end(struct usmc_listener *l, struct probing *p, bool smc)
{
	struct usmc_conn *c = p->c;

	probe_unlink(l, p);
	free(p);
	if (smc) {
		struct usmc_opts o = c->opts; /* @c belongs to the pool once queued */

		hs_pool_submit(&l->hs, c); /* stays counted in in_handshake */
		kcompat_update_congestion(l, &o); /* kernel-compat: the queue grew */
		return;
	}
	finish_tcp(l, c, plain_client_reason(l));
	atomic_fetch_sub(&l->in_handshake, 1);
}

/* The probe ended with the connection unusable: drop it. */
static void probe_drop(struct usmc_listener *l, struct probing *p)
{
	struct usmc_conn *c = p->c;

	probe_unlink(l, p);
	free(p);
	listener_drop(l, c);
}

/*
 * Auto-fallback of an SMC client while congested: answer its PROPOSAL with
 * a DECLINE right here, without the pool. Returns false while the PROPOSAL
 * is still incomplete.
 */
static bool decline_congested(struct usmc_listener *l, struct probing *p)
{
	struct usmc_conn *c = p->c;
	int rc = srv_clc_decline_now(c, USMC_DECL_SERVER_BUSY);

	if (rc == -EAGAIN)
		return false;
	probe_unlink(l, p);
	free(p);
	if (rc) {
		listener_drop(l, c);
		return true;
	}
	atomic_fetch_add(&l->congestion_fallbacks, 1);
	finish_tcp(l, c, USMC_REASON_HS_CONGESTED);
	atomic_fetch_sub(&l->in_handshake, 1);
	return true;
}

/*
 * Kernel-compat: a client that signalled SMC in its SYN may decline at once
 * (a Linux client without a usable device does): TCP with its reason.
 * Returns true when the event was handled here.
 */
static bool kcompat_probe_decline(struct usmc_listener *l, struct probing *p, bool expired)
{
	struct usmc_conn *c = p->c;
	uint32_t reason;
	int rc = kcompat_take_decline(c, &reason);

	if (rc == 0)
		return false;
	if (rc == -EAGAIN && !expired)
		return true; /* part of a DECLINE: the next segment wakes us */
	if (rc < 0) {	     /* malformed, or never completed: a failed handshake */
		probe_drop(l, p);
		return true;
	}
	probe_unlink(l, p);
	free(p);
	conn_make_blocking(c);
	conn_set_mode(c, USMC_MODE_TCP, reason, true);
	listener_enqueue(l, c);
	atomic_fetch_sub(&l->in_handshake, 1);
	return true;
}

static void probe_event(struct usmc_listener *l, struct probing *p)
{
	uint8_t buf[8];
	ssize_t n;

	if (kcompat_probe_decline(l, p, false)) /* kernel-compat */
		return;
	n = recv(p->c->fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	/* EOF or a socket error also mean TCP: the application sees them */
	if (n <= 0) {
		probe_end(l, p, false);
		return;
	}
	switch (probe_classify(buf, (size_t)n)) {
	case PROBE_NEED_MORE:
		return; /* edge-triggered: the next segment wakes us */
	case PROBE_SMC:
		if (p->c->decline_at_once)
			decline_congested(l, p);
		else
			probe_end(l, p, true);
		return;
	case PROBE_TCP:
		probe_end(l, p, false);
		return;
	}
}

static void probes_expire(struct usmc_listener *l)
{
	long now = clock_now_ms();

	/* the list is in deadline order (see probe_start) */
	while (l->probes && l->probes->deadline_ms <= now) {
		struct probing *p = l->probes;
		uint8_t b[8];
		ssize_t n;

		if (kcompat_probe_decline(l, p, true)) /* kernel-compat */
			continue;
		n = recv(p->c->fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
		/* a PROPOSAL that began but never completed is a failed
		 * handshake; silence or anything else is a plain client */
		if (n > 0 && probe_classify(b, (size_t)n) == PROBE_SMC)
			probe_drop(l, p);
		else
			probe_end(l, p, false);
	}
}

static int probe_start(struct usmc_listener *l, struct usmc_conn *c, long probe_ms)
{
	struct probing *p = calloc(1, sizeof(*p)), *at;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET};

	if (!p)
		return -ENOMEM;
	p->c = c;
	p->deadline_ms = clock_now_ms() + probe_ms;
	ev.data.ptr = p;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, c->fd, &ev)) {
		free(p);
		return -errno;
	}
	/* Keep the list in deadline order. Plain probes all have the same
	 * timeout and append; only kernel-compat SMC peers, which wait for CLC
	 * longer, are passed over. */
	at = l->probes_tail;
	while (at && at->deadline_ms > p->deadline_ms)
		at = at->prev;
	p->prev = at;
	p->next = at ? at->next : l->probes;
	if (p->next)
		p->next->prev = p;
	else
		l->probes_tail = p;
	if (at)
		at->next = p;
	else
		l->probes = p;
	/* the client may have spoken already: edge-triggered epoll reports
	 * data present at ADD time too */
	return 0;
}

/* ---- accepting (accept thread) ----------------------------------------- */

static bool hs_congested(struct usmc_listener *l, const struct usmc_opts *o)
{
	return hs_pool_depth(&l->hs) >= (unsigned int)opts_hs_congestion(o);
}

/*
 * Kernel-compat mode (kcompat.h): the TCP handshake already said whether
 * the client runs CLC, so a plain client is TCP at once, without a probe.
 * Returns true when @c was decided here.
 */
static bool kcompat_accept(struct usmc_listener *l, struct usmc_conn *c)
{
	c->kc_peer = kcompat_server_peer(l->ctx->kc, &l->kc, c->fd);
	if (c->kc_peer == KC_PEER_NOSMC) {
		finish_tcp(l, c, USMC_REASON_PEERNOSMC);
		return true;
	}
	if (c->kc_peer == KC_PEER_CONGESTED) { /* its SYN-ACK went without the option */
		atomic_fetch_add(&l->congestion_fallbacks, 1);
		finish_tcp(l, c, USMC_REASON_HS_CONGESTED);
		return true;
	}
	return false;
}

/* Kernel-compat: SYN-ACKs go out without the option while congested. */
static void kcompat_update_congestion(struct usmc_listener *l, const struct usmc_opts *o)
{
	if (o->v[USMC_OPT_AUTO_FALLBACK])
		kcompat_listener_set_congested(l->ctx->kc, &l->kc, hs_congested(l, o));
}

static void accept_one(struct usmc_listener *l, int fd)
{
	struct usmc_opts o;
	struct usmc_conn *c;

	pthread_mutex_lock(&l->opts_lock);
	o = l->opts;
	pthread_mutex_unlock(&l->opts_lock);
	atomic_fetch_add(&l->accepted, 1);
	c = conn_alloc(l->ctx, fd, &o, true);
	if (!c) {
		close(fd);
		atomic_fetch_add(&l->hs_failed, 1);
		return;
	}
	if (!o.v[USMC_OPT_SMC]) {
		finish_tcp(l, c, USMC_REASON_DISABLED);
		return;
	}
	kcompat_update_congestion(l, &o); /* kernel-compat */
	if (kcompat_accept(l, c))	  /* kernel-compat */
		return;
	/*
	 * Auto-fallback: decided here, before any handshake work is queued.
	 * The connection still needs its probe: an SMC client's PROPOSAL must
	 * be answered with a DECLINE (the accept thread does that itself).
	 */
	if (o.v[USMC_OPT_AUTO_FALLBACK] && hs_congested(l, &o))
		c->decline_at_once = true;
	atomic_fetch_add(&l->in_handshake, 1);
	/* kernel-compat: a client that signalled SMC owes us CLC: wait for it
	 * as for any CLC message, not just the probe time */
	if (probe_start(
		    l, c,
		    o.v[c->kc_peer == KC_PEER_SMC ? USMC_OPT_CLC_TIMEOUT_MS : USMC_OPT_PROBE_MS])) {
		/* out of memory: let the application have it as TCP */
		atomic_fetch_sub(&l->in_handshake, 1);
		finish_tcp(l, c, USMC_REASON_INTERR);
	}
}

static void set_lfd_armed(struct usmc_listener *l, bool armed)
{
	struct epoll_event ev = {.events = armed ? EPOLLIN : 0, .data.ptr = &lfd_tag};

	epoll_ctl(l->epfd, EPOLL_CTL_MOD, l->lfd, &ev);
	atomic_store(&l->paused, !armed);
}

static void accept_burst(struct usmc_listener *l)
{
	while (backlog_used(l) < (unsigned int)l->backlog) {
		int fd = accept4(l->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return; /* EAGAIN, or EMFILE & co: retried on the next event */
		}
		accept_one(l, fd);
	}
	/* At the cap: leave the rest in the kernel's queue (which overflows
	 * into listen drops, as TCP does) until usmc_accept() makes room. */
	atomic_fetch_add(&l->backlog_full, 1);
	set_lfd_armed(l, false);
}

static void wake_event(struct usmc_listener *l)
{
	uint64_t v;

	if (read(l->wakefd, &v, sizeof(v)) < 0) {
		/* spurious: nothing to do */
	}
	if (atomic_load(&l->paused) && backlog_used(l) < (unsigned int)l->backlog) {
		set_lfd_armed(l, true);
		accept_burst(l);
	}
}

static int next_timeout(struct usmc_listener *l)
{
	long left;

	if (!l->probes)
		return -1;
	left = l->probes->deadline_ms - clock_now_ms();
	return left < 0 ? 0 : (int)left;
}

static void *accept_thread_main(void *arg)
{
	struct usmc_listener *l = arg;
	struct epoll_event evs[ACCEPT_EVENTS];

	while (!atomic_load(&l->stopping)) {
		int n = epoll_wait(l->epfd, evs, ACCEPT_EVENTS, next_timeout(l));

		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == &lfd_tag)
				accept_burst(l);
			else if (evs[i].data.ptr == &wake_tag)
				wake_event(l);
			else
				probe_event(l, evs[i].data.ptr);
		}
		probes_expire(l);
	}
	return NULL;
}

/* ---- handshake worker -------------------------------------------------- */

static void handshake(void *arg, struct usmc_conn *c)
{
	struct usmc_listener *l = arg;
	int rc = conn_make_blocking(c);

	kcompat_update_congestion(l, &c->opts); /* kernel-compat: the queue shrank */
	if (!rc)
		rc = srv_clc_handshake(c);
	if (rc) {
		listener_drop(l, c);
		return;
	}
	listener_enqueue(l, c);
	atomic_fetch_sub(&l->in_handshake, 1);
	if (atomic_load(&l->paused))
		wake_accept_thread(l);
}

/* ---- API ---------------------------------------------------------------- */

static int open_tcp_listener(struct usmc_listener *l, const struct sockaddr *addr,
			     socklen_t addrlen, int backlog, unsigned int flags)
{
	int one = 1, fd, rc;

	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    ((flags & USMC_LISTEN_REUSEPORT) &&
	     setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) ||
	    bind(fd, addr, addrlen))
		goto err;
	/* kernel-compat: SYN-ACKs of an SMC listener carry the option */
	if (l->opts.v[USMC_OPT_SMC])
		kcompat_listener_prepare(l->ctx->kc, fd, &l->kc);
	if (listen(fd, backlog))
		goto err;
	kcompat_listener_started(l->ctx->kc, fd, &l->kc);
	return fd;
err:
	rc = -errno;
	kcompat_listener_forget(l->ctx->kc, &l->kc);
	close(fd);
	return rc;
}

static int listener_setup_fds(struct usmc_listener *l)
{
	struct epoll_event ev = {.events = EPOLLIN};

	l->qfd = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
	l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->qfd < 0 || l->wakefd < 0 || l->epfd < 0)
		return -errno;
	ev.data.ptr = &lfd_tag;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->lfd, &ev))
		return -errno;
	ev.data.ptr = &wake_tag;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &ev))
		return -errno;
	return 0;
}

static void listener_free_fds(struct usmc_listener *l)
{
	int *fds[] = {&l->lfd, &l->qfd, &l->wakefd, &l->epfd};

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (*fds[i] >= 0)
			close(*fds[i]);
}

static int listener_init(struct usmc_listener *l, struct usmc_ctx *ctx, int backlog,
			 unsigned int flags)
{
	l->ctx = ctx;
	l->flags = flags;
	l->backlog = backlog;
	l->lfd = l->qfd = l->wakefd = l->epfd = -1;
	pthread_mutex_init(&l->opts_lock, NULL);
	pthread_mutex_init(&l->qlock, NULL);
	ctx_copy_opts(ctx, &l->opts);
	if (flags & USMC_LISTEN_AUTO_FALLBACK)
		l->opts.v[USMC_OPT_AUTO_FALLBACK] = 1;
	if (flags & USMC_LISTEN_TCP_ONLY)
		l->opts.v[USMC_OPT_SMC] = 0;
	return 0;
}

int usmc_listen(struct usmc_ctx *ctx, const struct sockaddr *addr, socklen_t addrlen, int backlog,
		unsigned int flags, struct usmc_listener **out)
{
	const unsigned int known = USMC_LISTEN_AUTO_FALLBACK | USMC_LISTEN_NONBLOCK |
				   USMC_LISTEN_REUSEPORT | USMC_LISTEN_TCP_ONLY;
	struct usmc_listener *l;
	int rc;

	if (!ctx || !addr || !out || (flags & ~known) || backlog < 1 ||
	    backlog > LISTEN_BACKLOG_MAX)
		return -EINVAL;
	if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	if (addrlen <
	    (addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)))
		return -EINVAL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	listener_init(l, ctx, backlog, flags);
	rc = open_tcp_listener(l, addr, addrlen, backlog, flags);
	if (rc < 0)
		goto err;
	l->lfd = rc;
	rc = listener_setup_fds(l);
	if (rc)
		goto err;
	rc = hs_pool_start(&l->hs, (int)l->opts.v[USMC_OPT_HS_THREADS], handshake, l);
	if (rc)
		goto err;
	rc = -pthread_create(&l->accept_thread, NULL, accept_thread_main, l);
	if (rc) {
		(void)hs_pool_stop(&l->hs);
		goto err;
	}
	atomic_fetch_add(&ctx->open_listeners, 1);
	*out = l;
	return 0;
err:
	kcompat_listener_forget(ctx->kc, &l->kc);
	listener_free_fds(l);
	pthread_mutex_destroy(&l->opts_lock);
	pthread_mutex_destroy(&l->qlock);
	free(l);
	return rc;
}

int usmc_listener_fd(const struct usmc_listener *l)
{
	return l ? l->qfd : -EINVAL;
}

int usmc_listener_addr(const struct usmc_listener *l, struct sockaddr_storage *addr,
		       socklen_t *addrlen)
{
	if (!l || !addr || !addrlen)
		return -EINVAL;
	*addrlen = sizeof(*addr);
	return getsockname(l->lfd, (struct sockaddr *)addr, addrlen) ? -errno : 0;
}

/* Take one count off the semaphore: 0, -EAGAIN, or an error. */
static int take_queue_token(struct usmc_listener *l, bool block)
{
	uint64_t v;

	for (;;) {
		struct pollfd p = {.fd = l->qfd, .events = POLLIN};

		if (read(l->qfd, &v, sizeof(v)) == sizeof(v))
			return 0;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		if (!block)
			return -EAGAIN;
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return -errno;
	}
}

int usmc_accept(struct usmc_listener *l, unsigned int flags, struct usmc_conn **out)
{
	struct usmc_conn *c;
	int rc;

	if (!l || !out || (flags & ~USMC_NONBLOCK))
		return -EINVAL;
	rc = take_queue_token(l, !(l->flags & USMC_LISTEN_NONBLOCK));
	if (rc)
		return rc;
	c = queue_pop(l);
	if (!c)
		return -EAGAIN; /* cannot happen: one token per queued connection */
	if (atomic_load(&l->paused))
		wake_accept_thread(l);
	c->nonblock = flags & USMC_NONBLOCK;
	atomic_fetch_add(&l->ctx->accepts, 1);
	*out = c;
	return 0;
}

int usmc_listener_setopt(struct usmc_listener *l, enum usmc_opt opt, long value)
{
	int rc;

	if (!l)
		return -EINVAL;
	pthread_mutex_lock(&l->opts_lock);
	rc = opts_set(&l->opts, opt, value);
	pthread_mutex_unlock(&l->opts_lock);
	return rc;
}

int usmc_listener_getopt(const struct usmc_listener *l, enum usmc_opt opt, long *value)
{
	struct usmc_listener *ml = (struct usmc_listener *)l;
	int rc;

	if (!l)
		return -EINVAL;
	pthread_mutex_lock(&ml->opts_lock);
	rc = opts_get(&ml->opts, opt, value);
	pthread_mutex_unlock(&ml->opts_lock);
	return rc;
}

void usmc_listener_stats(const struct usmc_listener *l, struct usmc_listener_stats *st)
{
	struct usmc_listener *ml = (struct usmc_listener *)l;

	if (!l || !st)
		return;
	st->accepted = atomic_load(&ml->accepted);
	st->smcr = atomic_load(&ml->smcr);
	st->fallbacks = atomic_load(&ml->fallbacks);
	st->hs_failed = atomic_load(&ml->hs_failed);
	st->congestion_fallbacks = atomic_load(&ml->congestion_fallbacks);
	st->backlog_full = atomic_load(&ml->backlog_full);
	st->in_handshake = atomic_load(&ml->in_handshake);
	st->queued = atomic_load(&ml->queued);
	st->hs_queue_depth = hs_pool_depth(&ml->hs);
	st->hs_queue_high = hs_pool_high(&ml->hs);
}

static void free_conn_list(struct usmc_conn *c)
{
	while (c) {
		struct usmc_conn *next = c->next;

		conn_destroy(c);
		c = next;
	}
}

int usmc_listener_close(struct usmc_listener *l)
{
	struct usmc_conn *c;

	if (!l)
		return -EINVAL;
	atomic_store(&l->stopping, true);
	wake_accept_thread(l);
	pthread_join(l->accept_thread, NULL);
	free_conn_list(hs_pool_stop(&l->hs));
	while (l->probes) {
		struct probing *p = l->probes;

		l->probes = p->next;
		conn_destroy(p->c);
		free(p);
	}
	while ((c = queue_pop(l)))
		conn_destroy(c);
	kcompat_listener_forget(l->ctx->kc, &l->kc);
	listener_free_fds(l);
	pthread_mutex_destroy(&l->opts_lock);
	pthread_mutex_destroy(&l->qlock);
	atomic_fetch_sub(&l->ctx->open_listeners, 1);
	free(l);
	return 0;
}
