// SPDX-License-Identifier: MIT
/*
 * usmc-stat publication (stat.h, docs/usmc-stat.md): the per-context
 * thread, its abstract UNIX socket, and the JSON snapshot.
 *
 * Locks: the snapshot takes ctx->reg_lock (connections, listeners; under it
 * only the handshake pool's leaf lock, through usmc_listener_stats()),
 * releases it, then lgr_info_all() takes smcr_ctx.lock -> lgr.lock, the
 * pools' grow locks and the links' send queue locks. The two are never
 * nested, and nothing is held while the snapshot is written to the socket.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "ctx.h"
#include "kcompat.h"
#include "lgr.h"
#include "listen_core.h"
#include "stat.h"

/*
 * "usmc-stat/<pid>/<n>/<nonce>": abstract names have no owner, and any
 * process may bind "@usmc-stat/<pid>/<n>" first for a pid it can predict
 * (the next ones are), leaving this context unpublished. It cannot bind a
 * name that ends in 64 bits it cannot guess. usmc-stat checks that the
 * listener is <pid> (SO_PEERCRED) before it reads an answer.
 */
#define STAT_NAME_FMT	 "usmc-stat/%d/%u/%016" PRIx64
#define STAT_SNDTIMEO_MS 2000 /* a reader that stalls does not hold the thread */
#define STAT_SCHEMA	 1

struct usmc_stat {
	struct usmc_ctx *ctx;
	unsigned int index; /* the <n> of the name */
	int lfd;	    /* the listening abstract socket */
	int stopfd;	    /* eventfd: stop the thread */
	pthread_t thread;
};

/* The next <n> in this process (several contexts may publish). */
static atomic_uint stat_seq;

/* ---- a small JSON writer into a growing buffer ----------------------- */

#define J_DEPTH 16

struct jw {
	char *p;
	size_t len, cap;
	bool oom;
	int depth;
	bool first[J_DEPTH]; /* no member written yet at this depth */
};

static void jw_raw(struct jw *j, const char *s, size_t n)
{
	if (j->oom)
		return;
	if (j->len + n + 1 > j->cap) {
		size_t cap = j->cap ? j->cap : 4096;
		char *np;

		while (j->len + n + 1 > cap)
			cap *= 2;
		np = realloc(j->p, cap);
		if (!np) {
			j->oom = true;
			return;
		}
		j->p = np;
		j->cap = cap;
	}
	memcpy(j->p + j->len, s, n);
	j->len += n;
	j->p[j->len] = '\0';
}

static void __attribute__((format(printf, 2, 3))) jw_printf(struct jw *j, const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0)
		jw_raw(j, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* A comma before every member but the first of its object or array. */
static void jw_sep(struct jw *j)
{
	if (j->depth > 0 && !j->first[j->depth - 1])
		jw_raw(j, ",", 1);
	if (j->depth > 0)
		j->first[j->depth - 1] = false;
}

static void jw_open(struct jw *j, char c)
{
	jw_raw(j, &c, 1);
	if (j->depth < J_DEPTH)
		j->first[j->depth] = true;
	j->depth++;
}

static void jw_close(struct jw *j, char c)
{
	j->depth--;
	jw_raw(j, &c, 1);
}

static void jw_string(struct jw *j, const char *s)
{
	jw_raw(j, "\"", 1);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			jw_printf(j, "\\%c", ch);
		else if (ch < 0x20)
			jw_printf(j, "\\u%04x", ch);
		else
			jw_raw(j, (const char *)&ch, 1);
	}
	jw_raw(j, "\"", 1);
}

static void jw_key(struct jw *j, const char *k)
{
	jw_sep(j);
	jw_string(j, k);
	jw_raw(j, ":", 1);
}

static void jw_kobj(struct jw *j, const char *k)
{
	jw_key(j, k);
	jw_open(j, '{');
}

static void jw_karr(struct jw *j, const char *k)
{
	jw_key(j, k);
	jw_open(j, '[');
}

static void jw_aobj(struct jw *j) /* an object as an array element */
{
	jw_sep(j);
	jw_open(j, '{');
}

static void jw_ku64(struct jw *j, const char *k, uint64_t v)
{
	jw_key(j, k);
	jw_printf(j, "%" PRIu64, v);
}

static void jw_kint(struct jw *j, const char *k, long v)
{
	jw_key(j, k);
	jw_printf(j, "%ld", v);
}

static void jw_kstr(struct jw *j, const char *k, const char *v)
{
	jw_key(j, k);
	jw_string(j, v);
}

/* @v, or null when it is NULL */
static void jw_kstr_or_null(struct jw *j, const char *k, const char *v)
{
	jw_key(j, k);
	if (v)
		jw_string(j, v);
	else
		jw_raw(j, "null", 4);
}

static void jw_kbool(struct jw *j, const char *k, bool v)
{
	jw_key(j, k);
	jw_raw(j, v ? "true" : "false", v ? 4 : 5);
}

static void jw_khex(struct jw *j, const char *k, const uint8_t *b, size_t n)
{
	char s[2 * 64 + 1];

	for (size_t i = 0; i < n && i < 64; i++)
		snprintf(s + 2 * i, 3, "%02x", b[i]);
	s[2 * (n < 64 ? n : 64)] = '\0';
	jw_kstr(j, k, s);
}

/* ---- pieces of the snapshot ------------------------------------------ */

/* "a.b.c.d:port" or "[v6]:port"; "" if not known. */
static void format_addr(const struct sockaddr_storage *ss, char *out, size_t n)
{
	char ip[INET6_ADDRSTRLEN];

	out[0] = '\0';
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)ss;

		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		snprintf(out, n, "%s:%u", ip, ntohs(a->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;

		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(out, n, "[%s]:%u", ip, ntohs(a->sin6_port));
	}
}

static void jw_reason(struct jw *j, const char *k, uint32_t reason)
{
	char code[16];

	jw_kobj(j, k);
	jw_kstr(j, "name", usmc_reason_name(reason));
	snprintf(code, sizeof(code), "0x%08x", reason);
	jw_kstr(j, "code", code);
	jw_close(j, '}');
}

/* Fallbacks by reason, those counted at least once. */
static void jw_fallbacks(struct jw *j, const struct mode_counts *m)
{
	jw_karr(j, "fallback_reasons");
	for (unsigned int i = 0; i < USMC_REASON_SLOTS; i++) {
		const struct usmc_reason_desc *d = usmc_reason_by_slot(i);
		uint64_t n = atomic_load(&m->fallback_by_reason[i]);
		char code[16];

		if (!n)
			continue;
		jw_aobj(j);
		jw_kstr(j, "name", d ? d->name : "UNKNOWN");
		snprintf(code, sizeof(code), d ? "0x%08x" : "unknown", d ? d->code : 0);
		jw_kstr(j, "code", code);
		jw_ku64(j, "count", n);
		jw_close(j, '}');
	}
	jw_close(j, ']');
}

static void jw_process(struct jw *j, struct usmc_ctx *ctx, unsigned int index)
{
	struct usmc_ctx_stats cs;
	char comm[64] = "";
	FILE *f = fopen("/proc/self/comm", "re");

	if (f) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
	jw_kint(j, "schema", STAT_SCHEMA);
	jw_kint(j, "pid", getpid());
	jw_kstr(j, "comm", comm);
	jw_kstr(j, "version", usmc_version());
	jw_kint(j, "context", index);
	jw_kbool(j, "kernel_compat", ctx->kc != NULL);
	jw_kstr_or_null(j, "kernel_compat_cgroup", kcompat_cgroup(ctx->kc));
	jw_karr(j, "devices");
	for (int i = 0; i < ctx->ndevs; i++) {
		jw_aobj(j);
		jw_kstr(j, "name", ctx->devs[i].name);
		jw_kint(j, "port", ctx->devs[i].port);
		jw_kstr(j, "netdev", ctx->devs[i].netdev);
		jw_kint(j, "gid_index", ctx->devs[i].gid_index);
		jw_close(j, '}');
	}
	jw_close(j, ']');
	usmc_ctx_stats(ctx, &cs);
	jw_kobj(j, "counters");
	jw_ku64(j, "connects", cs.connects);
	jw_ku64(j, "accepts", cs.accepts);
	jw_ku64(j, "smcr", cs.smcr);
	jw_ku64(j, "fallbacks", cs.fallbacks);
	jw_ku64(j, "hs_errors", cs.hs_errors);
	jw_ku64(j, "open_conns", cs.open_conns);
	jw_ku64(j, "lgrs_created", cs.lgrs_created);
	jw_ku64(j, "lgrs_open", cs.lgrs_open);
	jw_ku64(j, "lgrs_reclaimed", cs.lgrs_reclaimed);
	jw_ku64(j, "pinned_bytes", cs.pinned_bytes);
	jw_ku64(j, "pinned_max", cs.pinned_max);
	jw_ku64(j, "pool_shrinks", cs.pool_shrinks);
	jw_ku64(j, "pinned_refused", cs.pinned_refused);
	jw_ku64(j, "links_added", cs.links_added);
	jw_ku64(j, "link_failures", cs.link_failures);
	jw_ku64(j, "failovers", cs.failovers);
	jw_close(j, '}');
	jw_fallbacks(j, &ctx->modes);
}

/* Requires ctx->reg_lock (keeps @l alive). */
static void jw_listener_locked(struct jw *j, struct usmc_listener *l)
{
	struct usmc_listener_stats ls;
	struct sockaddr_storage ss = {0};
	socklen_t len = sizeof(ss);
	char addr[INET6_ADDRSTRLEN + 16];
	int last = -1;

	getsockname(l->lfd, (struct sockaddr *)&ss, &len);
	format_addr(&ss, addr, sizeof(addr));
	usmc_listener_stats(l, &ls);
	jw_aobj(j);
	jw_kstr(j, "address", addr);
	jw_kint(j, "backlog", l->backlog);
	jw_kbool(j, "tcp_only", l->flags & USMC_LISTEN_TCP_ONLY);
	jw_kbool(j, "auto_fallback", l->flags & USMC_LISTEN_AUTO_FALLBACK);
	jw_kobj(j, "counters");
	jw_ku64(j, "accepted", ls.accepted);
	jw_ku64(j, "smcr", ls.smcr);
	jw_ku64(j, "fallbacks", ls.fallbacks);
	jw_ku64(j, "hs_failed", ls.hs_failed);
	jw_ku64(j, "congestion_fallbacks", ls.congestion_fallbacks);
	jw_ku64(j, "backlog_full", ls.backlog_full);
	jw_ku64(j, "in_handshake", ls.in_handshake);
	jw_ku64(j, "queued", ls.queued);
	jw_ku64(j, "hs_queue_depth", ls.hs_queue_depth);
	jw_ku64(j, "hs_queue_high", ls.hs_queue_high);
	jw_ku64(j, "backlog_high", ls.backlog_high);
	jw_ku64(j, "accept_stash_high", ls.accept_stash_high);
	jw_ku64(j, "kernel_queue", ls.kernel_queue);
	jw_ku64(j, "listen_drops", ls.listen_drops);
	jw_kbool(j, "accept_uring", ls.accept_uring);
	jw_close(j, '}');
	/* up to the last non-empty bucket: bucket i counts [2^i, 2^(i+1)) us */
	for (int i = 0; i < USMC_HS_HIST_BUCKETS; i++)
		if (ls.hs_time_hist[i])
			last = i;
	jw_karr(j, "hs_time_hist");
	for (int i = 0; i <= last; i++) {
		jw_sep(j);
		jw_printf(j, "%" PRIu64, ls.hs_time_hist[i]);
	}
	jw_close(j, ']');
	jw_fallbacks(j, &l->modes);
	jw_close(j, '}');
}

/* Requires ctx->reg_lock (keeps @c and its socket alive). */
static void jw_conn_locked(struct jw *j, struct usmc_conn *c)
{
	struct sockaddr_storage local = {0}, peer = {0};
	char a[INET6_ADDRSTRLEN + 16];
	int fd = atomic_load(&c->st_fd);
	enum usmc_mode mode = atomic_load_explicit(&c->st_mode, memory_order_relaxed);
	socklen_t len;

	if (fd >= 0) {
		len = sizeof(local);
		getsockname(fd, (struct sockaddr *)&local, &len);
		len = sizeof(peer);
		getpeername(fd, (struct sockaddr *)&peer, &len);
	}
	jw_aobj(j);
	format_addr(&local, a, sizeof(a));
	jw_kstr(j, "local", a);
	format_addr(&peer, a, sizeof(a));
	jw_kstr(j, "peer", a);
	jw_kstr(j, "role", c->is_server ? "server" : "client");
	jw_kstr(j, "mode", usmc_mode_name(mode));
	if (mode == USMC_MODE_TCP) {
		jw_reason(j, "reason", atomic_load_explicit(&c->st_reason, memory_order_relaxed));
		jw_kbool(j, "peer_declined",
			 atomic_load_explicit(&c->st_peer_declined, memory_order_relaxed));
	} else {
		jw_key(j, "reason");
		jw_raw(j, "null", 4);
		jw_kbool(j, "peer_declined", false);
	}
	jw_ku64(j, "lgr_id", atomic_load_explicit(&c->st_lgr_id, memory_order_relaxed));
	jw_ku64(j, "bytes_sent", atomic_load_explicit(&c->bytes_sent, memory_order_relaxed));
	jw_ku64(j, "bytes_received",
		atomic_load_explicit(&c->bytes_received, memory_order_relaxed));
	jw_close(j, '}');
}

static const char *lgr_state_name(int s)
{
	switch (s) {
	case LGR_INIT:
		return "INIT";
	case LGR_ACTIVE:
		return "ACTIVE";
	case LGR_DEAD:
		return "DEAD";
	}
	return "UNKNOWN";
}

static const char *link_state_name(int s)
{
	switch (s) {
	case SMCR_LNK_ACTIVATING:
		return "ACTIVATING";
	case SMCR_LNK_ACTIVE:
		return "ACTIVE";
	case SMCR_LNK_INACTIVE:
		return "INACTIVE";
	}
	return "UNKNOWN";
}

static void jw_gid(struct jw *j, const char *k, const uint8_t gid[SMCR_GID_LEN])
{
	char s[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, gid, s, sizeof(s));
	jw_kstr(j, k, s);
}

static void jw_pool(struct jw *j, const char *k, const struct bufpool_class_usage *u)
{
	jw_karr(j, k);
	for (int c = 0; c < SMC_BUF_CLASSES; c++) {
		if (!u[c].total)
			continue;
		jw_aobj(j);
		jw_ku64(j, "size", u[c].size);
		jw_ku64(j, "in_use", u[c].in_use);
		jw_ku64(j, "free", u[c].total - u[c].in_use);
		jw_close(j, '}');
	}
	jw_close(j, ']');
}

/* A link's port, GIDs and QP numbers, as each link and, for its main
 * link, the link group show them. */
static void jw_link_ends(struct jw *j, const struct lgr_link_info *k)
{
	jw_kstr(j, "device", k->dev_name);
	jw_kint(j, "port", k->port);
	jw_gid(j, "local_gid", k->local_gid);
	jw_gid(j, "peer_gid", k->peer_gid);
	jw_ku64(j, "qp_num", k->qp_num);
	jw_ku64(j, "peer_qp_num", k->peer_qpn);
}

static void jw_links(struct jw *j, const struct lgr_info *g)
{
	jw_karr(j, "links");
	for (int i = 0; i < g->nlinks; i++) {
		const struct lgr_link_info *k = &g->links[i];

		jw_aobj(j);
		jw_kint(j, "slot", k->slot);
		jw_kint(j, "link_num", k->link_num);
		jw_kstr(j, "state", link_state_name(k->state));
		jw_link_ends(j, k);
		jw_kint(j, "sq_used", k->sq_used);
		jw_kint(j, "sq_size", SMCR_MAX_SEND_WR);
		jw_close(j, '}');
	}
	jw_close(j, ']');
}

static void jw_lgr(struct jw *j, const struct lgr_info *g)
{
	static const struct lgr_link_info none; /* a link group without a link */
	const struct lgr_link_info *main_lnk = lgr_info_main_link(g);

	jw_aobj(j);
	jw_ku64(j, "id", g->id);
	jw_kstr(j, "role", g->is_server ? "server" : "client");
	jw_kstr(j, "state", lgr_state_name(g->state));
	jw_khex(j, "peer_id", g->peer_id, sizeof(g->peer_id));
	jw_link_ends(j, main_lnk ? main_lnk : &none);
	jw_links(j, g);
	jw_kint(j, "connections", g->nconns);
	jw_kint(j, "max_connections", g->max_conns);
	jw_kobj(j, "buffers");
	jw_pool(j, "rmb", g->rmbs);
	jw_pool(j, "sndbuf", g->sndbufs);
	jw_close(j, '}');
	jw_kobj(j, "llc");
	jw_ku64(j, "test_link_sent", g->test_link_sent);
	jw_ku64(j, "test_link_answered", g->test_link_answered);
	jw_ku64(j, "rkey_confirmed", g->rkey_confirmed);
	jw_ku64(j, "rkey_deleted", g->rkey_deleted);
	jw_close(j, '}');
	jw_kobj(j, "engine");
	jw_ku64(j, "cqes", g->engine.cqes);
	jw_ku64(j, "wakeups", g->engine.wakeups);
	jw_ku64(j, "channel_sleeps", g->engine.channel_sleeps);
	jw_ku64(j, "spins_ok", g->engine.spins_ok);
	jw_ku64(j, "doorbells", g->engine.doorbells);
	jw_ku64(j, "cq_arms", g->engine.cq_arms);
	jw_ku64(j, "ready_ops", g->engine.ready_ops);
	jw_ku64(j, "syscalls", g->engine.syscalls);
	jw_close(j, '}');
	jw_close(j, '}');
}

static void jw_lgrs(struct jw *j, struct usmc_ctx *ctx)
{
	struct lgr_info *v = NULL;
	int n, max = 0;

	/* the list may grow between the count and the copy: retry bigger */
	for (;;) {
		n = lgr_info_all(&ctx->rdma, v, max);
		if (n <= max)
			break;
		free(v);
		max = n + 4;
		v = malloc(sizeof(*v) * (size_t)max);
		if (!v) {
			j->oom = true;
			return;
		}
	}
	jw_karr(j, "link_groups");
	for (int i = 0; i < n; i++)
		jw_lgr(j, &v[i]);
	jw_close(j, ']');
	free(v);
}

char *stat_snapshot(struct usmc_ctx *ctx, unsigned int index, size_t *len)
{
	struct jw j = {0};

	jw_open(&j, '{');
	jw_process(&j, ctx, index);
	pthread_mutex_lock(&ctx->reg_lock);
	jw_karr(&j, "listeners");
	for (struct reg_node *n = ctx->listeners; n; n = n->next)
		jw_listener_locked(&j, n->obj);
	jw_close(&j, ']');
	jw_karr(&j, "connections");
	for (struct reg_node *n = ctx->conns; n; n = n->next)
		jw_conn_locked(&j, n->obj);
	jw_close(&j, ']');
	pthread_mutex_unlock(&ctx->reg_lock);
	jw_lgrs(&j, ctx);
	jw_close(&j, '}');
	jw_raw(&j, "\n", 1);
	if (j.oom) {
		free(j.p);
		return NULL;
	}
	*len = j.len;
	return j.p;
}

/* ---- the thread ------------------------------------------------------- */

/* Same uid as this process, or root. */
static bool peer_allowed(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) || len != sizeof(cr))
		return false;
	return cr.uid == 0 || cr.uid == geteuid() || cr.uid == getuid();
}

static void send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* the reader went away or stalled: its loss */
		p += w;
		n -= (size_t)w;
	}
}

static void serve_one(struct usmc_stat *st)
{
	struct timeval tv = {.tv_sec = STAT_SNDTIMEO_MS / 1000,
			     .tv_usec = (STAT_SNDTIMEO_MS % 1000) * 1000};
	size_t len;
	char *snap;
	int fd = accept4(st->lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (peer_allowed(fd)) {
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		snap = stat_snapshot(st->ctx, st->index, &len);
		if (snap)
			send_all(fd, snap, len); /* no lock held */
		free(snap);
	}
	close(fd);
}

static void *stat_thread(void *arg)
{
	struct usmc_stat *st = arg;

	pthread_setname_np(pthread_self(), "usmc-stat");
	for (;;) {
		struct pollfd p[2] = {{.fd = st->lfd, .events = POLLIN},
				      {.fd = st->stopfd, .events = POLLIN}};

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		if (p[0].revents & POLLIN)
			serve_one(st);
	}
	return NULL;
}

/* Bind "@usmc-stat/<pid>/<n>/<nonce>" with the next <n> and a fresh nonce. */
static int stat_bind(struct usmc_stat *st)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int rc = -EADDRINUSE;

	if (fd < 0)
		return -errno;
	for (int tries = 0; tries < 64; tries++) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		unsigned int n = atomic_fetch_add(&stat_seq, 1);
		uint64_t nonce;
		int len;
		socklen_t sl;

		if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) {
			rc = -EIO;
			break;
		}
		len = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, STAT_NAME_FMT,
			       (int)getpid(), n, nonce);
		sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
		if (!bind(fd, (struct sockaddr *)&sa, sl)) {
			if (listen(fd, 16)) {
				close(fd);
				return -errno;
			}
			st->index = n;
			return fd;
		}
		if (errno != EADDRINUSE) {
			rc = -errno;
			break;
		}
	}
	close(fd);
	return rc;
}

struct usmc_stat *stat_start(struct usmc_ctx *ctx)
{
	struct usmc_stat *st = calloc(1, sizeof(*st));
	sigset_t all, old;
	int rc;

	if (!st)
		return NULL;
	st->ctx = ctx;
	st->stopfd = eventfd(0, EFD_CLOEXEC);
	st->lfd = stat_bind(st);
	if (st->stopfd < 0 || st->lfd < 0)
		goto err;
	/* the application's signals are not for this thread */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&st->thread, NULL, stat_thread, st);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		goto err;
	return st;
err:
	if (st->stopfd >= 0)
		close(st->stopfd);
	if (st->lfd >= 0)
		close(st->lfd);
	free(st);
	return NULL;
}

void stat_stop(struct usmc_stat *st)
{
	uint64_t one = 1;

	if (!st)
		return;
	if (write(st->stopfd, &one, sizeof(one)) < 0) {
		/* cannot fail: an eventfd far from its maximum */
	}
	pthread_join(st->thread, NULL);
	close(st->lfd);
	close(st->stopfd);
	free(st);
}
