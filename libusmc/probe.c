// SPDX-License-Identifier: MIT
/*
 * The probe (the rule is in docs/tcp-path.md): the pure classifier of a
 * client's first bytes, and the accept thread's set of connections whose
 * first bytes it is waiting for, each with a one-shot epoll entry and a
 * deadline, kept in deadline order.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "clc.h"
#include "clc_io.h"
#include "clock.h"
#include "conn.h"
#include "ctx.h"
#include "listen_core.h"
#include "listen_handshake.h"
#include "probe.h"

/*
 * What one peek of a client's first bytes saw. It takes as much as a whole
 * PROPOSAL can be, not just the header probe_classify() needs: one peek
 * then tells an SMC client, a kernel client's DECLINE and whether the
 * PROPOSAL is whole, and the worker takes it without looking again.
 */
struct first_bytes {
	uint8_t buf[CLC_PROPOSAL_MAX_LEN];
	ssize_t n; /* what the peek returned: bytes, -EAGAIN, -ECONNRESET (EOF), -errno */
};

/* What the accept thread waits for on a connection. */
enum probe_wait {
	PROBE_FIRST_BYTES, /* its first bytes: a plain client or an SMC one? */
	PROBE_PROPOSAL,	   /* an SMC client's whole PROPOSAL */
	PROBE_PARKED,	   /* a handshake's next CLC message (the CONFIRM) */
	PROBE_EVENT,	   /* a handshake waiting for a handshake event (listen_hs_waits_event()) */
};

/* A connection whose bytes the accept thread is waiting for. */
struct probing {
	struct usmc_conn *c;
	enum probe_wait wait;
	uint64_t deadline_ns;
	bool armed; /* its one-shot epoll entry has not fired yet */
	bool lowat; /* SO_RCVLOWAT raised: epoll wakes for the whole message */
	struct probing *prev, *next;
};

/*
 * One-shot: after its event the entry is disabled, so a connection that is
 * settled by its event needs no EPOLL_CTL_DEL (a system call per connection
 * saved); the disabled entry goes away by itself when the socket is closed.
 */
#define PROBE_EVENTS (EPOLLIN | EPOLLRDHUP | EPOLLET | EPOLLONESHOT)

/* ---- the classifier (pure) ---------------------------------------------- */

enum probe_verdict probe_classify(const uint8_t *buf, size_t len)
{
	if (!clc_hdr_starts(buf, len, CLC_PROPOSAL))
		return PROBE_TCP;
	if (len < CLC_HDR_LEN)
		return PROBE_NEED_MORE;
	/* version 0 does not exist; Linux rejects it too (smc_clc_wait_msg()) */
	return clc_hdr_version(buf) ? PROBE_SMC : PROBE_TCP;
}

/* ---- the probe set (accept thread) -------------------------------------- */

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
}

/* Keep the list in deadline order. Probes of one kind all have the same
 * timeout and mostly append; the others are passed over. */
static void probe_insert(struct usmc_listener *l, struct probing *p)
{
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
}

/* SO_RCVLOWAT: the socket is readable (for epoll too: tcp_poll(), and
 * tcp_data_ready() wakes nobody before) only with @need bytes, so a client
 * that trickles its message costs no wake-up per byte. */
static void probe_lowat(struct probing *p, size_t need)
{
	int v = (int)need;

	if (need > 1 && !setsockopt(p->c->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)))
		p->lowat = true;
}

/* Forget a probe entry (NULL: the connection was never in the epoll set).
 * The socket is as it was: whoever has it next reads it normally. */
static void probe_forget(struct usmc_listener *l, struct probing *p)
{
	int one = 1;

	if (!p)
		return;
	if (p->wait == PROBE_EVENT)
		atomic_fetch_sub(&l->event_waiters, 1);
	probe_unlink(l, p);
	if (p->armed)
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, p->c->fd, NULL);
	if (p->lowat)
		setsockopt(p->c->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
	free(p);
}

/* The whole handshake's deadline (USMC_OPT_HS_TIMEOUT_MS from the accept). */
static uint64_t hs_deadline_ns(const struct usmc_conn *c)
{
	return (uint64_t)listen_hs_deadline_ms(c) * CLOCK_NSEC_PER_MSEC;
}

/* When the rest of a CLC message whose first bytes came now is due: within
 * LISTEN_CLC_REST_MS, and within the handshake's deadline. */
static uint64_t rest_deadline_ns(const struct usmc_conn *c)
{
	uint64_t rest = clock_now_ns() + (uint64_t)LISTEN_CLC_REST_MS * CLOCK_NSEC_PER_MSEC;

	return rest < hs_deadline_ns(c) ? rest : hs_deadline_ns(c);
}

static uint32_t plain_client_reason(struct usmc_listener *l)
{
	return ctx_has_smcr_device(l->ctx) ? USMC_REASON_PEERNOSMC : USMC_REASON_NOSMCRDEV;
}

/* Peek at the client's first bytes into @fb. */
static void peek_first(int fd, struct first_bytes *fb)
{
	fb->n = recv(fd, fb->buf, sizeof(fb->buf), MSG_PEEK | MSG_DONTWAIT);
	if (fb->n < 0)
		fb->n = errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
	else if (!fb->n)
		fb->n = -ECONNRESET;
}

/* What the client's first bytes say so far. EOF or a socket error mean
 * TCP: the application will see them. */
static enum probe_verdict peek_verdict(const struct first_bytes *fb)
{
	if (fb->n == -EAGAIN)
		return PROBE_NEED_MORE;
	if (fb->n < 0)
		return PROBE_TCP;
	return probe_classify(fb->buf, (size_t)fb->n);
}

/*
 * Auto-fallback: decided when the client shows it is an SMC client, from
 * the pool's state at that moment (the moment we would queue it). Sticky:
 * a PROPOSAL that arrives in pieces is declined once it is complete.
 */
static bool should_decline(struct usmc_listener *l, struct usmc_conn *c)
{
	if (!c->decline_at_once) /* by cost: listen.c listener_decline_smcr() */
		c->decline_at_once = listener_decline_smcr(l, &c->opts);
	return c->decline_at_once;
}

/*
 * Answer an SMC client's PROPOSAL with a DECLINE right here, without the
 * pool, and hand it to the application as TCP with @why: the pool was
 * congested (HS_CONGESTED), or the client's address holds its share of the
 * backlog (SRC_BUSY). The client is told SERVER_BUSY either way: what it
 * can do about it is the same. Returns false while the PROPOSAL is still
 * incomplete.
 */
static bool decline_busy(struct usmc_listener *l, struct usmc_conn *c, struct probing *p,
			 uint32_t why)
{
	int rc = listen_decline_now(c, USMC_REASON_SERVER_BUSY);

	if (rc == -EAGAIN)
		return false;
	probe_forget(l, p);
	if (rc) {
		listener_drop(l, c, rc);
		return true;
	}
	listener_record_hs_time(l, c);
	usmc_log(&l->ctx->log, USMC_LOG_WARN, "listener %s: %s: DECLINE SERVER_BUSY to %s, TCP",
		 log_local(c->fd).s,
		 why == USMC_REASON_HS_CONGESTED ? "handshake queue congested"
						 : "its address holds its share of the backlog",
		 conn_log_peer(c).s);
	if (why == USMC_REASON_HS_CONGESTED)
		atomic_fetch_add(&l->congestion_fallbacks, 1);
	listener_finish_tcp(l, c, why);
	atomic_fetch_sub(&l->in_handshake, 1);
	return true;
}

/*
 * @c's address holds its share of the backlog (listen_src_refuse()). An
 * SMC client whose PROPOSAL is whole (@rc > 0) is declined at once and
 * runs TCP, as with a congested pool: it holds nothing. One whose CLC
 * message is not whole is closed, as Linux closes a handshake whose CLC
 * fails: waiting for the rest is the place it must not hold, and handing
 * it to the application as TCP would give the application CLC bytes as
 * data (and the client, waiting for our answer, a dead stream).
 */
static void src_refuse(struct usmc_listener *l, struct usmc_conn *c, struct probing *p, int rc)
{
	if (rc > 0 && decline_busy(l, c, p, USMC_REASON_SRC_BUSY))
		return;
	usmc_log(&l->ctx->log, USMC_LOG_WARN,
		 "listener %s: %s holds its share of the backlog (%u of %d): closed before its "
		 "CLC message was whole",
		 log_local(c->fd).s, conn_log_peer(c).s, listen_src_share((unsigned int)l->backlog),
		 l->backlog);
	probe_forget(l, p);
	listener_drop(l, c, -EBUSY);
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
					     struct probing *p, struct first_bytes *fb,
					     bool expired)
{
	uint32_t reason;
	int rc = kcompat_take_decline(c->kc_peer, c->fd, fb->buf, fb->n, &reason);

	if (rc == 0)
		return KC_DECLINE_NONE;
	if (rc == -EAGAIN && !expired)
		return KC_DECLINE_WAIT; /* the next segment wakes us */
	probe_forget(l, p);
	if (rc < 0) { /* malformed, or never completed: a failed handshake */
		listener_drop(l, c, rc);
		return KC_DECLINE_SETTLED;
	}
	usmc_log(&l->ctx->log, USMC_LOG_INFO, "CLC: DECLINE from %s: %s (0x%08x)",
		 conn_log_peer(c).s, log_reason(reason), reason);
	conn_set_mode(c, USMC_MODE_TCP, reason, true);
	listener_enqueue(l, c);
	atomic_fetch_sub(&l->in_handshake, 1);
	return KC_DECLINE_SETTLED;
}

/* probe_verdict, plus: @c was decided (and its probe entry freed) */
#define PROBE_SETTLED ((enum probe_verdict)(PROBE_TCP + 1))

/*
 * What @c's first bytes say (peeked into @fb). In kernel-compat mode a
 * client that signalled SMC may send a DECLINE instead of a PROPOSAL: the
 * same peeked bytes say whether they are one, so a DECLINE is never
 * mistaken for a plain client's data.
 */
static enum probe_verdict classify(struct usmc_listener *l, struct usmc_conn *c, struct probing *p,
				   struct first_bytes *fb, bool expired)
{
	enum probe_verdict v;

	peek_first(c->fd, fb);
	v = peek_verdict(fb);
	if (v == PROBE_SMC)
		return v;
	switch (kcompat_probe_decline(l, c, p, fb, expired)) { /* kernel-compat */
	case KC_DECLINE_SETTLED:
		return PROBE_SETTLED;
	case KC_DECLINE_WAIT:
		return PROBE_NEED_MORE;
	case KC_DECLINE_NONE:
		break;
	}
	return v;
}

static void probe_arm(struct usmc_listener *l, struct probing *p, int op)
{
	struct epoll_event ev = {.events = PROBE_EVENTS, .data.ptr = p};
	int rc = epoll_ctl(l->epfd, op, p->c->fd, &ev);

	/* a connection watched before (its first bytes, then parked for its
	 * CONFIRM) still has the entry that fired then (probe_forget() leaves
	 * it): re-arm that one */
	if (rc && op == EPOLL_CTL_ADD && errno == EEXIST)
		rc = epoll_ctl(l->epfd, EPOLL_CTL_MOD, p->c->fd, &ev);
	p->armed = !rc;
}

/* Watch @c (not watched yet) for @wait until @deadline_ns; -errno if it
 * cannot be watched (then @c is untouched and still the caller's). A
 * handshake that waits for an event (PROBE_EVENT) waits for no byte: its
 * client has nothing to send before our next message, and bytes it sends
 * anyway would run the handshake again on every one. */
static int probe_start(struct usmc_listener *l, struct usmc_conn *c, enum probe_wait wait,
		       uint64_t deadline_ns, struct probing **out)
{
	struct probing *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->c = c;
	p->wait = wait;
	p->deadline_ns = deadline_ns;
	if (wait != PROBE_EVENT) {
		probe_arm(l, p, EPOLL_CTL_ADD);
		if (!p->armed) {
			free(p);
			return -errno;
		}
	} else {
		atomic_fetch_add(&l->event_waiters, 1);
	}
	probe_insert(l, p);
	/* bytes that arrive between the caller's peek and the ADD are
	 * reported too: edge-triggered epoll reports data present at ADD */
	*out = p;
	return 0;
}

/*
 * What a peek said of the CLC message @c's handshake waits for (@rc, from
 * clc_io_peeked() or clc_io_ready()): is there something for a worker? The
 * whole message (its length kept, so the worker takes it with one recv()
 * and no peek), or EOF, an error, a malformed header, which the worker's
 * read reports.
 */
static bool for_worker(struct usmc_conn *c, int rc)
{
	if (rc == -EAGAIN)
		return false;
	c->clc_waiting = rc > 0 ? (size_t)rc : 0;
	return true;
}

/*
 * Is the CLC message @p waits for whole (for_worker())? If not, raise
 * SO_RCVLOWAT to what completes it and keep waiting.
 */
static bool whole_message(struct probing *p)
{
	size_t need = 1;

	if (for_worker(p->c, clc_io_ready(p->c->fd, CLC_PROPOSAL_MAX_LEN, &need)))
		return true;
	probe_lowat(p, need);
	return false;
}

/*
 * The client's whole PROPOSAL is waiting on @c (watched through @p, or
 * NULL): decline it at once if the pool was congested when the client
 * showed it is an SMC client, else queue it for a worker.
 */
static void proposal_ready(struct usmc_listener *l, struct usmc_conn *c, struct probing *p)
{
	if (c->decline_at_once && decline_busy(l, c, p, USMC_REASON_HS_CONGESTED))
		return;
	c->decline_at_once = false; /* malformed: the worker says so */
	probe_forget(l, p);	    /* before the hand-off: a worker may close the fd */
	listener_hs_submit(l, c);
}

/*
 * @c showed a PROPOSAL header (in @fb): an SMC client. Its whole PROPOSAL
 * is waited for here, by the accept thread, never by a waiting worker (a
 * slow client must not hold one): now, or when the rest arrives (at most
 * until the handshake's deadline).
 */
static void smc_client(struct usmc_listener *l, struct usmc_conn *c, struct probing *p,
		       const struct first_bytes *fb)
{
	struct clc_hdr hdr;
	size_t need = 1;
	int rc = clc_io_peeked(fb->buf, fb->n, CLC_PROPOSAL_MAX_LEN, &hdr, &need);

	if (!listener_src_enter(l, c)) {
		src_refuse(l, c, p, rc);
		return;
	}
	should_decline(l, c); /* decided now, from the pool's state now */
	if (for_worker(c, rc)) {
		proposal_ready(l, c, p);
		return;
	}
	if (!p && probe_start(l, c, PROBE_PROPOSAL, rest_deadline_ns(c), &p)) {
		/* cannot be watched (out of memory): a worker waits for it */
		c->decline_at_once = false;
		listener_hs_submit(l, c);
		return;
	}
	if (p->wait != PROBE_PROPOSAL) {
		p->wait = PROBE_PROPOSAL;
		probe_unlink(l, p);
		p->deadline_ns = rest_deadline_ns(c);
		probe_insert(l, p);
	}
	/* what came since the peek is reported by the epoll entry: ADD and
	 * MOD report bytes already there, the SO_RCVLOWAT set here the rest */
	probe_lowat(p, need);
	if (!p->armed)
		probe_arm(l, p, EPOLL_CTL_MOD);
}

/* A plain TCP client (or one to be treated as such). */
static void plain_client(struct usmc_listener *l, struct usmc_conn *c, struct probing *p)
{
	probe_forget(l, p);
	listener_finish_tcp(l, c, plain_client_reason(l));
	atomic_fetch_sub(&l->in_handshake, 1);
}

/* A handshake whose time ran out before its client's message was whole
 * (LISTEN_CLC_REST_MS after its first bytes, or the handshake's deadline). */
static void hs_expired(struct usmc_listener *l, struct probing *p)
{
	struct usmc_conn *c = p->c;

	usmc_log(&l->ctx->log, USMC_LOG_INFO,
		 "listener %s: %s: no whole CLC message %llu ms after the accept",
		 log_local(c->fd).s, conn_log_peer(c).s,
		 (unsigned long long)((clock_now_ns() - c->t_accept_ns) / CLOCK_NSEC_PER_MSEC));
	probe_forget(l, p);
	listener_drop(l, c, -ETIMEDOUT);
}

/* What to do with @p's connection now (on its event, or at its deadline
 * when @expired). */
static void probe_step(struct usmc_listener *l, struct probing *p, bool expired)
{
	struct usmc_conn *c = p->c;
	struct first_bytes fb;
	enum probe_verdict v;

	switch (p->wait) {
	case PROBE_FIRST_BYTES:
		v = classify(l, c, p, &fb, expired);
		if (v == PROBE_SETTLED)
			return;
		if (v == PROBE_SMC)
			smc_client(l, c, p, &fb);
		else if (v == PROBE_TCP || expired) /* silence or a partial header: plain */
			plain_client(l, c, p);
		else
			probe_arm(l, p, EPOLL_CTL_MOD); /* the next segment wakes us */
		return;
	case PROBE_PROPOSAL:
		if (whole_message(p))
			proposal_ready(l, c, p);
		else if (expired)
			hs_expired(l, p);
		else
			probe_arm(l, p, EPOLL_CTL_MOD);
		return;
	case PROBE_EVENT: /* its bound: the step ends what it waited for */
		probe_forget(l, p);
		listener_hs_submit(l, c);
		return;
	case PROBE_PARKED:
		/* the worker takes it from here: the message, or the
		 * step's bound */
		if (whole_message(p) || expired) {
			probe_forget(l, p);
			listener_hs_submit(l, c);
		} else {
			probe_arm(l, p, EPOLL_CTL_MOD);
		}
		return;
	}
}

void probe_event(struct usmc_listener *l, struct probing *p)
{
	p->armed = false;
	probe_step(l, p, false);
}

void probes_expire(struct usmc_listener *l)
{
	uint64_t now = clock_now_ns();

	/* the list is in deadline order (see probe_insert); each step
	 * either settles the head or moves it to a later deadline */
	while (l->probes && l->probes->deadline_ns <= now)
		probe_step(l, l->probes, true);
}

int probe_next_timeout(struct usmc_listener *l)
{
	uint64_t now;

	if (!l->probes)
		return -1;
	now = clock_now_ns();
	if (l->probes->deadline_ns <= now)
		return 0;
	/* round up: waking a little late is fine, spinning early is not */
	return (int)((l->probes->deadline_ns - now + CLOCK_NSEC_PER_MSEC - 1) /
		     CLOCK_NSEC_PER_MSEC);
}

/* A new connection: classify it from what is there already, or watch it. */
int probe_new(struct usmc_listener *l, struct usmc_conn *c, long wait_ms)
{
	/* Under load the client's first segment is often here already:
	 * classify it now and skip the epoll round trip. */
	struct first_bytes fb;
	enum probe_verdict v = classify(l, c, NULL, &fb, false);
	struct probing *p;

	if (v == PROBE_SETTLED)
		return 0;
	if (v == PROBE_SMC) {
		smc_client(l, c, NULL, &fb);
		return 0;
	}
	if (v == PROBE_TCP) {
		plain_client(l, c, NULL);
		return 0;
	}
	/* kernel-compat: a client that signalled SMC is owed its CLC for
	 * USMC_OPT_CLC_TIMEOUT_MS: a wait its address's share must cover */
	if (c->kc_peer == KC_PEER_SMC && !listener_src_enter(l, c)) {
		src_refuse(l, c, NULL, -EAGAIN);
		return 0;
	}
	return probe_start(l, c, PROBE_FIRST_BYTES,
			   clock_now_ns() + (uint64_t)wait_ms * CLOCK_NSEC_PER_MSEC, &p);
}

/* When @c's parked step is due at the latest. */
static uint64_t park_until_ns(const struct usmc_conn *c)
{
	return (uint64_t)listen_hs_park_until_ms(c) * CLOCK_NSEC_PER_MSEC;
}

/*
 * @c's handshake waits for a handshake event (its peer's first contact, an
 * LLC flow): ask again when one of the context came and may be what it
 * waits for (probes_hs_events()), or at its bound, not before. Counted in
 * event_waiters before it looks whether that came since the handshake
 * asked; the context counts an event before the listener's watcher reads
 * event_waiters: so either this look sees the event, or the watcher sees
 * the waiter and wakes us.
 */
static void wait_event(struct usmc_listener *l, struct usmc_conn *c)
{
	struct probing *p;

	if (probe_start(l, c, PROBE_EVENT, park_until_ns(c), &p)) {
		listener_hs_submit(l, c); /* cannot be watched: ask again now */
		return;
	}
	if (listen_hs_event_ready(c)) {
		probe_forget(l, p);
		listener_hs_submit(l, c);
	}
}

void probes_hs_events(struct usmc_listener *l)
{
	struct probing *p, *next;

	if (!atomic_load(&l->event_waiters) || !atomic_exchange(&l->hs_moved, false))
		return;
	for (p = l->probes; p; p = next) {
		next = p->next;
		if (p->wait == PROBE_EVENT && listen_hs_event_ready(p->c)) {
			struct usmc_conn *c = p->c;

			probe_forget(l, p);
			listener_hs_submit(l, c);
		}
	}
}

void probe_park(struct usmc_listener *l, struct usmc_conn *c)
{
	struct probing *p;

	if (listen_hs_waits_event(c)) {
		wait_event(l, c);
		return;
	}
	if (probe_start(l, c, PROBE_PARKED, park_until_ns(c), &p)) {
		listener_hs_submit(l, c); /* cannot be watched: a worker waits */
		return;
	}
	if (whole_message(p)) { /* it came while the worker parked it */
		probe_forget(l, p);
		listener_hs_submit(l, c);
	}
}

void probes_free(struct usmc_listener *l)
{
	while (l->probes) {
		struct probing *p = l->probes;

		l->probes = p->next;
		conn_destroy(p->c);
		free(p);
	}
	l->probes_tail = NULL;
}
