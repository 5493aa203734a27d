/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the tests of link groups with more than one link
 * (tests/rxe/vm-run.sh --setup twopath): a link group's ACTIVE links as the
 * library holds them (lgr.h: the test's view, not an API), its counters,
 * the faults of path 1 (netdevs down, RoCE lost at ingress), and a checked
 * echo stream through such a fault from either kind of end (a usmc
 * connection or a kernel AF_SMC socket).
 */
#ifndef USMC_TEST_MULTILINK_H
#define USMC_TEST_MULTILINK_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../common/pattern.h"
#include "ctx.h"
#include "fault_net.h"
#include "kernel_peer.h"
#include "lgr.h"
#include "smcr_common.h"

#define ML_SEED		  0x11a2
#define ML_CHUNK	  (64 * 1024)
#define ML_LINKS_WAIT_MS  5000	/* for the second link: two LLC round trips, QP set-up */
#define ML_READD_WAIT_MS  15000 /* re-add tries, a path back after the fault */
#define ML_FAULT_SECONDS  5.0	/* a port down */
#define ML_SILENT_SECONDS 10.0	/* RoCE lost: longer than TEST_LINK takes to tell */

/* A usmc listener's one connection, echoed until EOF (a thread). */
struct ml_server {
	struct usmc_listener *l;
	uint64_t echoed;
};

static inline void *ml_server_main(void *arg)
{
	struct ml_server *s = arg;
	static uint8_t buf[ML_CHUNK];
	struct usmc_conn *c;
	int rc = usmc_accept(s->l, 0, &c);

	CHECK(!rc, "usmc_accept: %s", usmc_strerror(rc));
	expect_smcr(c, "server");
	s->echoed = echo_until_eof(c, buf, sizeof(buf));
	CHECK(!usmc_close(c), "server close");
	return NULL;
}

/* A context that allows @max_links links, on the ports @devices lists
 * (NULL: every port). */
static inline struct usmc_ctx *ml_ctx(long max_links, const char *devices)
{
	struct usmc_ctx *ctx;

	CHECK(!usmc_ctx_create(&ctx), "usmc_ctx_create");
	CHECK(!usmc_ctx_setopt(ctx, USMC_OPT_MAX_LINKS, max_links), "USMC_OPT_MAX_LINKS");
	CHECK(!usmc_ctx_set_devices(ctx, devices), "usmc_ctx_set_devices(%s)",
	      devices ? devices : "NULL");
	return ctx;
}

/*
 * The ACTIVE links of @ctx's first link group (the lowest id: each
 * context numbers its own, and the pair's first contact made it), copied;
 * how many. Short connections made while a path is down may make others.
 */
static inline int ml_active_links(struct usmc_ctx *ctx, struct smcr_link out[SMCR_LINKS_MAX])
{
	struct smcr_ctx *s = &ctx->rdma;
	struct lgr *first = NULL;
	int n = 0;

	pthread_mutex_lock(&s->lock);
	for (struct lgr *l = s->lgrs; l; l = l->next)
		if (!first || l->id < first->id)
			first = l;
	for (int i = 0; first && i < SMCR_LINKS_MAX; i++)
		if (atomic_load(&first->lnk[i].state) == SMCR_LNK_ACTIVE)
			memcpy(&out[n++], &first->lnk[i], sizeof(out[0]));
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* Wait up to @ms for @ctx's first link group to hold @want ACTIVE links. */
static inline int ml_wait_links(struct usmc_ctx *ctx, int want, int ms,
				struct smcr_link out[SMCR_LINKS_MAX])
{
	double until = mono_s() + ms / 1000.0;
	int n;

	while ((n = ml_active_links(ctx, out)) != want && mono_s() < until)
		usleep(10000);
	return n;
}

static inline void ml_print_links(const char *who, const struct smcr_link *lnk, int n)
{
	for (int i = 0; i < n; i++)
		printf("  %s link %u on %s:%u qp %u <-> peer qp %u\n", who, lnk[i].link_num,
		       lnk[i].dev.name, lnk[i].dev.port, lnk[i].qp ? lnk[i].qp->qp_num : 0,
		       lnk[i].peer_qpn);
}

static inline uint64_t ml_links_added(struct usmc_ctx *ctx)
{
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	return st.links_added;
}

static inline uint64_t ml_failovers(struct usmc_ctx *ctx)
{
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	return st.failovers;
}

static inline uint64_t ml_link_failures(struct usmc_ctx *ctx)
{
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	return st.link_failures;
}

enum ml_fault { FAULT_NONE, FAULT_PORT_DOWN, FAULT_SILENT_DROP };

static inline const char *ml_fault_name(enum ml_fault f)
{
	return f == FAULT_PORT_DOWN ? "path 1's netdevs down" : "path 1's RoCE lost";
}

static inline void ml_fault_apply(enum ml_fault f, bool on)
{
	/* lost at ingress: each end sends as ever and hears nothing, which
	 * only its failed sends (or TEST_LINK) tell; dropped at egress, rxe
	 * fails the send at once */
	int rc = f == FAULT_PORT_DOWN ? fnet_link_path(1, on) : roce_lose_path(1, on);

	CHECK(!rc, "%s: %s", ml_fault_name(f), on ? "apply" : "undo");
}

struct ml_fault_timer {
	enum ml_fault f;
	pthread_t t;
};

static inline void *ml_fault_undo_later(void *arg)
{
	struct ml_fault_timer *ft = arg;

	usleep((useconds_t)((ft->f == FAULT_PORT_DOWN ? ML_FAULT_SECONDS : ML_SILENT_SECONDS) *
			    1e6));
	ml_fault_apply(ft->f, false);
	return NULL;
}

/* Sends all of @buf on @e (blocking); dies on an error. */
static inline void ml_end_send_all(struct end *e, const void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = end_send(e, (const uint8_t *)buf + off, len - off);

		CHECK(n > 0, "send: %s", usmc_strerror((int)n));
		off += (size_t)n;
	}
}

/*
 * The checked stream (@total bytes) through the peer's echo with @f
 * applied once a quarter of it is back (FAULT_NONE: none), and undone
 * ML_FAULT_SECONDS (or ML_SILENT_SECONDS) later; returns the longest time
 * (s) between two reads that brought data after the fault.
 */
static inline double ml_stream_through_fault(struct end *e, uint64_t total, enum ml_fault f)
{
	static uint8_t out[ML_CHUNK], in[ML_CHUNK];
	uint64_t sent = 0, got = 0;
	struct ml_fault_timer ft = {.f = f};
	double last = 0, worst = 0;
	bool faulted = f == FAULT_NONE;

	while (got < total) {
		if (sent < total && sent - got < 4 * ML_CHUNK) {
			pattern_fill(ML_SEED, sent, out, ML_CHUNK);
			ml_end_send_all(e, out, ML_CHUNK);
			sent += ML_CHUNK;
			continue;
		}
		ssize_t n = end_recv(e, in, sizeof(in));

		CHECK(n > 0, "client recv at %llu: %s", (unsigned long long)got,
		      n ? usmc_strerror((int)n) : "EOF");
		CHECK(pattern_check(ML_SEED, got, in, (size_t)n) < 0,
		      "byte %llu of the echo is wrong", (unsigned long long)got);
		got += (uint64_t)n;
		if (faulted && mono_s() - last > worst)
			worst = mono_s() - last;
		last = mono_s();
		if (!faulted && got >= total / 4) {
			ml_fault_apply(f, true);
			CHECK(!pthread_create(&ft.t, NULL, ml_fault_undo_later, &ft),
			      "pthread_create");
			faulted = true;
			last = mono_s();
		}
	}
	if (f != FAULT_NONE)
		pthread_join(ft.t, NULL);
	return worst;
}

#endif
