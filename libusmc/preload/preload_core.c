// SPDX-License-Identifier: MIT
/*
 * The preload's core (docs/preload.md): the real libc calls, the table of
 * managed descriptors, the per-process context, counters and the log,
 * fork and exit.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"

struct real_calls R;
atomic_bool preload_ready;
pid_t my_pid;
bool preload_disabled;
__thread int in_lib;

static int verbose;

/* USMC_RUN_SMC_PEERS: where clients may propose SMC-R (unset: anywhere) */
struct peer_rule {
	int family;
	uint8_t addr[16];
	int prefix; /* bits */
	int port;   /* 0 = any */
};
#define MAX_PEER_RULES 32
static struct peer_rule peer_rules[MAX_PEER_RULES];
static int npeer_rules = -1; /* -1: no list, every peer */
static int log_fd = 2;
static bool force_gate;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the real calls ---------------------------------------------------- */

/*
 * Each real call and the libc symbol it is. dlsym() gives a data pointer;
 * it is stored through a (void **) as POSIX's dlsym() page shows.
 */
#define REAL_AS(field, sym)            \
	{                              \
		(void **)&R.field, sym \
	}
#define REAL(field) REAL_AS(field, #field)

static const struct {
	void **slot;
	const char *sym;
} real_syms[] = {
	REAL(socket),
	REAL(connect),
	REAL(listen),
	REAL(accept),
	REAL(accept4),
	REAL(close),
	REAL(shutdown),
	REAL(dup),
	REAL(dup2),
	REAL(dup3),
	REAL(fcntl),
	REAL(fcntl64),
	REAL(ioctl),
	REAL(getsockopt),
	REAL(setsockopt),
	REAL(getsockname),
	REAL(getpeername),
	REAL(read),
	REAL(write),
	REAL(readv),
	REAL(writev),
	REAL(recv),
	REAL(send),
	REAL(recvfrom),
	REAL(sendto),
	REAL(recvmsg),
	REAL(sendmsg),
	REAL(recvmmsg),
	REAL(sendmmsg),
	REAL_AS(read_chk, "__read_chk"),
	REAL_AS(recv_chk, "__recv_chk"),
	REAL_AS(recvfrom_chk, "__recvfrom_chk"),
	REAL(sendfile),
	REAL(sendfile64),
	REAL(splice),
	REAL(poll),
	REAL(ppoll),
	REAL_AS(poll_chk, "__poll_chk"),
	REAL_AS(ppoll_chk, "__ppoll_chk"),
	REAL(select),
	REAL(pselect),
	REAL(epoll_ctl),
	REAL(pthread_create),
	REAL(socketpair),
	REAL(eventfd),
	REAL(epoll_create),
	REAL(epoll_create1),
	REAL(open),
	REAL(open64),
	REAL(openat),
	REAL(openat64),
};

static void resolve_all(void)
{
	for (size_t i = 0; i < sizeof(real_syms) / sizeof(real_syms[0]); i++)
		*real_syms[i].slot = dlsym(RTLD_NEXT, real_syms[i].sym);
	if (!R.fcntl64)
		R.fcntl64 = R.fcntl;
	if (!R.sendfile64)
		R.sendfile64 = R.sendfile;
}

/*
 * A detached thread of the preload, named @name, with @stack bytes of
 * stack (0: the default) and every signal blocked: signals are the
 * application's. It is created with the real pthread_create(): the
 * preload's threads set in_lib themselves. Returns 0 or an errno.
 */
int preload_thread_start(void *(*fn)(void *), void *arg, const char *name, size_t stack)
{
	pthread_attr_t a;
	sigset_t all, old;
	pthread_t t;
	int rc;

	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (stack)
		pthread_attr_setstacksize(&a, stack);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = R.pthread_create(&t, &a, fn, arg);
	if (!rc)
		pthread_setname_np(t, name);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	return rc;
}

/* ---- the table ----------------------------------------------------------- */

#define TAB_PAGE_SHIFT 10
#define TAB_PAGE       (1 << TAB_PAGE_SHIFT)
#define TAB_PAGES      1024 /* descriptors up to 2^20 */

static _Atomic(struct pobj *) *_Atomic tab[TAB_PAGES];
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;

void tab_lock_acquire(void)
{
	pthread_mutex_lock(&tab_lock);
}

void tab_lock_release(void)
{
	pthread_mutex_unlock(&tab_lock);
}

static _Atomic(struct pobj *) *slot_of(int fd, bool create)
{
	_Atomic(struct pobj *) *page;

	if (fd < 0 || fd >= TAB_PAGES * TAB_PAGE)
		return NULL;
	page = atomic_load_explicit(&tab[fd >> TAB_PAGE_SHIFT], memory_order_acquire);
	if (!page && create) {
		page = calloc(TAB_PAGE, sizeof(*page));
		if (!page)
			return NULL;
		atomic_store_explicit(&tab[fd >> TAB_PAGE_SHIFT], page, memory_order_release);
	}
	return page ? &page[fd & (TAB_PAGE - 1)] : NULL;
}

struct pobj *obj_get(int fd)
{
	_Atomic(struct pobj *) *slot = slot_of(fd, false);
	struct pobj *o;
	int r;

	if (!slot)
		return NULL;
	for (;;) {
		o = atomic_load_explicit(slot, memory_order_acquire);
		if (!o)
			return NULL;
		r = atomic_load(&o->refs);
		while (r > 0 && !atomic_compare_exchange_weak(&o->refs, &r, r + 1))
			;
		if (r > 0) {
			/* the object may have been freed and reused meanwhile */
			if (atomic_load_explicit(slot, memory_order_acquire) == o)
				return o;
			obj_put(o);
		}
	}
}

struct pobj *tab_peek(int fd)
{
	_Atomic(struct pobj *) *slot = slot_of(fd, false);

	return slot ? atomic_load(slot) : NULL;
}

static int fdv_add(struct pobj *o, int fd)
{
	if (o->nfdv == o->capfdv) {
		int cap = o->capfdv ? o->capfdv * 2 : 4;
		int *v = realloc(o->fdv, (size_t)cap * sizeof(int));

		if (!v)
			return -ENOMEM;
		o->fdv = v;
		o->capfdv = cap;
	}
	o->fdv[o->nfdv++] = fd;
	return 0;
}

static void fdv_del(struct pobj *o, int fd)
{
	for (int i = 0; i < o->nfdv; i++)
		if (o->fdv[i] == fd) {
			o->fdv[i] = o->fdv[--o->nfdv];
			return;
		}
}

int tab_add(int fd, struct pobj *o)
{
	_Atomic(struct pobj *) *slot;
	struct pobj *stale = NULL;
	int rc = 0;

	pthread_mutex_lock(&tab_lock);
	slot = slot_of(fd, true);
	if (!slot || fdv_add(o, fd)) {
		rc = -ENOMEM; /* a descriptor beyond the table: stays plain */
	} else {
		/* the kernel handed out @fd: an entry still there is stale (its
		 * descriptor was closed behind the preload's back, close_range) */
		stale = atomic_load(slot);
		if (stale)
			fdv_del(stale, fd);
		atomic_fetch_add(&o->refs, 1);
		atomic_store_explicit(slot, o, memory_order_release);
	}
	pthread_mutex_unlock(&tab_lock);
	if (stale)
		obj_put(stale);
	return rc;
}

struct pobj *tab_remove(int fd)
{
	_Atomic(struct pobj *) *slot;
	struct pobj *o = NULL;

	pthread_mutex_lock(&tab_lock);
	slot = slot_of(fd, false);
	if (slot && (o = atomic_load(slot))) {
		atomic_store(slot, NULL);
		fdv_del(o, fd);
	}
	pthread_mutex_unlock(&tab_lock);
	if (o)
		regs_delete_fd(o, fd);
	return o;
}

void tab_release_all(struct pobj *o)
{
	int n = 0;

	pthread_mutex_lock(&tab_lock);
	for (int i = 0; i < o->nfdv; i++) {
		_Atomic(struct pobj *) *slot = slot_of(o->fdv[i], false);

		if (slot && atomic_load(slot) == o) {
			atomic_store(slot, NULL);
			n++;
		}
	}
	o->nfdv = 0;
	pthread_mutex_unlock(&tab_lock);
	/* the kernel keeps the registrations: the descriptors stay open */
	pthread_mutex_lock(&o->lock);
	regs_forget(o);
	pthread_mutex_unlock(&o->lock);
	while (n--)
		obj_put(o);
}

/* ---- objects: type-stable, never returned to malloc ---------------------- */

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pobj *pool_free, *pool_all;

static void obj_reset(struct pobj *o)
{
	o->kind = 0;
	o->pid = my_pid;
	o->nonblock = o->linger0 = false;
	o->rcvtimeo_ms = o->sndtimeo_ms = -1;
	o->nfdv = 0;
	o->regs = NULL;
	o->c = NULL;
	o->tcpfd = -1;
	o->gate[0] = o->gate[1] = -1;
	o->bg = o->settled = false;
	o->connect_state = 0;
	o->pending_err = 0;
	o->is_server = false;
	memset(&o->local, 0, sizeof(o->local));
	memset(&o->peer, 0, sizeof(o->peer));
	o->llen = o->plen = 0;
	o->l = NULL;
	o->lfd = o->wakefd = -1;
	o->backlog = 0;
	o->shut = false;
	o->shadows = NULL;
}

struct pobj *obj_new(enum pobj_kind kind)
{
	struct pobj *o;

	pthread_mutex_lock(&pool_lock);
	o = pool_free;
	if (o)
		pool_free = o->free_next;
	pthread_mutex_unlock(&pool_lock);
	if (!o) {
		o = calloc(1, sizeof(*o));
		if (!o)
			return NULL;
		pthread_mutex_init(&o->lock, NULL);
		pthread_cond_init(&o->cond, NULL);
		pthread_mutex_lock(&pool_lock);
		o->all_next = pool_all;
		pool_all = o;
		pthread_mutex_unlock(&pool_lock);
	}
	obj_reset(o);
	o->kind = kind;
	atomic_store(&o->refs, 1);
	return o;
}

void obj_put(struct pobj *o)
{
	if (atomic_fetch_sub(&o->refs, 1) != 1)
		return;
	obj_destroy(o);
	free(o->fdv);
	o->fdv = NULL;
	o->capfdv = 0;
	pthread_mutex_lock(&pool_lock);
	o->free_next = pool_free;
	pool_free = o;
	pthread_mutex_unlock(&pool_lock);
}

/* ---- the peers clients propose to ------------------------------------------ */

/* One rule: ADDR, ADDR/PREFIX, ADDR:PORT, ADDR/PREFIX:PORT, [V6]/P:PORT. */
static int parse_peer(char *w, struct peer_rule *r)
{
	char *slash, *colon = NULL, *end;
	int max;

	memset(r, 0, sizeof(*r));
	if (*w == '[') { /* [v6]... */
		char *close_b = strchr(w, ']');

		if (!close_b)
			return -1;
		*close_b = 0;
		colon = strchr(close_b + 1, ':');
		slash = strchr(close_b + 1, '/');
		w++;
	} else {
		colon = strchr(w, ':');
		if (colon && strchr(colon + 1, ':'))
			colon = NULL; /* a bare IPv6 address */
		slash = strchr(w, '/');
	}
	if (colon) {
		*colon = 0;
		r->port = (int)strtol(colon + 1, &end, 10);
		if (*end || r->port <= 0 || r->port > 65535)
			return -1;
	}
	if (slash) {
		*slash = 0;
		r->prefix = (int)strtol(slash + 1, &end, 10);
		if (*end)
			return -1;
	}
	if (inet_pton(AF_INET, w, r->addr) == 1) {
		r->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, w, r->addr) == 1) {
		r->family = AF_INET6;
		max = 128;
	} else {
		return -1;
	}
	if (!slash)
		r->prefix = max;
	return r->prefix < 0 || r->prefix > max ? -1 : 0;
}

static void parse_peers(const char *s)
{
	char *copy = strdup(s), *save = NULL, *w;

	if (!copy)
		return;
	npeer_rules = 0;
	for (w = strtok_r(copy, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		if (npeer_rules == MAX_PEER_RULES || parse_peer(w, &peer_rules[npeer_rules]))
			preload_log(0, "USMC_RUN_SMC_PEERS: \"%s\" ignored", w);
		else
			npeer_rules++;
	}
	free(copy);
}

static bool prefix_match(const uint8_t *a, const uint8_t *b, int bits)
{
	int bytes = bits / 8, rest = bits % 8;

	if (memcmp(a, b, (size_t)bytes))
		return false;
	return !rest || ((a[bytes] ^ b[bytes]) & (0xff << (8 - rest))) == 0;
}

bool preload_peer_allowed(const struct sockaddr *sa)
{
	const uint8_t *addr;
	int family, port;

	if (npeer_rules < 0)
		return true;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		family = AF_INET;
		addr = (const uint8_t *)&in->sin_addr;
		port = ntohs(in->sin_port);
	} else {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		family = AF_INET6;
		addr = in6->sin6_addr.s6_addr;
		port = ntohs(in6->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			family = AF_INET;
			addr += 12;
		}
	}
	for (int i = 0; i < npeer_rules; i++) {
		const struct peer_rule *r = &peer_rules[i];

		if (r->family == family && (!r->port || r->port == port) &&
		    prefix_match(r->addr, addr, r->prefix))
			return true;
	}
	return false;
}

/* ---- the context of this process ----------------------------------------- */

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct usmc_ctx *g_ctx;
static pid_t g_ctx_pid, g_ctx_failed_pid;
static bool g_has_devices;

struct usmc_ctx *preload_ctx(void)
{
	struct usmc_ctx *ctx = NULL;
	char msg[160];
	int rc;

	pthread_mutex_lock(&ctx_lock);
	if (g_ctx && g_ctx_pid == my_pid) {
		ctx = g_ctx;
	} else if (g_ctx_failed_pid != my_pid) {
		/* a child of fork(): the parent's context is the parent's */
		rc = IN_LIB(usmc_ctx_create(&ctx));
		if (rc) {
			ctx = NULL;
			g_ctx_failed_pid = my_pid;
			if (usmc_env_check(msg, sizeof(msg)))
				snprintf(msg, sizeof(msg), "%s", usmc_strerror(rc));
			preload_log(0, "no libusmc context (%s): every connection stays plain TCP",
				    msg);
		} else {
			struct usmc_device_info devs[16];
			int n = usmc_ctx_devices(ctx, devs, 16);

			g_has_devices = false;
			for (int i = 0; i < n && i < 16; i++)
				g_has_devices |= devs[i].gid_index >= 0;
			g_ctx = ctx;
			g_ctx_pid = my_pid;
		}
	}
	pthread_mutex_unlock(&ctx_lock);
	return ctx;
}

bool preload_ctx_has_devices(void)
{
	return g_has_devices;
}

bool preload_force_gate(void)
{
	return force_gate;
}

/* ---- counters and the log ------------------------------------------------ */

#define NREASONS 32
#define NUNSUP	 16

static atomic_ulong n_conns[2][3]; /* [server][enum usmc_mode] */
static atomic_ulong n_connect_failed, n_forked;
static struct {
	atomic_uint reason; /* 0 = free slot (USMC_REASON_NONE is never counted) */
	atomic_ulong n[2];
} reasons[NREASONS];
static struct {
	_Atomic(const char *) what;
	atomic_ulong n;
} unsup[NUNSUP];

static void vlog(const char *fmt, va_list ap)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "usmc_run[%d] %s: ", (int)my_pid,
			 program_invocation_short_name);

	if (n < 0 || n >= (int)sizeof(line))
		return;
	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	if (n >= (int)sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)!R.write(log_fd, line, (size_t)n); /* one write: lines of processes do not mix */
}

void preload_log(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > verbose || !R.write)
		return;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

void count_reason(uint32_t reason, bool server)
{
	for (int i = 0; i < NREASONS; i++) {
		unsigned int cur = atomic_load(&reasons[i].reason);

		if (cur == 0 && atomic_compare_exchange_strong(&reasons[i].reason, &cur, reason))
			cur = reason;
		if (cur == reason) {
			atomic_fetch_add(&reasons[i].n[server], 1);
			return;
		}
	}
}

static const char *reason_name(uint32_t r)
{
	switch (r) {
	case PR_NO_CONTEXT:
		return "no-context";
	case PR_LISTEN_ADOPT:
		return "listen-adopt";
	case PR_CONNECT_ADOPT:
		return "connect-adopt";
	}
	return usmc_reason_name(r);
}

static void addr_str(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char a[64] = "?";

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)ss;

		inet_ntop(AF_INET, &s->sin_addr, a, sizeof(a));
		snprintf(buf, len, "%s:%u", a, ntohs(s->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)ss;

		inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(s->sin6_port));
	} else {
		snprintf(buf, len, "?");
	}
}

void count_conn(bool server, const struct usmc_conn_info *info, int fd)
{
	char l[80], p[80];

	atomic_fetch_add(&n_conns[server][info->mode <= 2 ? info->mode : 0], 1);
	if (info->mode == USMC_MODE_TCP)
		count_reason(info->reason, server);
	if (verbose < 2)
		return;
	addr_str(&info->local, l, sizeof(l));
	addr_str(&info->peer, p, sizeof(p));
	if (info->mode == USMC_MODE_SMCR)
		preload_log(2, "fd %d %s %s %s %s: SMC-R (link group %#x)", fd,
			    server ? "accepted" : "connected", l, server ? "<-" : "->", p,
			    info->lgr_id);
	else
		preload_log(2, "fd %d %s %s %s %s: TCP, fallback %s%s (%s)", fd,
			    server ? "accepted" : "connected", l, server ? "<-" : "->", p,
			    reason_name(info->reason), info->peer_declined ? " from the peer" : "",
			    usmc_reason_text(info->reason));
}

void count_connect_failed(int err)
{
	atomic_fetch_add(&n_connect_failed, 1);
	preload_log(2, "connect failed: %s", strerror(err));
}

void count_forked(void)
{
	atomic_fetch_add(&n_forked, 1);
}

void count_unsupported(const char *what)
{
	for (int i = 0; i < NUNSUP; i++) {
		const char *cur = atomic_load(&unsup[i].what);

		if (!cur && atomic_compare_exchange_strong(&unsup[i].what, &cur, what))
			cur = what;
		if (cur == what) {
			if (atomic_fetch_add(&unsup[i].n, 1) == 0)
				preload_log(1, "unsupported on an SMC-R connection: %s", what);
			return;
		}
	}
}

static void print_summary(void)
{
	unsigned long a_s = n_conns[1][USMC_MODE_SMCR], a_t = n_conns[1][USMC_MODE_TCP];
	unsigned long c_s = n_conns[0][USMC_MODE_SMCR], c_t = n_conns[0][USMC_MODE_TCP];
	unsigned long failed = n_connect_failed;

	/* a child of fork() that only touched inherited connections has a
	 * summary too: its refused calls */
	if (verbose < 1 || !(a_s + a_t + c_s + c_t + failed + n_forked))
		return;
	preload_log(
		1, "accepted %lu SMC-R, %lu TCP; connected %lu SMC-R, %lu TCP; %lu connects failed",
		a_s, a_t, c_s, c_t, failed);
	for (int i = 0; i < NREASONS; i++) {
		uint32_t r = atomic_load(&reasons[i].reason);

		if (r)
			preload_log(1, "fallback %s: %lu accepted, %lu connected (%s)",
				    reason_name(r), (unsigned long)reasons[i].n[1],
				    (unsigned long)reasons[i].n[0],
				    r >= PR_NO_CONTEXT && r <= PR_CONNECT_ADOPT
					    ? "the preload could not hand it to libusmc"
					    : usmc_reason_text(r));
	}
	for (int i = 0; i < NUNSUP; i++) {
		const char *w = atomic_load(&unsup[i].what);

		if (w)
			preload_log(1, "unsupported %s: %lu calls", w, (unsigned long)unsup[i].n);
	}
	if (n_forked)
		preload_log(1, "data calls on SMC-R connections inherited across fork: %lu",
			    (unsigned long)n_forked);
}

/* A child of fork() counts its own connections and calls: the copies of
 * the parent's counters go (its summary at exit is the child's). */
static void counters_reset(void)
{
	for (int s = 0; s < 2; s++)
		for (int m = 0; m < 3; m++)
			atomic_store(&n_conns[s][m], 0);
	atomic_store(&n_connect_failed, 0);
	atomic_store(&n_forked, 0);
	for (int i = 0; i < NREASONS; i++) {
		atomic_store(&reasons[i].reason, 0);
		atomic_store(&reasons[i].n[0], 0);
		atomic_store(&reasons[i].n[1], 0);
	}
	for (int i = 0; i < NUNSUP; i++) {
		atomic_store(&unsup[i].what, NULL);
		atomic_store(&unsup[i].n, 0);
	}
}

/* ---- background closes ----------------------------------------------------- */

struct reap {
	struct usmc_conn *c;
	bool abort_it;
	struct reap *next;
};

static pthread_mutex_t reap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reap_cond = PTHREAD_COND_INITIALIZER;
static struct reap *reap_head, *reap_tail;
static int reap_busy;	      /* items taken and not yet closed */
static pid_t reap_thread_pid; /* the process whose reaper thread runs */

static int reap_one(struct usmc_conn *c, bool abort_it)
{
	return abort_it ? usmc_abort(c) : usmc_close(c);
}

static void *reaper_main(void *arg)
{
	(void)arg;
	in_lib_thread();
	pthread_mutex_lock(&reap_lock);
	for (;;) {
		struct reap *r;

		while (!reap_head)
			pthread_cond_wait(&reap_cond, &reap_lock);
		r = reap_head;
		reap_head = r->next;
		if (!reap_head)
			reap_tail = NULL;
		reap_busy++;
		pthread_mutex_unlock(&reap_lock);
		reap_one(r->c, r->abort_it);
		free(r);
		pthread_mutex_lock(&reap_lock);
		reap_busy--;
		pthread_cond_broadcast(&reap_cond);
	}
	return NULL;
}

void reaper_close(struct usmc_conn *c, bool abort_it)
{
	struct reap *r = malloc(sizeof(*r));
	bool inline_close = !r;

	pthread_mutex_lock(&reap_lock);
	if (r && reap_thread_pid != my_pid) {
		if (preload_thread_start(reaper_main, NULL, "usmc-preload", 0) == 0)
			reap_thread_pid = my_pid;
		else
			inline_close = true;
	}
	if (!inline_close) {
		r->c = c;
		r->abort_it = abort_it;
		r->next = NULL;
		if (reap_tail)
			reap_tail->next = r;
		else
			reap_head = r;
		reap_tail = r;
		pthread_cond_signal(&reap_cond);
	}
	pthread_mutex_unlock(&reap_lock);
	if (inline_close) {
		free(r);
		IN_LIB(reap_one(c, abort_it));
	}
}

/* At exit: the closes queued get their linger time, as the kernel would
 * send a closed socket's data after the process ended (bounded). */
static void reaper_flush(void)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 10;
	pthread_mutex_lock(&reap_lock);
	while (reap_thread_pid == my_pid && (reap_head || reap_busy))
		if (pthread_cond_timedwait(&reap_cond, &reap_lock, &dl) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&reap_lock);
}

/* ---- fork and exit ----------------------------------------------------------- */

static void atfork_prepare(void)
{
	pthread_mutex_lock(&ctx_lock);
	pthread_mutex_lock(&tab_lock);
	pthread_mutex_lock(&pool_lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&pool_lock);
	pthread_mutex_unlock(&tab_lock);
	pthread_mutex_unlock(&ctx_lock);
}

/*
 * In a child, each descriptor of an SMC-R connection (the parent's: its
 * readiness socketpair end) is pointed at a dead socket: an AF_UNIX end
 * shut down both ways, whose peer is closed. The table still knows it, so
 * the preload's calls fail with ENOTCONN; what bypasses the preload (a
 * program the child execs with it, inetd style; a raw system call) reads
 * EOF and gets EPIPE instead of taking the parent's readiness bytes or
 * filling its pair. Only system calls: this runs in the child of a fork
 * of a threaded process.
 */
static void fork_bury_smcr(void)
{
	int sv[2] = {-1, -1};

	for (struct pobj *o = pool_all; o; o = o->all_next) {
		if (!atomic_load(&o->refs) || o->kind != PO_SMCR)
			continue;
		if (sv[0] < 0) {
			if (R.socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
				return; /* no descriptor left: the copies stay */
			R.shutdown(sv[0], SHUT_RDWR);
			R.close(sv[1]);
		}
		for (int i = 0; i < o->nfdv; i++)
			fd_point(o->fdv[i], sv[0], R.fcntl(o->fdv[i], F_GETFD));
	}
	if (sv[0] >= 0)
		R.close(sv[0]);
}

/*
 * The child: one thread, a copy of the parent's memory. Locks other
 * threads held are reset; the parent's context, listeners and SMC-R
 * connections stay the parent's (usmc.h): a new context comes on first
 * use, a listener is activated again where the child accepts, and the
 * child's copies of epoll registrations are forgotten (an inherited epoll
 * set is shared with the parent: deleting from it would delete the
 * parent's).
 */
static void atfork_child(void)
{
	pthread_mutex_init(&pool_lock, NULL);
	pthread_mutex_init(&tab_lock, NULL);
	pthread_mutex_init(&ctx_lock, NULL);
	pthread_mutex_init(&reap_lock, NULL);
	pthread_cond_init(&reap_cond, NULL);
	reap_head = reap_tail = NULL; /* the parent closes those */
	reap_busy = 0;
	my_pid = getpid();
	counters_reset();
	fork_bury_smcr();
	for (struct pobj *o = pool_all; o; o = o->all_next) {
		pthread_mutex_init(&o->lock, NULL);
		pthread_cond_init(&o->cond, NULL);
		if (atomic_load(&o->refs))
			regs_forget(o);
	}
}

static void preload_exit(void)
{
	print_summary();
	reaper_flush();
}

/* Listening TCP sockets inherited across exec (socket activation, a
 * binary upgrade) are listeners of this process too. */
static void adopt_inherited_listeners(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name), v = 0, dom = 0, proto = 0;
		socklen_t len = sizeof(v);
		struct pobj *o;

		if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d))
			continue;
		if (R.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) || !v)
			continue;
		len = sizeof(dom);
		if (R.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) ||
		    (dom != AF_INET && dom != AF_INET6))
			continue;
		len = sizeof(proto);
		if (R.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) || proto != IPPROTO_TCP)
			continue;
		o = obj_new(PO_LISTEN);
		if (!o)
			break;
		o->nonblock = (R.fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
		tab_add(fd, o);
		obj_put(o);
	}
	closedir(d);
}

static int env_int(const char *name, int def)
{
	const char *s = getenv(name);

	return s && *s ? atoi(s) : def;
}

void preload_init(void)
{
	const char *s;

	pthread_mutex_lock(&init_lock);
	if (atomic_load(&preload_ready)) {
		pthread_mutex_unlock(&init_lock);
		return;
	}
	resolve_all();
	my_pid = getpid();
	verbose = env_int("USMC_RUN_VERBOSE", 0);
	force_gate = env_int("USMC_PRELOAD_TEST_GATE", 0) != 0;
	s = getenv("USMC_SMC");
	preload_disabled = s && !strcmp(s, "0");
	s = getenv("USMC_RUN_SMC_PEERS");
	if (s && *s)
		parse_peers(s);
	s = getenv("USMC_RUN_LOG");
	if (s && *s) {
		int fd = R.open(s, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);

		if (fd >= 0)
			log_fd = fd;
	}
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	atexit(preload_exit);
	atomic_store_explicit(&preload_ready, true, memory_order_release);
	pthread_mutex_unlock(&init_lock);
	if (!preload_disabled)
		adopt_inherited_listeners();
}

__attribute__((constructor)) static void preload_ctor(void)
{
	P_INIT();
}
