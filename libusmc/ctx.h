/* SPDX-License-Identifier: MIT */
/* The context: options, RDMA devices found, statistics. */
#ifndef USMC_CTX_H
#define USMC_CTX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <unistd.h>

#include <usmc/usmc.h>

#include "log.h"
#include "mode_counts.h"
#include "opts.h"
#include "reason.h"
#include "registry.h"
#include "smcr_ctx.h"

struct usmc_evset;

struct usmc_ctx {
	pthread_mutex_t lock;  /* protects opts, and making evset */
	struct usmc_opts opts; /* guarded by lock (setopt from any thread) */

	struct usmc_device_info *devs;
	int ndevs;

	atomic_uint_least64_t connects, accepts, hs_errors;
	struct mode_counts modes; /* every connection that reached its mode */
	atomic_int open_conns, open_listeners;
	struct smcr_ctx rdma; /* SMC-R: system id, UEID, link groups */

	struct kcompat *kc;	/* kernel-compat mode (kcompat.c); NULL when off */
	struct usmc_logger log; /* its own lock; the layers below get &log */

	pid_t pid; /* fixed: the process that created it (fork, ctx_forked()) */
	/* fixed: a page that reads CTX_FORK_MARK in the creator and 0 in any
	 * child of fork() (MADV_WIPEONFORK); NULL where the kernel lacks it */
	const volatile uint8_t *fork_mark;

	/*
	 * Registry of open connections and listeners, for usmc-stat (stat.c):
	 * touched only when one is created or destroyed, never on the data
	 * path. While holding reg_lock the stat thread reads their atomics,
	 * asks the kernel about their sockets and takes the handshake pool's
	 * lock (usmc_listener_stats()); nothing else.
	 */
	pthread_mutex_t reg_lock;   /* protects conns, listeners and their reg_* links */
	struct reg_node *conns;	    /* guarded by reg_lock: of struct usmc_conn */
	struct reg_node *listeners; /* guarded by reg_lock: of struct usmc_listener */

	/* the event set (event.h), made by the first event call under lock */
	_Atomic(struct usmc_evset *) evset;

	pthread_mutex_t stat_lock; /* protects stat: start/stop of the publication */
	struct usmc_stat *stat;	   /* guarded by stat_lock; NULL when not published */
};

#define CTX_FORK_MARK 0xa5

/* True in a child that inherited @ctx through fork(): its threads (accept
 * thread, handshake workers, link group progress) live only in the parent,
 * so the context, its listeners and its SMC-R connections are unusable here
 * (usmc.h, USMC_EFORKED). A load from the wiped-on-fork page, which the
 * kernel zeroes in every child however it was forked (fork(), _Fork(),
 * clone() without CLONE_VM), so no system call per connection; getpid()
 * on kernels before 4.14. */
static inline bool ctx_forked(const struct usmc_ctx *ctx)
{
	if (ctx->fork_mark)
		return *ctx->fork_mark != CTX_FORK_MARK;
	return getpid() != ctx->pid;
}

/* Registry (usmc-stat): link at creation, unlink before freeing. */
void ctx_register_conn(struct usmc_ctx *ctx, struct usmc_conn *c);
void ctx_unregister_conn(struct usmc_ctx *ctx, struct usmc_conn *c);
void ctx_register_listener(struct usmc_ctx *ctx, struct usmc_listener *l);
void ctx_unregister_listener(struct usmc_ctx *ctx, struct usmc_listener *l);

/* A copy of the context's options, for a new listener or connection. */
void ctx_copy_opts(struct usmc_ctx *ctx, struct usmc_opts *out);

/* True if some port can carry SMC-Rv2 (has an IPv4-mapped RoCE v2 GID). */
bool ctx_has_smcr_device(const struct usmc_ctx *ctx);

/* Account a connection that reached its final mode. */
void ctx_count_mode(struct usmc_ctx *ctx, enum usmc_mode mode, uint32_t reason);

#endif
