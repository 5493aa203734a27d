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
#include "clock.h"
#include "conn.h"
#include "ctx.h"
#include "listen.h"
#include "listen_handshake.h"
#include "probe.h"

#define PROBE_PEEK_LEN 8 /* a CLC header: all probe_classify() needs */

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
	int rc = listen_decline_now(c, USMC_REASON_SERVER_BUSY);

	if (rc == -EAGAIN)
		return false;
	probe_forget(l, p);
	if (rc) {
		listener_drop(l, c);
		return true;
	}
	listener_record_hs_time(l, c);
	usmc_log(&l->ctx->log, USMC_LOG_WARN,
		 "listener %s: handshake queue congested: DECLINE SERVER_BUSY to %s, TCP",
		 log_local(c->fd).s, log_peer(c->fd).s);
	atomic_fetch_add(&l->congestion_fallbacks, 1);
	listener_finish_tcp(l, c, USMC_REASON_HS_CONGESTED);
	atomic_fetch_sub(&l->in_handshake, 1);
	return true;
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
	usmc_log(&l->ctx->log, USMC_LOG_INFO, "CLC: DECLINE from %s: %s (0x%08x)",
		 log_peer(c->fd).s, log_reason(reason), reason);
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
		listener_hs_submit(l, c);
		return true;
	}
	listener_finish_tcp(l, c, plain_client_reason(l));
	atomic_fetch_sub(&l->in_handshake, 1);
	return true;
}

static void probe_arm(struct usmc_listener *l, struct probing *p, int op)
{
	struct epoll_event ev = {.events = PROBE_EVENTS, .data.ptr = p};

	p->armed = !epoll_ctl(l->epfd, op, p->c->fd, &ev);
}

void probe_event(struct usmc_listener *l, struct probing *p)
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

void probes_expire(struct usmc_listener *l)
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
		listener_hs_submit(l, c);
	}
}

static int probe_start(struct usmc_listener *l, struct usmc_conn *c, long probe_ms)
{
	struct probing *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->c = c;
	p->deadline_ns = clock_now_ns() + (uint64_t)probe_ms * CLOCK_NSEC_PER_MSEC;
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
	enum probe_verdict v = classify(l, c, NULL, false);

	if (v == PROBE_SETTLED || (v != PROBE_NEED_MORE && probe_settle(l, c, v, NULL)))
		return 0;
	return probe_start(l, c, wait_ms);
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
