// SPDX-License-Identifier: MIT
/*
 * The accept thread (docs/listener.md has the whole design):
 *
 * One thread runs one loop over an epoll set that holds the wake eventfd,
 * every connection being probed and, when connections are taken with
 * accept4(), the listen socket (level-triggered).
 *
 * In io_uring mode one multishot accept on the listen socket posts one
 * completion per accepted socket, and the thread sleeps in the ring, not in
 * epoll_wait(): a multishot poll on the epoll set tells it when to look
 * there. The ring is created and every request on it submitted by this
 * thread, with deferred task work, so the accepts run inside the one
 * io_uring_enter() the thread sleeps in: no signal interrupts it to run
 * them, no eventfd relays their completions (two wake-ups and three system
 * calls per batch fewer than an eventfd registered in the epoll set), and
 * none of it ever touches the application's threads.
 *
 * The thread never waits on a handshake: SMC clients go to the handshake
 * pool (handshake_pool.c), plain clients straight to the accept queue.
 */
#include <errno.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
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
#include "listen_handshake.h"

#define LISTEN_BACKLOG_MAX  65535
#define ACCEPT_EVENTS	    64
#define PROBE_PEEK_LEN	    8  /* a CLC header: all probe_classify() needs */
#define ACCEPT_RING_ENTRIES 64 /* SQ size; the CQ gets twice as many */
#define RING_UD_ACCEPT	    1  /* user_data of the multishot accept */
#define RING_UD_CANCEL	    2  /* user_data of its cancellation */
#define RING_UD_EPOLL	    3  /* user_data of the multishot poll on the epoll set */
/* one issuer (this thread), task work run when it waits: see the top */
#define RING_FLAGS    (IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN)
#define STASH_INITIAL 16
/*
 * Accepted sockets stay blocking, as connections use them (conn.c): every
 * read the listener does on them is MSG_DONTWAIT, and its one write, a
 * DECLINE, always fits a new socket's send buffer. That saves the two
 * fcntl() calls per connection that O_NONBLOCK would cost to undo.
 */
#define ACCEPT_FLAGS	  SOCK_CLOEXEC
#define RING_ROOM_DIVISOR 2 /* multishot while room > backlog / this */
#define RING_STOP_WAIT_MS 100
#define NSEC_PER_USEC	  1000ULL
#define NSEC_PER_MSEC	  1000000ULL

/* A connection whose first bytes the accept thread is waiting for. */
struct probing {
	struct usmc_conn *c;
	uint64_t deadline_ns;
	bool armed; /* its one-shot epoll entry has not fired yet */
	struct probing *prev, *next;
};

/*
 * One-shot: after its event the entry is disabled, so a connection that is
 * settled by its event needs no EPOLL_CTL_DEL (a system call per connection
 * saved); the disabled entry goes away by itself when the socket is closed.
 */
#define PROBE_EVENTS (EPOLLIN | EPOLLRDHUP | EPOLLET | EPOLLONESHOT)

/* epoll data for the non-connection descriptors */
static char lfd_tag, wake_tag;

static void wake_accept_thread(struct usmc_listener *l)
{
	uint64_t one = 1;

	if (write(l->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the thread is awake anyway */
	}
}

/* ---- pure decisions ------------------------------------------------------ */

unsigned int listen_backlog_room(unsigned int probing_or_hs, unsigned int queued,
				 unsigned int backlog)
{
	unsigned long used = (unsigned long)probing_or_hs + queued;

	return used >= backlog ? 0 : (unsigned int)(backlog - used);
}

bool listen_hs_congested(unsigned int depth, long threshold)
{
	/* threshold 0 cannot come from opts_hs_congestion(); treat it as
	 * "never idle enough", i.e. congested, rather than divide hairs */
	return threshold <= 0 || depth >= (unsigned long)threshold;
}

bool listen_decline_at_once(bool auto_fallback, unsigned int depth, long threshold)
{
	return auto_fallback && listen_hs_congested(depth, threshold);
}

unsigned int listen_hist_bucket(uint64_t us)
{
	unsigned int b = 0;

	while (us > 1 && b < USMC_HS_HIST_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	return b;
}

/* ---- accounting ---------------------------------------------------------- */

/* Accept thread: room for connections in the listener proper (the stash
 * of io_uring mode is not in it: docs/listener.md, "Backlog"). */
static unsigned int backlog_room(struct usmc_listener *l)
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

static void record_hs_time(struct usmc_listener *l, const struct usmc_conn *c)
{
	uint64_t us = (clock_now_ns() - c->t_accept_ns) / NSEC_PER_USEC;

	atomic_fetch_add_explicit(&l->hs_hist[listen_hist_bucket(us)], 1, memory_order_relaxed);
}

/* ---- accept queue ------------------------------------------------------ */

/*
 * The accept queue's fd (usmc_listener_fd()) is an eventfd that is
 * readable exactly while the queue holds a connection. It is written when
 * the queue becomes non-empty and drained when it becomes empty, both
 * under qlock, so it never disagrees with the queue once the lock is
 * released: two system calls per batch the application takes, not one
 * per connection. (The write under the lock is on the empty-queue edge,
 * when the application has nothing to pop, so it rarely holds anyone up.)
 */
static void queue_signal(struct usmc_listener *l, bool ready)
{
	uint64_t v = 1;

	if (l->qready == ready)
		return;
	l->qready = ready;
	if (ready ? write(l->qfd, &v, sizeof(v)) < 0 : read(l->qfd, &v, sizeof(v)) < 0) {
		/* cannot fail: the count is 0 or 1, and 1 before a read */
	}
}

void listener_enqueue(struct usmc_listener *l, struct usmc_conn *c)
{
	if (c->mode == USMC_MODE_SMCR) {
		atomic_fetch_add(&l->smcr, 1);
	} else {
		atomic_fetch_add(&l->fallbacks, 1);
		atomic_fetch_add(&l->fallback_by_reason[usmc_reason_slot(c->reason)], 1);
	}
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
	queue_signal(l, true);
	pthread_mutex_unlock(&l->qlock);
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
	queue_signal(l, l->qhead != NULL);
	pthread_mutex_unlock(&l->qlock);
	return c;
}

/* ---- probing (accept thread) ------------------------------------------- */

/* Forget a probe entry (NULL: the connection was never in the epoll set). */
static void probe_forget(struct usmc_listener *l, struct probing *p)
{
	if (!p)
		return;
	if (p->prev)
		p->prev->next = p->next;
	else
		l->probes = p->next;
	if (p->next)
		p->next->prev = p->prev;
	else
		l->probes_tail = p->prev;
	if (p->armed)
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, p->c->fd, NULL);
	free(p);
}

/* The connection is TCP: give it to the application. */
static void finish_tcp(struct usmc_listener *l, struct usmc_conn *c, uint32_t reason)
{
	conn_set_mode(c, USMC_MODE_TCP, reason, false);
	listener_enqueue(l, c);
}

static uint32_t plain_client_reason(struct usmc_listener *l)
{
	return ctx_has_smcr_device(l->ctx) ? USMC_REASON_PEERNOSMC : USMC_REASON_NOSMCRDEV;
}

/* What the client's first bytes say so far. EOF or a socket error mean
 * TCP: the application will see them. */
static enum probe_verdict peek_verdict(int fd)
{
	uint8_t buf[PROBE_PEEK_LEN];
	ssize_t n = recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return PROBE_NEED_MORE;
	if (n <= 0)
		return PROBE_TCP;
	return probe_classify(buf, (size_t)n);
}

/*
 * Auto-fallback: decided when the client shows it is an SMC client, from
 * the pool's state at that moment (the moment we would queue it). Sticky:
 * a PROPOSAL that arrives in pieces is declined once it is complete.
 */
static bool should_decline(struct usmc_listener *l, struct usmc_conn *c)
{
	if (!c->decline_at_once)
		c->decline_at_once =
			listen_decline_at_once(c->opts.v[USMC_OPT_AUTO_FALLBACK],
					       hs_pool_depth(&l->hs), opts_hs_congestion(&c->opts));
	return c->decline_at_once;
}

/* Answer an SMC client's PROPOSAL with a DECLINE right here, without the
 * pool. Returns false while the PROPOSAL is still incomplete. */
static bool decline_congested(struct usmc_listener *l, struct usmc_conn *c, struct probing *p)
{
	int rc = listen_decline_now(c, USMC_DECL_SERVER_BUSY);

	if (rc == -EAGAIN)
		return false;
	probe_forget(l, p);
	if (rc) {
		listener_drop(l, c);
		return true;
	}
	record_hs_time(l, c);
	atomic_fetch_add(&l->congestion_fallbacks, 1);
	finish_tcp(l, c, USMC_REASON_HS_CONGESTED);
	atomic_fetch_sub(&l->in_handshake, 1);
	return true;
}

/* Kernel-compat: SYN-ACKs go out without the option while congested. */
static void kcompat_update_congestion(struct usmc_listener *l, const struct usmc_opts *o)
{
	if (o->v[USMC_OPT_AUTO_FALLBACK])
		kcompat_listener_set_congested(
			l->ctx->kc, &l->kc,
			listen_hs_congested(hs_pool_depth(&l->hs), opts_hs_congestion(o)));
}

/* Queue @c for a handshake worker. */
static void hs_submit(struct usmc_listener *l, struct usmc_conn *c)
{
	struct usmc_opts o = c->opts; /* @c belongs to the pool once queued */

	hs_pool_submit(&l->hs, c);	  /* stays counted in in_handshake */
	kcompat_update_congestion(l, &o); /* kernel-compat: the queue grew */
}

enum kc_decline {
	KC_DECLINE_NONE,    /* no DECLINE from the client: probe as usual */
	KC_DECLINE_WAIT,    /* part of a DECLINE: wait for the rest */
	KC_DECLINE_SETTLED, /* @c was decided (and @p freed) */
};

/*
 * Kernel-compat: a client that signalled SMC in its SYN may decline at once
 * (a Linux client without a usable device does): TCP with its reason.
 * @p may be NULL before the probe started.
 */
static enum kc_decline kcompat_probe_decline(struct usmc_listener *l, struct usmc_conn *c,
					     struct probing *p, bool expired)
{
	uint32_t reason;
	int rc = kcompat_take_decline(c->kc_peer, c->fd, &reason);

	if (rc == 0)
		return KC_DECLINE_NONE;
	if (rc == -EAGAIN && !expired)
		return KC_DECLINE_WAIT; /* the next segment wakes us */
	probe_forget(l, p);
	if (rc < 0) { /* malformed, or never completed: a failed handshake */
		listener_drop(l, c);
		return KC_DECLINE_SETTLED;
	}
	conn_set_mode(c, USMC_MODE_TCP, reason, true);
	listener_enqueue(l, c);
	atomic_fetch_sub(&l->in_handshake, 1);
	return KC_DECLINE_SETTLED;
}

/* probe_verdict, plus: @c was decided (and its probe entry freed) */
#define PROBE_SETTLED ((enum probe_verdict)(PROBE_TCP + 1))

/*
 * What @c's first bytes say. In kernel-compat mode a client that signalled
 * SMC may send a DECLINE instead of a PROPOSAL: that is looked for after
 * the probe's peek, never before, so a DECLINE that arrives between two
 * peeks is seen by the second and never mistaken for a plain client's
 * data.
 */
static enum probe_verdict classify(struct usmc_listener *l, struct usmc_conn *c, struct probing *p,
				   bool expired)
{
	enum probe_verdict v = peek_verdict(c->fd);

	if (v == PROBE_SMC)
		return v;
	switch (kcompat_probe_decline(l, c, p, expired)) { /* kernel-compat */
	case KC_DECLINE_SETTLED:
		return PROBE_SETTLED;
	case KC_DECLINE_WAIT:
		return PROBE_NEED_MORE;
	case KC_DECLINE_NONE:
		break;
	}
	return v;
}

/*
 * Kernel-compat mode (kcompat.h): the TCP handshake already said whether
 * the client runs CLC. Returns true when @c was decided here.
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

/*
 * Act on a final verdict (PROBE_SMC or PROBE_TCP) for @c, probed through
 * @p (or NULL). Returns false if @c must keep waiting for bytes.
 */
static bool probe_settle(struct usmc_listener *l, struct usmc_conn *c, enum probe_verdict v,
			 struct probing *p)
{
	if (v == PROBE_SMC && should_decline(l, c))
		return decline_congested(l, c, p);
	probe_forget(l, p); /* before the hand-off: a worker may close the fd */
	if (v == PROBE_SMC) {
		hs_submit(l, c);
		return true;
	}
	finish_tcp(l, c, plain_client_reason(l));
	atomic_fetch_sub(&l->in_handshake, 1);
	return true;
}

static void probe_arm(struct usmc_listener *l, struct probing *p, int op)
{
	struct epoll_event ev = {.events = PROBE_EVENTS, .data.ptr = p};

	p->armed = !epoll_ctl(l->epfd, op, p->c->fd, &ev);
}

static void probe_event(struct usmc_listener *l, struct probing *p)
{
	enum probe_verdict v;

	p->armed = false;
	v = classify(l, p->c, p, false);
	if (v == PROBE_SETTLED)
		return;
	if (v != PROBE_NEED_MORE && probe_settle(l, p->c, v, p))
		return;
	/* a prefix of a header, or a PROPOSAL to decline that is not
	 * complete: the next segment wakes us (if re-arming fails, the
	 * probe deadline still settles it) */
	probe_arm(l, p, EPOLL_CTL_MOD);
}

static void probes_expire(struct usmc_listener *l)
{
	uint64_t now = clock_now_ns();

	/* the list is in deadline order (see probe_start) */
	while (l->probes && l->probes->deadline_ns <= now) {
		struct probing *p = l->probes;
		struct usmc_conn *c = p->c;

		enum probe_verdict v = classify(l, c, p, true);

		if (v == PROBE_SETTLED)
			continue;
		/* silence, a partial header or anything else: a plain client */
		if (v != PROBE_SMC) {
			probe_settle(l, c, PROBE_TCP, p);
			continue;
		}
		/* a PROPOSAL header whose event we have not handled yet, or
		 * whose body is late: an SMC client all the same */
		if (probe_settle(l, c, PROBE_SMC, p))
			continue;
		/* declining at once needs the whole PROPOSAL, which is late:
		 * let a worker wait for it with the CLC timeout */
		c->decline_at_once = false;
		probe_forget(l, p);
		hs_submit(l, c);
	}
}

static int probe_start(struct usmc_listener *l, struct usmc_conn *c, long probe_ms)
{
	struct probing *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->c = c;
	p->deadline_ns = clock_now_ns() + (uint64_t)probe_ms * NSEC_PER_MSEC;
	probe_arm(l, p, EPOLL_CTL_ADD);
	if (!p->armed) {
		free(p);
		return -errno;
	}
	/* Keep the list in deadline order. Plain probes all have the same
	 * timeout and append; only kernel-compat SMC peers, which wait for CLC
	 * longer, are passed over. */
	struct probing *at = l->probes_tail;

	while (at && at->deadline_ns > p->deadline_ns)
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
	/* bytes that arrive between the caller's peek and the ADD are
	 * reported too: edge-triggered epoll reports data present at ADD */
	return 0;
}

/* ---- accepting (accept thread) ----------------------------------------- */

static void accept_one(struct usmc_listener *l, int fd)
{
	struct usmc_opts o;
	struct usmc_conn *c;
	enum probe_verdict v;

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
	c->t_accept_ns = clock_now_ns();
	if (!o.v[USMC_OPT_SMC]) {
		finish_tcp(l, c, USMC_REASON_DISABLED);
		note_backlog_high(l);
		return;
	}
	kcompat_update_congestion(l, &o); /* kernel-compat */
	if (kcompat_accept(l, c)) {	  /* kernel-compat */
		note_backlog_high(l);
		return;
	}
	atomic_fetch_add(&l->in_handshake, 1);
	note_backlog_high(l);
	/* Under load the client's first segment is often here already:
	 * classify it now and skip the epoll round trip. */
	v = classify(l, c, NULL, false);
	if (v == PROBE_SETTLED || (v != PROBE_NEED_MORE && probe_settle(l, c, v, NULL)))
		return;
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

/* accept4 mode: take connections while the backlog has room. */
static void accept_burst(struct usmc_listener *l)
{
	while (backlog_room(l) > 0) {
		int fd = accept4(l->lfd, NULL, NULL, ACCEPT_FLAGS);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return; /* EAGAIN, or EMFILE & co: retried on the next event */
		}
		accept_one(l, fd);
	}
}

static int next_timeout(struct usmc_listener *l)
{
	uint64_t now;

	if (!l->probes)
		return -1;
	now = clock_now_ns();
	if (l->probes->deadline_ns <= now)
		return 0;
	/* round up: waking a little late is fine, spinning early is not */
	return (int)((l->probes->deadline_ns - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC);
}

static void wake_event(struct usmc_listener *l)
{
	uint64_t v;

	if (read(l->wakefd, &v, sizeof(v)) < 0) {
		/* spurious: nothing to do */
	}
}

/* ---- io_uring multishot accept (accept thread) ----------------------------- */

static int ring_submit_one(struct usmc_listener *l, uint64_t what)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ar.ring);
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
	rc = io_uring_submit(&l->ar.ring);
	return rc < 0 ? rc : 0;
}

static void ring_arm(struct usmc_listener *l)
{
	if (!l->ar.armed && !ring_submit_one(l, RING_UD_ACCEPT))
		l->ar.armed = true;
}

static void ring_cancel(struct usmc_listener *l)
{
	/* armed stays true until the request's last completion */
	if (l->ar.armed && !l->ar.cancelling && !ring_submit_one(l, RING_UD_CANCEL))
		l->ar.cancelling = true;
}

/* The poll that wakes the ring's waiter when the epoll set has events. */
static int ring_poll_epoll(struct usmc_listener *l)
{
	int rc = 0;

	if (!l->ar.polling) {
		rc = ring_submit_one(l, RING_UD_EPOLL);
		l->ar.polling = !rc;
	}
	return rc;
}

/* A socket the ring accepted while the listener is at its cap (or behind
 * older stashed ones): keep it for later, in order. */
static void stash_push(struct usmc_listener *l, int fd)
{
	struct accept_ring *ar = &l->ar;

	if (ar->nstash == ar->stash_cap) {
		unsigned int cap = ar->stash_cap ? 2 * ar->stash_cap : STASH_INITIAL;
		int *s = realloc(ar->stash, cap * sizeof(*s));

		if (!s) {
			close(fd); /* out of memory: the client sees a reset */
			atomic_fetch_add(&l->hs_failed, 1);
			return;
		}
		ar->stash = s;
		ar->stash_cap = cap;
	}
	ar->stash[ar->nstash++] = fd;
	if (ar->nstash > atomic_load(&l->stash_high))
		atomic_store(&l->stash_high, ar->nstash);
}

static void stash_serve(struct usmc_listener *l)
{
	struct accept_ring *ar = &l->ar;

	while (ar->nstash && backlog_room(l)) {
		int fd = ar->stash[0];

		memmove(ar->stash, ar->stash + 1, --ar->nstash * sizeof(*ar->stash));
		accept_one(l, fd);
	}
}

static void flow_control(struct usmc_listener *l);

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

static void ring_take(struct usmc_listener *l, int fd)
{
	if (l->ar.nstash || !backlog_room(l)) {
		stash_push(l, fd);
		return;
	}
	accept_one(l, fd);
	if (backlog_room(l) <= ring_min_room(l))
		flow_control(l); /* cancel now, not after the whole batch */
}

/* The kernel cannot do multishot accept: use accept4 from now on. */
static void ring_give_up(struct usmc_listener *l)
{
	l->ar.on = false;
	atomic_store(&l->uring_on, false);
}

static void dispatch_epoll(struct usmc_listener *l, int timeout_ms)
{
	struct epoll_event evs[ACCEPT_EVENTS];
	int n = epoll_wait(l->epfd, evs, ACCEPT_EVENTS, timeout_ms);

	for (int i = 0; i < n; i++) {
		if (evs[i].data.ptr == &lfd_tag)
			accept_burst(l);
		else if (evs[i].data.ptr == &wake_tag)
			wake_event(l);
		else
			probe_event(l, evs[i].data.ptr);
	}
}

/* One completion of the multishot accept. */
static void ring_accepted(struct usmc_listener *l, const struct io_uring_cqe *cqe)
{
	if (!(cqe->flags & IORING_CQE_F_MORE))
		l->ar.armed = l->ar.cancelling = false; /* flow_control() re-arms */
	if (cqe->res >= 0)
		ring_take(l, cqe->res);
	else if (cqe->res == -EINVAL || cqe->res == -EOPNOTSUPP)
		ring_give_up(l);
}

/*
 * io_uring mode: sleep in the ring until a completion or the next probe
 * deadline, then handle every completion, and the epoll set if its poll
 * fired.
 */
static void ring_round(struct usmc_listener *l)
{
	struct accept_ring *ar = &l->ar;
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;
	int timeout_ms = next_timeout(l);
	bool epoll_ready = false;

	/* without its poll the epoll set is looked at on every round */
	if (ring_poll_epoll(l))
		timeout_ms = timeout_ms < 0 || timeout_ms > RING_STOP_WAIT_MS ? RING_STOP_WAIT_MS
									      : timeout_ms;
	ts.tv_sec = timeout_ms / 1000;
	ts.tv_nsec = (long long)(timeout_ms % 1000) * (long long)NSEC_PER_MSEC;
	if (io_uring_wait_cqe_timeout(&ar->ring, &cqe, timeout_ms < 0 ? NULL : &ts) && ar->polling)
		return; /* timed out (probes_expire() follows) or interrupted */
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
	if (epoll_ready || !ar->polling)
		dispatch_epoll(l, 0);
}

/*
 * Create the ring and arm the multishot accept; false if this kernel (or
 * its policy, e.g. kernel.io_uring_disabled) does not allow it. A kernel
 * without multishot accept fails the request at once with -EINVAL.
 */
static bool ring_setup(struct usmc_listener *l)
{
	struct accept_ring *ar = &l->ar;
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
	ar->up = ar->on = true;
	return true;
fail:
	io_uring_queue_exit(&ar->ring); /* cancels whatever is in flight */
	ar->armed = ar->polling = false;
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
	struct accept_ring *ar = &l->ar;
	struct io_uring_cqe *cqe;

	if (!ar->up)
		return;
	ring_cancel(l);
	while (ar->armed) {
		struct __kernel_timespec ts = {.tv_nsec = RING_STOP_WAIT_MS * NSEC_PER_MSEC};

		if (io_uring_wait_cqe_timeout(&ar->ring, &cqe, &ts))
			break; /* io_uring_queue_exit() cancels it anyway */
		ring_reap(ar, cqe);
	}
	while (!io_uring_peek_cqe(&ar->ring, &cqe))
		ring_reap(ar, cqe);
	for (unsigned int i = 0; i < ar->nstash; i++)
		close(ar->stash[i]);
	free(ar->stash);
	io_uring_queue_exit(&ar->ring);
}

/* ---- flow control at the backlog cap (accept thread) ------------------- */

enum take_mode {
	TAKE_NONE,  /* at the cap: the kernel's queue holds new connections */
	TAKE_EXACT, /* accept4() from epoll, checked one by one */
	TAKE_RING,  /* io_uring multishot accept */
};

static void set_lfd_events(struct usmc_listener *l, bool in)
{
	struct epoll_event ev = {.events = in ? EPOLLIN : 0, .data.ptr = &lfd_tag};

	if (l->lfd_in != in && !epoll_ctl(l->epfd, EPOLL_CTL_MOD, l->lfd, &ev))
		l->lfd_in = in;
}

static void set_take_mode(struct usmc_listener *l, enum take_mode m)
{
	if (m == TAKE_RING)
		ring_arm(l);
	else
		ring_cancel(l);
	set_lfd_events(l, m == TAKE_EXACT);
}

/*
 * Stop taking connections at the cap (the kernel's queue holds them, then
 * overflows into listen drops, as for any TCP server) and resume when
 * there is room. paused is set BEFORE the last look at the counts, and
 * the threads that free room decrement a count before they look at
 * paused: one of the two always sees the other, so no wake-up is lost.
 */
static void flow_control(struct usmc_listener *l)
{
	unsigned int room;

	stash_serve(l);
	room = backlog_room(l);
	if (!room) {
		bool was = atomic_exchange(&l->paused, true);

		room = backlog_room(l);
		if (!room) {
			if (!was)
				atomic_fetch_add(&l->backlog_full, 1);
			set_take_mode(l, TAKE_NONE);
			return;
		}
	}
	atomic_store(&l->paused, false);
	set_take_mode(l, l->ar.on && room > ring_min_room(l) ? TAKE_RING : TAKE_EXACT);
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

static void *accept_thread_main(void *arg)
{
	struct usmc_listener *l = arg;
	long want_ring, batch;

	pthread_mutex_lock(&l->opts_lock);
	want_ring = l->opts.v[USMC_OPT_ACCEPT_URING];
	batch = l->opts.v[USMC_OPT_ACCEPT_BATCH];
	pthread_mutex_unlock(&l->opts_lock);
	if (batch)
		accept_thread_batch();
	/* The ring belongs to this thread (see the top of the file). */
	if (want_ring && ring_setup(l))
		atomic_store(&l->uring_on, true);
	flow_control(l);
	pthread_mutex_lock(&l->start_lock);
	l->started = true;
	pthread_cond_signal(&l->start_cond);
	pthread_mutex_unlock(&l->start_lock);

	while (!atomic_load(&l->stopping)) {
		if (l->ar.up)
			ring_round(l);
		else
			dispatch_epoll(l, next_timeout(l));
		probes_expire(l);
		flow_control(l);
	}
	ring_teardown(l);
	return NULL;
}

/* ---- handshake worker -------------------------------------------------- */

static void handshake(void *arg, struct usmc_conn *c)
{
	struct usmc_listener *l = arg;
	int rc;

	kcompat_update_congestion(l, &c->opts); /* kernel-compat: the queue shrank */
	rc = listen_handshake(c);		/* the socket is blocking (ACCEPT_FLAGS) */

	if (rc) {
		listener_drop(l, c);
		return;
	}
	record_hs_time(l, c);
	listener_enqueue(l, c);
	atomic_fetch_sub(&l->in_handshake, 1);
	if (atomic_load(&l->paused))
		wake_accept_thread(l);
}

/* ---- API ---------------------------------------------------------------- */

static int open_tcp_listener(struct usmc_listener *l, const struct sockaddr *addr,
			     socklen_t addrlen, int backlog, unsigned int flags, int defer_s)
{
	int one = 1, fd, rc;

	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    ((flags & USMC_LISTEN_REUSEPORT) &&
	     setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) ||
	    (defer_s && setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s))) ||
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

	l->qfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->qfd < 0 || l->wakefd < 0 || l->epfd < 0)
		return -errno;
	/* polled for nothing until the accept thread's flow_control() says */
	ev.events = 0;
	ev.data.ptr = &lfd_tag;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->lfd, &ev))
		return -errno;
	ev.events = EPOLLIN;
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
	pthread_mutex_init(&l->start_lock, NULL);
	pthread_cond_init(&l->start_cond, NULL);
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
	/* deferring only helps the probe: a TCP-only listener has none */
	rc = open_tcp_listener(l, addr, addrlen, backlog, flags,
			       l->opts.v[USMC_OPT_SMC] ? (int)l->opts.v[USMC_OPT_DEFER_ACCEPT] : 0);
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
	/* return only once the accept thread chose io_uring or accept4 */
	pthread_mutex_lock(&l->start_lock);
	while (!l->started)
		pthread_cond_wait(&l->start_cond, &l->start_lock);
	pthread_mutex_unlock(&l->start_lock);
	atomic_fetch_add(&ctx->open_listeners, 1);
	*out = l;
	return 0;
err:
	kcompat_listener_forget(ctx->kc, &l->kc);
	listener_free_fds(l);
	pthread_cond_destroy(&l->start_cond);
	pthread_mutex_destroy(&l->start_lock);
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

/* Blocking usmc_accept(): sleep until the queue is not empty. */
static int wait_queue(struct usmc_listener *l)
{
	struct pollfd p = {.fd = l->qfd, .events = POLLIN};

	if (poll(&p, 1, -1) < 0 && errno != EINTR)
		return -errno;
	return 0;
}

int usmc_accept(struct usmc_listener *l, unsigned int flags, struct usmc_conn **out)
{
	struct usmc_conn *c;
	int rc;

	if (!l || !out || (flags & ~USMC_NONBLOCK))
		return -EINVAL;
	/* queued is a hint read without the lock: the loop's last call, the
	 * one that finds nothing, costs no system call */
	while (!atomic_load(&l->queued) || !(c = queue_pop(l))) {
		if (l->flags & USMC_LISTEN_NONBLOCK)
			return -EAGAIN;
		rc = wait_queue(l);
		if (rc)
			return rc;
	}
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

/*
 * What the kernel knows of this listen socket: TCP_INFO of a listener gives
 * its accept queue length in tcpi_unacked, and every connection it drops
 * for a full queue (SYN or third ACK; ListenOverflows/ListenDrops in
 * /proc/net/netstat, which are per host) also counts in the socket's own
 * sk_drops, which SO_MEMINFO reports: so the drops here are this listener's.
 */
static void kernel_listen_stats(int lfd, struct usmc_listener_stats *st)
{
	uint32_t mem[SK_MEMINFO_VARS];
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	st->kernel_queue = 0;
	st->listen_drops = 0;
	if (!getsockopt(lfd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		st->kernel_queue = ti.tcpi_unacked;
	len = sizeof(mem);
	if (!getsockopt(lfd, SOL_SOCKET, SO_MEMINFO, mem, &len) &&
	    len >= sizeof(uint32_t) * (SK_MEMINFO_DROPS + 1))
		st->listen_drops = mem[SK_MEMINFO_DROPS];
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
	st->backlog_high = atomic_load(&ml->backlog_high);
	st->accept_stash_high = atomic_load(&ml->stash_high);
	for (int i = 0; i < USMC_HS_HIST_BUCKETS; i++)
		st->hs_time_hist[i] = atomic_load_explicit(&ml->hs_hist[i], memory_order_relaxed);
	st->accept_uring = atomic_load(&ml->uring_on);
	kernel_listen_stats(ml->lfd, st);
}

uint64_t usmc_listener_fallback_count(const struct usmc_listener *l, uint32_t reason)
{
	struct usmc_listener *ml = (struct usmc_listener *)l;
	unsigned int slot = usmc_reason_slot(reason);

	/* Unknown codes share a slot: report them only when asked for one. */
	if (!l || (slot == USMC_REASON_SLOTS - 1 && usmc_reason_lookup(reason)))
		return 0;
	return atomic_load(&ml->fallback_by_reason[slot]);
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
	pthread_cond_destroy(&l->start_cond);
	pthread_mutex_destroy(&l->start_lock);
	pthread_mutex_destroy(&l->opts_lock);
	pthread_mutex_destroy(&l->qlock);
	atomic_fetch_sub(&l->ctx->open_listeners, 1);
	free(l);
	return 0;
}
