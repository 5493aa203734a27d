// SPDX-License-Identifier: MIT
/*
 * Kernel-compatible mode, its sockets (docs/kernel-compat.md): a client's
 * mark and what the SYN-ACK said of its peer, a listener's mark and
 * registration (before its listen(), or adopted after), its congestion and
 * storm state for the program, and what the program recorded of each
 * accepted connection's SYN. kcompat.c loads the program.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#include "kcompat_int.h"

#ifdef USMC_HAVE_BPF
#include <bpf/bpf.h>

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71 /* Linux 5.14 */
#endif

/* A failure leaves the socket unmarked: the old rule applies to it. */
static int mark_sock(struct kcompat *kc, int fd, const struct kc_sock *s)
{
	return bpf_map_update_elem(kc->socks_fd, &fd, s, BPF_ANY);
}

/* Mark socket @fd as usmc's (a listener's): 0 or a negative errno. */
static int mark(struct kcompat *kc, int fd)
{
	struct kc_sock s = {.flags = KC_SOCK_USMC};

	return mark_sock(kc, fd, &s) ? -errno : 0;
}

/* What usmc_socks @map_fd says about socket @fd. */
static enum kc_peer peer_in(int map_fd, int fd)
{
	struct kc_sock s;
	bool found = bpf_map_lookup_elem(map_fd, &fd, &s) == 0;

	return kc_peer_from_flags(found, found ? s.flags : 0);
}

static enum kc_peer peer_of(struct kcompat *kc, int fd)
{
	return peer_in(kc->socks_fd, fd);
}

uint32_t kcompat_mark_client(struct kcompat *kc, int fd)
{
	struct kc_sock s = {.flags = KC_SOCK_USMC};
	uint32_t slot;

	if (!kc)
		return 0;
	if (kc->peers && treiber_pop(&kc->free_slots, &slot)) {
		s.slot = slot + 1;
		do /* 0 is what a slot never written holds */
			s.gen = ++kc->slot_gen[slot];
		while (!s.gen);
	}
	if (mark_sock(kc, fd, &s))
		kcompat_client_forget(kc, &s.slot);
	return s.slot;
}

void kcompat_client_forget(struct kcompat *kc, uint32_t *ticket)
{
	if (kc && *ticket)
		treiber_push(&kc->free_slots, *ticket - 1);
	*ticket = 0;
}

enum kc_peer kcompat_client_peer(struct kcompat *kc, int fd, uint32_t *ticket)
{
	uint32_t slot;
	uint64_t v;
	bool mine;

	if (!kc)
		return KC_PEER_UNKNOWN;
	if (!*ticket)
		return peer_of(kc, fd);
	slot = *ticket - 1;
	v = __atomic_load_n(&kc->peers[slot], __ATOMIC_ACQUIRE);
	mine = (uint32_t)(v >> KC_PEER_GEN_SHIFT) == kc->slot_gen[slot];
	kcompat_client_forget(kc, ticket);
	/* not written for this holder: the program did not see the SYN-ACK
	 * (detached since?): the socket's storage says what it knows */
	return mine ? kc_peer_from_flags(true, (uint32_t)(v & KC_PEER_FLAGS_MASK))
		    : peer_of(kc, fd);
}

static int netns_cookie(int fd, uint64_t *out)
{
	socklen_t len = sizeof(*out);

	return getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, out, &len) ? -errno : 0;
}

/* Register @fd's port in usmc_listeners and set @ls's key, slot and
 * taken[]: 0, or a negative errno (ls->key may be set then). */
static int listener_register(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	struct kc_listen_val v = {0};
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint64_t cookie;
	int rc;

	memset(ls, 0, sizeof(*ls));
	if (!kc)
		return -EINVAL;
	if (netns_cookie(fd, &cookie) || getsockname(fd, (struct sockaddr *)&ss, &len))
		return -errno;
	rc = kc_listen_key_make(cookie, (struct sockaddr *)&ss, &ls->key);
	if (rc)
		return rc;
	ls->slot = kc_listen_slot(ls->key.netns_cookie, ls->key.port);
	/* what the slot counted before this listener (one closed on the same
	 * port, one sharing the slot; an adopted socket's queue, which
	 * uncounted covers) is not ours to take */
	for (int k = 0; kc->estab && k < KC_ESTAB_KINDS; k++)
		atomic_init(&ls->taken[k],
			    __atomic_load_n(&kc->estab[ls->slot].n[k], __ATOMIC_RELAXED));
	/* a port shared with another usmc listener (SO_REUSEPORT), or marked
	 * before its listen() (kcompat_listener_mark()), keeps the entry it
	 * has: one congestion state per port */
	if (bpf_map_update_elem(kc->listeners_fd, &ls->key, &v, BPF_NOEXIST) && errno != EEXIST)
		return -errno;
	return 0;
}

void kcompat_listener_prepare(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	if (!listener_register(kc, fd, ls))
		(void)mark(kc, fd);
}

int kcompat_listener_mark(struct kcompat *kc, int fd)
{
	struct kcompat_lsn ls;
	int rc;

	if (!kc)
		return 0;
	rc = listener_register(kc, fd, &ls);
	if (!rc)
		rc = mark(kc, fd);
	return rc;
}

void kcompat_listener_started(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	if (!kc || !ls->key.port)
		return;
	/* the program ran at listen(): it also sees this listener's SYNs */
	ls->active = peer_of(kc, fd) != KC_PEER_UNKNOWN;
	if (!ls->active)
		kcompat_listener_forget(kc, ls);
}

/* The connections in the accept queue of listener @fd: TCP_INFO of a
 * listener reports sk_ack_backlog in tcpi_unacked (net/ipv4/tcp.c
 * tcp_get_info()); 0 if unknown. */
static uint32_t accept_queue_len(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) ? 0 : ti.tcpi_unacked;
}

void kcompat_listener_adopt(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	bool premarked;
	int one = 1;

	if (listener_register(kc, fd, ls)) {
		kcompat_listener_forget(kc, ls);
		return;
	}
	/* marked before its listen() (kcompat_listener_mark()), or adopted
	 * before: the program gave it the option callbacks, and marking it
	 * again would clear KC_SOCK_SEEN. Else the program saw no listen() of
	 * ours: its setsockopt hook gives the listener what
	 * on_connect_or_listen() gives one at listen() */
	premarked = peer_of(kc, fd) != KC_PEER_UNKNOWN;
	if (!premarked)
		(void)mark(kc, fd);
	if (premarked ||
	    (kc->can_adopt && !setsockopt(fd, IPPROTO_TCP, KC_SOCKOPT_ADOPT, &one, sizeof(one))))
		/* queued before this listener was registered: counted in
		 * usmc_estab before taken[] was read (premarked: the port had
		 * its entry), or not at all; each asks the socket's storage
		 * (read after registering: an upper bound) */
		atomic_init(&ls->uncounted, accept_queue_len(fd));
	kcompat_listener_started(kc, fd, ls);
}

void kcompat_listener_set_congested(struct kcompat *kc, struct kcompat_lsn *ls, bool congested)
{
	struct kc_listen_val v;

	/* called by the accept thread and the handshake workers: only the
	 * thread that flips the cached value writes the map */
	if (!kc || !ls->active || atomic_exchange(&ls->congested, congested) == congested)
		return;
	/* read-modify-write of the flag only; the counters are the program's
	 * and may move in between (a lost increment is a statistic) */
	if (bpf_map_lookup_elem(kc->listeners_fd, &ls->key, &v))
		return;
	v.congested = congested;
	(void)bpf_map_update_elem(kc->listeners_fd, &ls->key, &v, BPF_EXIST);
}

void kcompat_listener_set_storm(struct kcompat *kc, struct kcompat_lsn *ls, int64_t until_ns)
{
	struct kc_listen_val v;
	int64_t last;

	if (!kc || !ls->active)
		return;
	last = atomic_load(&ls->storm_until_ns);
	/* one writer per step: the one that moves the cached value on */
	if (until_ns < last + KC_STORM_STEP_NS ||
	    !atomic_compare_exchange_strong(&ls->storm_until_ns, &last, until_ns))
		return;
	if (bpf_map_lookup_elem(kc->listeners_fd, &ls->key, &v))
		return;
	v.storm_until_ns = (__u64)until_ns;
	(void)bpf_map_update_elem(kc->listeners_fd, &ls->key, &v, BPF_EXIST);
}

int kcompat_listener_counters(struct kcompat *kc, const struct kcompat_lsn *ls,
			      struct kc_listen_val *out)
{
	if (!kc || !ls->key.port)
		return -ENOENT;
	return bpf_map_lookup_elem(kc->listeners_fd, &ls->key, out) ? -errno : 0;
}

void kcompat_listener_forget(struct kcompat *kc, struct kcompat_lsn *ls)
{
	/* a borrowed program's entry is the process tree's: pre-fork workers
	 * share it, and one that ends must not take it from the others (it
	 * outlives them: without a marked listener no SYN-ACK reads it) */
	if (kc && ls->key.port && !kc->borrowed)
		(void)bpf_map_delete_elem(kc->listeners_fd, &ls->key);
	memset(ls, 0, sizeof(*ls));
}

static const enum kc_peer peer_of_kind[KC_ESTAB_KINDS] = {
	[KC_ESTAB_PLAIN] = KC_PEER_NOSMC,
	[KC_ESTAB_SMC] = KC_PEER_SMC,
	[KC_ESTAB_CONGESTED] = KC_PEER_CONGESTED,
};

/* The kind whose sockets peer_of_kind[] says are @p's. */
static enum kc_estab_kind kind_of_peer(enum kc_peer p)
{
	for (int k = 0; k < KC_ESTAB_KINDS; k++)
		if (peer_of_kind[k] == p)
			return (enum kc_estab_kind)k;
	return KC_ESTAB_PLAIN; /* unreachable: kcompat_server_peer() maps to one */
}

/* The kind of an accepted socket from the mapped counts, or -1. */
static int estab_kind(struct kcompat *kc, struct kcompat_lsn *ls)
{
	uint64_t est[KC_ESTAB_KINDS], taken[KC_ESTAB_KINDS];

	if (!kc->estab)
		return -1;
	for (int k = 0; k < KC_ESTAB_KINDS; k++) {
		/* the program counted this socket before accept() could take
		 * the socket's lock (kcompat_abi.h usmc_estab), so it is in */
		est[k] = __atomic_load_n(&kc->estab[ls->slot].n[k], __ATOMIC_RELAXED);
		taken[k] = atomic_load_explicit(&ls->taken[k], memory_order_relaxed);
	}
	return kc_estab_deduce(est, taken);
}

/* One of the sockets queued when an adopted listener was registered? The
 * first ones accepted are: the queue is taken in order. */
static bool take_uncounted(struct kcompat_lsn *ls)
{
	unsigned int n = atomic_load_explicit(&ls->uncounted, memory_order_relaxed);

	while (n && !atomic_compare_exchange_weak(&ls->uncounted, &n, n - 1))
		;
	return n != 0;
}

enum kc_peer kcompat_server_peer(struct kcompat *kc, struct kcompat_lsn *ls, int fd)
{
	enum kc_peer p;
	int kind;

	if (!kc || !ls->active)
		return KC_PEER_UNKNOWN;
	if (take_uncounted(ls)) {
		/* established before this listener was registered: the
		 * socket's storage answers, and taken[] stays as it is, as more
		 * taken than counted would hide a pending socket */
		atomic_fetch_add_explicit(&ls->lookups, 1, memory_order_relaxed);
		p = peer_of(kc, fd);
		/* a socket our program never saw: the parent's (which marked
		 * the socket before its listen()) may have answered its SYN */
		if (p == KC_PEER_UNKNOWN && kc->parent_socks_fd >= 0)
			p = peer_in(kc->parent_socks_fd, fd);
		return p == KC_PEER_UNKNOWN ? KC_PEER_NOSMC : p;
	}
	kind = estab_kind(kc, ls);
	if (kind >= 0) {
		p = peer_of_kind[kind];
	} else {
		atomic_fetch_add_explicit(&ls->lookups, 1, memory_order_relaxed);
		p = peer_of(kc, fd);
		/* the program gives an accepted socket storage only when its
		 * SYN had the option: no storage means the peer is plain TCP */
		if (p == KC_PEER_UNKNOWN)
			p = KC_PEER_NOSMC;
		kind = kind_of_peer(p);
	}
	atomic_fetch_add_explicit(&ls->taken[kind], 1, memory_order_relaxed);
	return p;
}

#else /* !USMC_HAVE_BPF: built without libbpf or clang */

uint32_t kcompat_mark_client(struct kcompat *kc, int fd)
{
	return 0;
}

void kcompat_client_forget(struct kcompat *kc, uint32_t *ticket)
{
	*ticket = 0;
}

enum kc_peer kcompat_client_peer(struct kcompat *kc, int fd, uint32_t *ticket)
{
	return KC_PEER_UNKNOWN;
}

void kcompat_listener_prepare(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	memset(ls, 0, sizeof(*ls));
}

void kcompat_listener_adopt(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	memset(ls, 0, sizeof(*ls));
}

int kcompat_listener_mark(struct kcompat *kc, int fd)
{
	return 0;
}

void kcompat_listener_started(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
}

void kcompat_listener_set_congested(struct kcompat *kc, struct kcompat_lsn *ls, bool congested)
{
}

void kcompat_listener_set_storm(struct kcompat *kc, struct kcompat_lsn *ls, int64_t until_ns)
{
}

int kcompat_listener_counters(struct kcompat *kc, const struct kcompat_lsn *ls,
			      struct kc_listen_val *out)
{
	return -ENOENT;
}

void kcompat_listener_forget(struct kcompat *kc, struct kcompat_lsn *ls)
{
}

enum kc_peer kcompat_server_peer(struct kcompat *kc, struct kcompat_lsn *ls, int fd)
{
	return KC_PEER_UNKNOWN;
}

#endif /* USMC_HAVE_BPF */
