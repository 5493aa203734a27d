/* SPDX-License-Identifier: MIT */
/*
 * Checked byte streams for the fault campaign (fault_campaign.c): one end
 * of a connection is a usmc connection or a kernel AF_SMC socket; a loop
 * drives many ends at once, non-blocking, and checks every byte received at
 * its offset (tests/common/pattern.h). Each end's outcome is one of:
 *   complete   sent all, received all, then EOF
 *   failed     an error code from send or receive (what a connection that
 *              cannot go on must give), every byte before it correct
 * and the two that must never happen:
 *   truncated  EOF before all bytes arrived (bytes lost, silently)
 *   corrupt    a byte differs from what was sent, or more bytes than sent
 *   hung       no progress, no error, no EOF for the stall bound, counted
 *              only while its loop was free to serve it, and, for an end
 *              whose peer end is driven too, the same held for the peer
 *
 * Why "free to serve it": a kernel AF_SMC call can block even under
 * MSG_DONTWAIT (sendmsg() and the consumer update of recvmsg() wait for
 * one of the link's CDC send slots, net/smc/smc_wr.c
 * smc_wr_tx_get_free_slot(), up to 10 s). While one end's call blocks,
 * the other ends of its loop wait for their turn; that wait is the
 * harness's, not their connections'. Under 5 % loss a pass over 100
 * kernel clients took 25 to 30 s, and connections whose bytes were only
 * waiting for their turn were taken for hung. (One thread per kernel
 * socket instead makes the kernel starve a slot waiter for 10 s and take
 * its link down: smcr_link_down_cond_sched() in the same function.)
 */
#ifndef USMC_TEST_FAULT_FLOW_H
#define USMC_TEST_FAULT_FLOW_H

#include <errno.h>
#include <float.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <usmc/usmc.h>

#include "../common/pattern.h"
#include "mono_clock.h"

#define FLOW_CHUNK 65536
/* A step this long blocked (a kernel socket's call): the loop's other
 * ends were not served meanwhile. */
#define FLOW_STEP_BLOCKED_S 0.01

enum flow_state {
	FLOW_RUNNING,
	FLOW_COMPLETE,
	FLOW_FAILED,
	FLOW_TRUNCATED,
	FLOW_CORRUPT,
	FLOW_HUNG
};

static inline const char *flow_state_name(enum flow_state s)
{
	static const char *n[] = {"running", "complete", "failed", "truncated", "corrupt", "hung"};

	return n[s];
}

struct flow_end {
	int fd;		     /* kernel socket, or -1 */
	struct usmc_conn *c; /* usmc connection, or NULL */
	uint64_t seed_out, seed_in;
	uint64_t bytes_out; /* to send, then SHUT_WR; UINT64_MAX: until stopped */
	uint64_t bytes_in;  /* expected before EOF; UINT64_MAX: any number */
	uint64_t sent, got;
	bool shut, eof, closed;
	bool keep_open; /* complete at bytes_out sent and bytes_in received: no
			   SHUT_WR, no EOF (an exchange on a connection that goes on) */
	enum flow_state state;
	int err;	   /* FLOW_FAILED: the negative errno */
	double t_end;	   /* mono_s() when it ended */
	double t_progress; /* last byte moved */
	long long bad_off; /* FLOW_CORRUPT: the stream offset */
	char who[48];
	char at_hang[640];     /* FLOW_HUNG: where its bytes stood when it was declared hung */
	struct flow_end *peer; /* the other end of its connection, if driven too */
	double others_s;       /* since t_progress: its loop's time in other ends' steps */
	_Atomic double idle_s; /* published by its loop: time without progress, served */
	atomic_bool ended;     /* published: no longer running */
};

static inline void flow_end_init(struct flow_end *e, int fd, struct usmc_conn *c, uint64_t seed_out,
				 uint64_t seed_in, uint64_t bytes_out, uint64_t bytes_in,
				 const char *who)
{
	memset(e, 0, sizeof(*e));
	e->fd = fd;
	e->c = c;
	e->seed_out = seed_out;
	e->seed_in = seed_in;
	e->bytes_out = bytes_out;
	e->bytes_in = bytes_in;
	e->t_progress = mono_s();
	snprintf(e->who, sizeof(e->who), "%s", who);
}

static inline int flow_pollfd(const struct flow_end *e)
{
	return e->c ? usmc_conn_fd(e->c) : e->fd;
}

static inline ssize_t flow_send(struct flow_end *e, const void *buf, size_t n)
{
	ssize_t r;

	if (e->c)
		return usmc_send(e->c, buf, n, MSG_DONTWAIT);
	r = send(e->fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	return r < 0 ? -errno : r;
}

static inline ssize_t flow_recv(struct flow_end *e, void *buf, size_t n)
{
	ssize_t r;

	if (e->c)
		return usmc_recv(e->c, buf, n, MSG_DONTWAIT);
	r = recv(e->fd, buf, n, MSG_DONTWAIT);
	return r < 0 ? -errno : r;
}

static inline int flow_shutdown_wr(struct flow_end *e)
{
	if (e->c)
		return usmc_shutdown(e->c, SHUT_WR);
	return shutdown(e->fd, SHUT_WR) ? -errno : 0;
}

/* Close the end (usmc_close / close); idempotent. */
static inline void flow_close(struct flow_end *e)
{
	if (e->closed)
		return;
	e->closed = true;
	if (e->c)
		usmc_close(e->c);
	else if (e->fd >= 0)
		close(e->fd);
}

static inline void flow_finish(struct flow_end *e, enum flow_state s, int err)
{
	if (e->state != FLOW_RUNNING)
		return;
	e->state = s;
	e->err = err;
	e->t_end = mono_s();
	atomic_store(&e->ended, true);
}

static inline bool flow_transient(ssize_t r)
{
	return r == -EAGAIN || r == -EWOULDBLOCK || r == -EINTR;
}

/* Move what can move on @e without blocking. */
static inline void flow_step(struct flow_end *e)
{
	static _Thread_local uint8_t buf[FLOW_CHUNK];

	/* receive first: a peer that cannot send cannot take our data either */
	while (e->state == FLOW_RUNNING && !e->eof) {
		ssize_t r = flow_recv(e, buf, sizeof(buf));
		long long bad;

		if (flow_transient(r))
			break;
		if (r < 0) {
			flow_finish(e, FLOW_FAILED, (int)r);
			return;
		}
		if (r == 0) {
			e->eof = true;
			if (e->bytes_in != UINT64_MAX && e->got < e->bytes_in)
				flow_finish(e, FLOW_TRUNCATED, 0);
			break;
		}
		if (e->bytes_in != UINT64_MAX && e->got + (uint64_t)r > e->bytes_in) {
			e->bad_off = (long long)e->bytes_in;
			flow_finish(e, FLOW_CORRUPT, 0);
			return;
		}
		bad = pattern_check(e->seed_in, e->got, buf, (size_t)r);
		if (bad >= 0) {
			e->bad_off = bad;
			flow_finish(e, FLOW_CORRUPT, 0);
			return;
		}
		e->got += (uint64_t)r;
		e->t_progress = mono_s();
	}
	while (e->state == FLOW_RUNNING && e->sent < e->bytes_out) {
		uint64_t left = e->bytes_out - e->sent;
		size_t n = left < FLOW_CHUNK ? (size_t)left : FLOW_CHUNK;
		ssize_t r;

		pattern_fill(e->seed_out, e->sent, buf, n);
		r = flow_send(e, buf, n);
		if (flow_transient(r))
			break;
		if (r <= 0) {
			flow_finish(e, FLOW_FAILED, r ? (int)r : -EPIPE);
			return;
		}
		e->sent += (uint64_t)r;
		e->t_progress = mono_s();
	}
	if (e->state == FLOW_RUNNING && e->keep_open) {
		if (e->sent == e->bytes_out && e->got == e->bytes_in)
			flow_finish(e, FLOW_COMPLETE, 0);
		return;
	}
	if (e->state == FLOW_RUNNING && e->sent == e->bytes_out && !e->shut) {
		int rc, unsent = 0;

		/* Linux SMC's shutdown() and close() wait at most 2 s for the
		 * send buffer to drain (SMC_MAX_STREAM_WAIT_TIMEOUT), then send
		 * the flag anyway: on a slow link the peer saw EOF before all
		 * the data (kernel <-> kernel under 1 % loss, docs/faults.md).
		 * Shut down a kernel socket once its send queue is empty. */
		if (!e->c && !ioctl(e->fd, SIOCOUTQ, &unsent) && unsent > 0)
			return;
		rc = flow_shutdown_wr(e);

		if (rc) {
			flow_finish(e, FLOW_FAILED, rc);
			return;
		}
		e->shut = true;
	}
	if (e->state == FLOW_RUNNING && e->shut && e->eof)
		flow_finish(e, FLOW_COMPLETE, 0);
}

/* Set by the driver: what else it knows of kernel socket @fd (the campaign:
 * its smc_diag cursors), appended to @out; NULL: nothing. */
static void (*flow_kernel_detail)(int fd, char *out, size_t cap);

/* Where an end's bytes stand, into @out: usmc_conn_info's flow fields, or
 * the kernel socket's queues (AF_SMC answers SIOCINQ/SIOCOUTQ,
 * net/smc/af_smc.c smc_ioctl()) and flow_kernel_detail's. */
static inline void flow_queues(const struct flow_end *e, char *out, size_t cap)
{
	struct usmc_conn_info ci;
	int inq = -1, outq = -1;
	size_t len;

	*out = 0;
	if (e->c && !usmc_conn_info(e->c, &ci) && ci.mode == USMC_MODE_SMCR) {
		snprintf(out, cap, "unsent %llu, unconsumed %llu, unread %llu%s%s%s%s",
			 (unsigned long long)ci.snd_unsent, (unsigned long long)ci.snd_unconsumed,
			 (unsigned long long)ci.rcv_unread,
			 ci.flow_flags & USMC_FLOW_WINDOW_FULL ? ", window full" : "",
			 ci.flow_flags & USMC_FLOW_SQ_WAIT ? ", waits for the send queue" : "",
			 ci.flow_flags & USMC_FLOW_PEER_BLOCKED ? ", peer blocked" : "",
			 ci.flow_flags & USMC_FLOW_EOF_HELD ? ", EOF held" : "");
	} else if (e->fd >= 0 && !e->closed) {
		if (ioctl(e->fd, SIOCINQ, &inq))
			inq = -1;
		if (ioctl(e->fd, SIOCOUTQ, &outq))
			outq = -1;
		snprintf(out, cap, "kernel queues: in %d, out %d", inq, outq);
		len = strlen(out);
		if (flow_kernel_detail && len + 1 < cap)
			flow_kernel_detail(e->fd, out + len, cap - len);
	}
}

/* How long @e's peer end has gone without progress while served; "for
 * ever" if it is not driven here or has ended. */
static inline double flow_peer_idle(const struct flow_end *e)
{
	if (!e->peer || atomic_load(&e->peer->ended))
		return DBL_MAX;
	return atomic_load(&e->peer->idle_s);
}

/* A step of one end took @d: the others of its loop (@idx[0..@k)) waited. */
static inline void flow_charge_wait(struct flow_end **ends, const int *idx, int k, int self,
				    double d)
{
	if (d < FLOW_STEP_BLOCKED_S)
		return;
	for (int j = 0; j < k; j++)
		if (idx[j] != self)
			ends[idx[j]]->others_s += d;
}

/*
 * Drive @ends until each has ended, @stop is set (then the running ones
 * are left running), or @deadline (mono_s; 0 = none) passed. An end
 * without progress for @stall_s while served (and its peer end likewise)
 * is hung. Ends that end are closed when @close_done. Returns how many
 * still run.
 */
static inline int flow_run(struct flow_end **ends, int n, double stall_s, double deadline,
			   volatile bool *stop, bool close_done)
{
	struct pollfd *p = calloc((size_t)n, sizeof(*p));
	int *idx = calloc((size_t)n, sizeof(*idx));
	int running = n;

	while (running && !(stop && *stop) && !(deadline && mono_s() > deadline)) {
		int k = 0;
		double now = mono_s();

		running = 0;
		for (int i = 0; i < n; i++) {
			struct flow_end *e = ends[i];

			double idle = now - e->t_progress - e->others_s;

			atomic_store(&e->idle_s, idle);
			if (e->state == FLOW_RUNNING && idle > stall_s &&
			    flow_peer_idle(e) > stall_s) {
				flow_queues(e, e->at_hang, sizeof(e->at_hang));
				flow_finish(e, FLOW_HUNG, 0);
			}
			if (e->state != FLOW_RUNNING) {
				if (close_done)
					flow_close(e);
				continue;
			}
			running++;
			p[k] = (struct pollfd){
				.fd = flow_pollfd(e),
				.events = (short)(POLLIN | (e->sent < e->bytes_out ? POLLOUT : 0))};
			idx[k++] = i;
		}
		if (!k)
			break;
		if (poll(p, (nfds_t)k, 100) < 0 && errno != EINTR)
			break;
		for (int j = 0; j < k; j++) {
			struct flow_end *e = ends[idx[j]];

			/* a kernel socket waiting for its send queue to drain */
			if (p[j].revents ||
			    (!e->shut && e->sent == e->bytes_out && !e->keep_open)) {
				double t0 = mono_s(), progress = e->t_progress;

				flow_step(e);
				if (e->t_progress != progress)
					e->others_s = 0;
				flow_charge_wait(ends, idx, k, idx[j], mono_s() - t0);
			}
		}
	}
	free(p);
	free(idx);
	return running;
}

/* Counts of a set of ends. */
struct flow_tally {
	int complete, failed, truncated, corrupt, hung, running;
	uint64_t bytes_checked;
	double first_end, last_end; /* of the failed ones */
};

static inline struct flow_tally flow_tally(struct flow_end **ends, int n)
{
	struct flow_tally t = {0};

	for (int i = 0; i < n; i++) {
		const struct flow_end *e = ends[i];

		t.bytes_checked += e->got;
		switch (e->state) {
		case FLOW_RUNNING:
			t.running++;
			break;
		case FLOW_COMPLETE:
			t.complete++;
			break;
		case FLOW_FAILED:
			t.failed++;
			if (!t.first_end || e->t_end < t.first_end)
				t.first_end = e->t_end;
			if (e->t_end > t.last_end)
				t.last_end = e->t_end;
			break;
		case FLOW_TRUNCATED:
			t.truncated++;
			break;
		case FLOW_CORRUPT:
			t.corrupt++;
			break;
		case FLOW_HUNG:
			t.hung++;
			break;
		}
	}
	return t;
}

static inline void flow_report_one(const struct flow_end *e)
{
	printf("  %s: %s%s%s, sent %llu of %lld, got %llu of %lld%s", e->who,
	       flow_state_name(e->state), e->err ? " " : "", e->err ? usmc_strerror(e->err) : "",
	       (unsigned long long)e->sent,
	       e->bytes_out == UINT64_MAX ? -1LL : (long long)e->bytes_out,
	       (unsigned long long)e->got,
	       e->bytes_in == UINT64_MAX ? -1LL : (long long)e->bytes_in, e->eof ? ", EOF" : "");
	if (e->state == FLOW_CORRUPT)
		printf(", first bad byte at %lld", e->bad_off);
	if (e->state == FLOW_HUNG) {
		char now[sizeof(e->at_hang)];

		flow_queues(e, now, sizeof(now));
		printf("; at the hang: %s; now: %s", e->at_hang, now);
	}
	printf("\n");
}

/* One line per end that did not complete, at most @max_lines: the ones that
 * must never happen first (hung, truncated, corrupt), then the failed. */
static inline void flow_report(struct flow_end **ends, int n, int max_lines)
{
	int shown = 0;

	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < n && shown < max_lines; i++) {
			enum flow_state st = ends[i]->state;
			bool never = st != FLOW_COMPLETE && st != FLOW_FAILED;

			if (st == FLOW_COMPLETE || never != (pass == 0))
				continue;
			flow_report_one(ends[i]);
			shown++;
		}
}

#endif
