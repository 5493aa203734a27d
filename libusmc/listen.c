// SPDX-License-Identifier: MIT
/*
 * The listener's API (docs/listener.md): usmc_listen() opens the kernel
 * listen socket and starts the handshake pool and the accept thread
 * (accept_thread.c); connections reach usmc_accept() through the accept
 * queue (listen_core.c), from the accept thread (plain TCP clients,
 * at-once DECLINEs) or from a handshake worker (listener_hs_worker()).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "abi.h"
#include "accept_thread.h"
#include "conn.h"
#include "ctx.h"
#include "event.h"
#include "listen_core.h"
#include "probe.h"

#define LISTEN_BACKLOG_MAX 65535

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
	int rc;

	l->qfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (l->qfd < 0)
		return -errno;
	rc = accept_thread_fds(l);
	return rc ? rc : listener_direct_setup(l);
}

static void listener_free_fds(struct usmc_listener *l)
{
	int *fds[] = {&l->lfd, &l->qfd, &l->wakefd, &l->epfd};

	if (l->afd >= 0 && l->afd != l->qfd)
		close(l->afd);
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
	l->lfd = l->qfd = l->wakefd = l->epfd = l->afd = -1;
	pthread_mutex_init(&l->opts_lock, NULL);
	pthread_mutex_init(&l->start_lock, NULL);
	pthread_cond_init(&l->start_cond, NULL);
	pthread_mutex_init(&l->qlock, NULL);
	pthread_mutex_init(&l->park_lock, NULL);
	pthread_mutex_init(&l->syn_lock, NULL);
	pthread_mutex_init(&l->afd_lock, NULL);
	pthread_mutex_init(&l->demand_lock, NULL);
	pthread_mutex_init(&l->peer_lock, NULL);
	listen_sources_init(&l->srcs);
	ctx_copy_opts(ctx, &l->opts);
	if (flags & USMC_LISTEN_AUTO_FALLBACK)
		l->opts.v[USMC_OPT_AUTO_FALLBACK] = 1;
	if (flags & USMC_LISTEN_TCP_ONLY)
		l->opts.v[USMC_OPT_SMC] = 0;
	return 0;
}

static void listener_free(struct usmc_listener *l)
{
	kcompat_listener_forget(l->ctx->kc, &l->kc);
	listener_free_fds(l);
	pthread_cond_destroy(&l->start_cond);
	pthread_mutex_destroy(&l->start_lock);
	pthread_mutex_destroy(&l->opts_lock);
	pthread_mutex_destroy(&l->qlock);
	pthread_mutex_destroy(&l->park_lock);
	pthread_mutex_destroy(&l->syn_lock);
	pthread_mutex_destroy(&l->afd_lock);
	pthread_mutex_destroy(&l->demand_lock);
	pthread_mutex_destroy(&l->peer_lock);
	listen_sources_destroy(&l->srcs);
	free(l);
}

/* The listen socket l->lfd is open: start the threads, publish. On failure
 * the caller frees @l (listener_free closes l->lfd unless reset to -1). */
static int listener_start(struct usmc_listener *l, struct usmc_listener **out)
{
	int rc;

	rc = listener_setup_fds(l);
	if (rc)
		return rc;
	rc = hs_pool_start(&l->hs, (int)l->opts.v[USMC_OPT_HS_THREADS], listener_hs_worker, l);
	if (rc)
		return rc;
	rc = -pthread_create(&l->accept_thread, NULL, accept_thread_main, l);
	if (rc) {
		(void)hs_pool_stop(&l->hs);
		return rc;
	}
	/* return only once the accept thread chose io_uring or accept4 */
	pthread_mutex_lock(&l->start_lock);
	while (!l->started)
		pthread_cond_wait(&l->start_cond, &l->start_lock);
	pthread_mutex_unlock(&l->start_lock);
	listener_watch_events(l, true);
	atomic_fetch_add(&l->ctx->open_listeners, 1);
	ctx_register_listener(l->ctx, l);
	*out = l;
	return 0;
}

#define LISTEN_FLAGS_KNOWN                                                          \
	(USMC_LISTEN_AUTO_FALLBACK | USMC_LISTEN_NONBLOCK | USMC_LISTEN_REUSEPORT | \
	 USMC_LISTEN_TCP_ONLY)

int usmc_listen(struct usmc_ctx *ctx, const struct sockaddr *addr, socklen_t addrlen, int backlog,
		unsigned int flags, struct usmc_listener **out)
{
	struct usmc_listener *l;
	int rc;

	if (!ctx || !addr || !out || (flags & ~LISTEN_FLAGS_KNOWN) || backlog < 1 ||
	    backlog > LISTEN_BACKLOG_MAX)
		return -EINVAL;
	if (ctx_forked(ctx))
		return USMC_EFORKED;
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
	if (rc >= 0) {
		l->lfd = rc;
		rc = listener_start(l, out);
	}
	if (rc)
		listener_free(l);
	return rc;
}

/* Is @fd a TCP socket over IPv4 or IPv6? 0 or a negative errno. */
static int check_tcp_fd(int fd)
{
	int type, domain, proto;
	socklen_t len = sizeof(int);

	if (fd < 0)
		return -EBADF;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len))
		return -errno; /* -ENOTSOCK, -EBADF */
	len = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len))
		return -errno;
	if (domain != AF_INET && domain != AF_INET6)
		return -EAFNOSUPPORT;
	len = sizeof(int);
	if (type != SOCK_STREAM || getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) ||
	    proto != IPPROTO_TCP)
		return -EINVAL;
	return 0;
}

static bool is_listening(int fd)
{
	int acc = 0;
	socklen_t len = sizeof(acc);

	return !getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) && acc;
}

/* Is @fd a listening TCP socket over IPv4 or IPv6? 0 or a negative errno. */
static int check_listen_fd(int fd)
{
	int rc = check_tcp_fd(fd);

	return rc ? rc : is_listening(fd) ? 0 : -EINVAL;
}

/* The port @fd is bound to, 0 if none. */
static int bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len))
		return 0;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) : 0;
}

int usmc_listen_prepare(struct usmc_ctx *ctx, int fd)
{
	struct usmc_opts opts;
	int rc;

	if (!ctx)
		return -EINVAL;
	if (ctx_forked(ctx))
		return USMC_EFORKED;
	rc = check_tcp_fd(fd);
	if (rc)
		return rc;
	/* listening already: too late (usmc_listen_fd() adopts it as it is);
	 * not bound: its port is not known before listen() picks one */
	if (is_listening(fd) || !bound_port(fd))
		return -EINVAL;
	ctx_copy_opts(ctx, &opts);
	/* kernel-compat mode off, or a context without SMC: nothing to do,
	 * the listener's clients are told apart as they are without it */
	return opts.v[USMC_OPT_SMC] ? kcompat_listener_mark(ctx->kc, fd) : 0;
}

/* The backlog the socket was given to listen(): TCP_INFO of a listener
 * reports sk_max_ack_backlog in tcpi_sacked (net/ipv4/tcp.c tcp_get_info()). */
static int listen_fd_backlog(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) || !ti.tcpi_sacked)
		return SOMAXCONN;
	return ti.tcpi_sacked > LISTEN_BACKLOG_MAX ? LISTEN_BACKLOG_MAX : (int)ti.tcpi_sacked;
}

int usmc_listen_fd(struct usmc_ctx *ctx, int fd, int backlog, unsigned int flags,
		   struct usmc_listener **out)
{
	struct usmc_listener *l;
	int rc, fl, defer;

	if (!ctx || !out || (flags & ~(LISTEN_FLAGS_KNOWN & ~USMC_LISTEN_REUSEPORT)) ||
	    backlog < 0 || backlog > LISTEN_BACKLOG_MAX)
		return -EINVAL;
	if (ctx_forked(ctx))
		return USMC_EFORKED;
	rc = check_listen_fd(fd);
	if (rc)
		return rc;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) || fcntl(fd, F_SETFD, FD_CLOEXEC))
		return -errno;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	listener_init(l, ctx, backlog ? backlog : listen_fd_backlog(fd), flags);
	defer = l->opts.v[USMC_OPT_SMC] ? (int)l->opts.v[USMC_OPT_DEFER_ACCEPT] : 0;
	if (defer && setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof(defer))) {
		rc = -errno;
		listener_free(l); /* l->lfd is still -1: @fd stays the caller's */
		return rc;
	}
	/* kernel-compat: the socket listens already, so the program saw no
	 * listen() of a marked socket; adopting it asks for what it missed */
	if (l->opts.v[USMC_OPT_SMC])
		kcompat_listener_adopt(ctx->kc, fd, &l->kc);
	l->lfd = fd;
	rc = listener_start(l, out);
	if (rc) {
		l->lfd = -1; /* not ours unless adopted */
		listener_free(l);
	}
	return rc;
}

int usmc_listener_fd(const struct usmc_listener *l)
{
	if (!l)
		return -EINVAL;
	return ctx_forked(l->ctx) ? USMC_EFORKED : l->afd;
}

int usmc_listener_addr(const struct usmc_listener *l, struct sockaddr_storage *addr,
		       socklen_t *addrlen)
{
	if (!l || !addr || !addrlen)
		return -EINVAL;
	*addrlen = sizeof(*addr);
	return getsockname(l->lfd, (struct sockaddr *)addr, addrlen) ? -errno : 0;
}

/* Blocking usmc_accept(): sleep until the queue is not empty or, in direct
 * mode, the kernel's is not (afd). */
static int wait_queue(struct usmc_listener *l)
{
	struct pollfd p = {.fd = l->afd, .events = POLLIN};

	if (poll(&p, 1, -1) < 0 && errno != EINTR)
		return -errno;
	return 0;
}

/* The accept queue is empty: in direct mode, a connection from the kernel's
 * queue that the SYN decided (listen_direct.c); else -EAGAIN. */
static int accept_direct(struct usmc_listener *l, struct usmc_conn **out)
{
	return l->direct ? listener_direct_accept(l, out) : -EAGAIN;
}

int usmc_accept(struct usmc_listener *l, unsigned int flags, struct usmc_conn **out)
{
	struct usmc_conn *c;
	int rc;

	if (!l || !out || (flags & ~USMC_NONBLOCK))
		return -EINVAL;
	/* the accept thread is the parent's: nothing would ever arrive */
	if (ctx_forked(l->ctx))
		return USMC_EFORKED;
	/* queued is a hint read without the lock: the loop's last call, the
	 * one that finds nothing, costs no system call */
	while (!atomic_load(&l->queued) || !(c = listener_queue_pop(l))) {
		if (!accept_direct(l, &c))
			goto out;
		if (l->flags & USMC_LISTEN_NONBLOCK)
			return -EAGAIN;
		rc = wait_queue(l);
		if (rc)
			return rc;
	}
	if (atomic_load(&l->paused))
		listener_wake(l);
out:
	c->nonblock = flags & USMC_NONBLOCK;
	atomic_fetch_add(&l->ctx->accepts, 1);
	*out = c;
	return 0;
}

int usmc_listener_setopt(struct usmc_listener *l, enum usmc_opt opt, long value)
{
	if (!l)
		return -EINVAL;
	return opts_set_locked(&l->opts, &l->opts_lock, opt, value);
}

int usmc_listener_getopt(const struct usmc_listener *l, enum usmc_opt opt, long *value)
{
	if (!l)
		return -EINVAL;
	return opts_get_locked(&l->opts, &((struct usmc_listener *)l)->opts_lock, opt, value);
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

int usmc_listener_stats_sized(const struct usmc_listener *l, struct usmc_listener_stats *out,
			      size_t size)
{
	struct usmc_listener *ml = (struct usmc_listener *)l;
	struct usmc_listener_stats full = {0}, *st = &full;

	if (!l || !out || !size)
		return -EINVAL;
	st->accepted = atomic_load(&ml->accepted);
	st->smcr = atomic_load(&ml->modes.smcr);
	st->fallbacks = atomic_load(&ml->modes.fallbacks);
	st->hs_failed = atomic_load(&ml->hs_failed);
	st->congestion_fallbacks = atomic_load(&ml->congestion_fallbacks);
	st->budget_fallbacks = atomic_load(&ml->budget_fallbacks);
	st->source_refused = atomic_load(&ml->source_refused);
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
	abi_fill(out, size, &full, sizeof(full));
	return 0;
}

/* usmc_listener_stats@USMC_0.1: the 0.1 layout, which ends at accept_uring */
USMC_SYMVER_OLD(usmc_listener_stats_v0_1, usmc_listener_stats, "USMC_0.1");
void usmc_listener_stats_v0_1(const struct usmc_listener *l, struct usmc_listener_stats *st);
void usmc_listener_stats_v0_1(const struct usmc_listener *l, struct usmc_listener_stats *st)
{
	(void)usmc_listener_stats_sized(l, st,
					USMC_OFFSETOFEND(struct usmc_listener_stats, accept_uring));
}

uint64_t usmc_listener_fallback_count(const struct usmc_listener *l, uint32_t reason)
{
	return l ? mode_counts_fallbacks(&l->modes, reason) : 0;
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
	if (ctx_forked(l->ctx))
		return USMC_EFORKED;	    /* no thread to join here; the fds are CLOEXEC */
	ctx_unregister_listener(l->ctx, l); /* first: the stat thread no longer reads it */
	event_listener_forget(l);	    /* before its descriptor goes */
	listener_watch_events(l, false);    /* no call into it once closed */
	atomic_store(&l->stopping, true);
	listener_wake(l);
	pthread_join(l->accept_thread, NULL);
	free_conn_list(hs_pool_stop(&l->hs));
	free_conn_list(listener_take_parked(l)); /* parked after the accept thread ended */
	free_conn_list(listener_take_handed(l));
	probes_free(l);
	while ((c = listener_queue_pop(l)))
		conn_destroy(c);
	atomic_fetch_sub(&l->ctx->open_listeners, 1);
	listener_free(l);
	return 0;
}
