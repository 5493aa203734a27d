/* SPDX-License-Identifier: MIT */
/*
 * Kernel-compat mode (docs/kernel-compat.md): a cgroup BPF sock_ops program
 * (bpf/smc_synopt.bpf.c) puts the SMC TCP option on the SYN of usmc clients
 * and on the SYN-ACK of usmc listeners, as Linux does, so that kernel SMC
 * peers run CLC with usmc; and it tells usmc whether the peer's SYN or
 * SYN-ACK had the option. Without it (not privileged, no BPF, disabled)
 * usmc keeps the userspace-only rule: the listener probes the first bytes.
 *
 * Environment USMC_KERNEL_COMPAT (read by usmc_ctx_create):
 *   auto (default)  use it if the program loads and attaches, else not
 *   1               required: usmc_ctx_create() fails if it cannot load
 *   0               never
 * USMC_KERNEL_COMPAT_CGROUP: cgroup v2 directory to attach to (default:
 * the process's own cgroup).
 */
#ifndef USMC_KCOMPAT_H
#define USMC_KCOMPAT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "kcompat_abi.h"

struct kcompat;
struct usmc_logger;

enum kc_mode {
	KC_MODE_OFF = 0,
	KC_MODE_ON = 1,	  /* required */
	KC_MODE_AUTO = 2, /* if it loads */
};

/* What the TCP handshake said about the peer. */
enum kc_peer {
	KC_PEER_UNKNOWN = 0, /* not in kernel-compat mode for this socket */
	KC_PEER_NOSMC,	     /* the peer's SYN / SYN-ACK had no SMC option */
	KC_PEER_SMC,	     /* both SYN and SYN-ACK had it: the peer runs CLC */
	KC_PEER_CONGESTED,   /* the SYN had it, our SYN-ACK not: listener congested */
};

/* Parse a USMC_KERNEL_COMPAT value (NULL = unset = auto); -EINVAL if bad. */
int kcompat_mode_parse(const char *s, enum kc_mode *out);

/*
 * kcompat_open() - load and attach the program as USMC_KERNEL_COMPAT in
 * @env says (env.h; NULL: the process's environment).
 * Returns 0 with *@out NULL when kernel-compat mode is off (disabled, or
 * auto and it did not load), 0 with *@out set when on, or a negative errno
 * when it is required and failed (or the environment value is bad).
 * Logs the attach, with the cgroup, to @log at INFO (a failure in auto
 * mode at DEBUG).
 */
int kcompat_open(struct kcompat **out, struct usmc_logger *log, const char *const *env);

/* The cgroup v2 directory the program is attached to (its reach: every TCP
 * socket of every process in it), or NULL when kernel-compat is off. */
const char *kcompat_cgroup(const struct kcompat *kc);
void kcompat_close(struct kcompat *kc);

/* ---- client --------------------------------------------------------- */

/*
 * Mark socket @fd (before connect()) so that its SYN carries the option.
 * Returns a ticket for kcompat_client_peer(): a slot of the mapped
 * usmc_peers array, where the program writes what the SYN-ACK said (0:
 * none, the answer then costs a bpf() lookup).
 */
uint32_t kcompat_mark_client(struct kcompat *kc, int fd);

/*
 * After the handshake: did the server's SYN-ACK carry the option? Call it
 * once the connect's end was read with getsockopt(TCP_INFO), which takes
 * the socket's lock after the program ran (conn.c tcp_connect_done()).
 * Consumes *@ticket (sets it to 0).
 */
enum kc_peer kcompat_client_peer(struct kcompat *kc, int fd, uint32_t *ticket);

/* A connect that ended before kcompat_client_peer(): its slot back. */
void kcompat_client_forget(struct kcompat *kc, uint32_t *ticket);

/*
 * The client will not propose: if the server expects CLC (@peer, what the
 * SYN-ACK said, is KC_PEER_SMC), tell it with a DECLINE of @reason on
 * socket @fd, as a Linux client does, so that it falls back at once
 * instead of waiting for a PROPOSAL.
 */
int kcompat_client_decline(enum kc_peer peer, int fd, uint32_t reason);

/* ---- listener ------------------------------------------------------- */

/*
 * kcompat_take_decline() - a client that signalled SMC (@peer is
 * KC_PEER_SMC) may answer with a DECLINE instead of a PROPOSAL, as a Linux
 * client without a usable device does. Without blocking: if the first
 * bytes on socket @fd, which the caller peeked into @buf (@n: what the
 * peek returned, <= 0 for nothing, EOF or an error), are a complete
 * DECLINE, consume it, set *@reason to its diagnosis and return 1;
 * -EAGAIN while they may still become one; 0 if they are not one (or the
 * client did not signal SMC); a WIRE_E_* code if malformed.
 */
int kcompat_take_decline(enum kc_peer peer, int fd, uint8_t *buf, ssize_t n, uint32_t *reason);

/* A listener's registration; written before its threads start, then only
 * congested and storm_until_ns change (atomically, from the accept thread
 * and workers), and the accept thread's taken and lookups. */
struct kcompat_lsn {
	bool active;			/* fixed: the program runs for this listener */
	atomic_bool congested;		/* last value written to the map */
	_Atomic int64_t storm_until_ns; /* last value written to the map */
	struct kc_listen_key key;	/* fixed */
	uint32_t slot;			/* fixed: kc_listen_slot() of key */
	/* accepted sockets by kind (enum kc_estab_kind), against the
	 * program's usmc_estab counts; and how many needed a bpf() lookup */
	atomic_uint_least64_t taken[KC_ESTAB_KINDS];
	atomic_uint_least64_t lookups;
	/* an adopted listener's connections queued before its port was
	 * registered, which the program did not count: each asks bpf() */
	atomic_uint uncounted;
};

/* Between bind() and listen(): mark @fd and register its port. */
void kcompat_listener_prepare(struct kcompat *kc, int fd, struct kcompat_lsn *ls);

/* After listen(): ls->active says whether the program saw the listener. */
void kcompat_listener_started(struct kcompat *kc, int fd, struct kcompat_lsn *ls);

/*
 * Before listen() of a socket that libusmc will adopt later
 * (usmc_listen_prepare(): the preload's listen(), a pre-fork master): mark
 * @fd and register its port, so that the program gives the listener its option callbacks at
 * listen() and SYN-ACKs carry the option before a listener exists; those
 * connections wait in the accept queue. No per-listener state: the
 * registration stays until a listener of this program on the port is
 * forgotten, or the program is unloaded. 0 (also when kernel-compat is
 * off: @kc NULL), or a negative errno (not bound, the map is full).
 */
int kcompat_listener_mark(struct kcompat *kc, int fd);

/*
 * A socket that was listening before libusmc had it (usmc_listen_fd():
 * inherited, or the preload's): register its port; if it was marked
 * before its listen() (kcompat_listener_mark(), by this process or the
 * parent whose program it borrows) it has its option callbacks already,
 * else mark it and have the program's setsockopt hook give it the
 * callbacks its listen() did not (KC_SOCKOPT_ADOPT). Either way the
 * connections in its accept queue then are answered from their sockets'
 * storage (uncounted). ls->active as after kcompat_listener_started():
 * inactive where it was not marked before listen() and the hook is missing
 * or the kernel cannot set the flags (before Linux 6.12): its clients are
 * then probed.
 */
void kcompat_listener_adopt(struct kcompat *kc, int fd, struct kcompat_lsn *ls);

/* Congested listeners answer SMC SYNs without the option (SMC_LIMIT_HS). */
void kcompat_listener_set_congested(struct kcompat *kc, struct kcompat_lsn *ls, bool congested);

/* ... and so do listeners in a storm, until @until_ns (CLOCK_MONOTONIC):
 * the map is written only when that moves on by KC_STORM_STEP_NS or more,
 * so a storm costs a few bpf() calls a second, and ends on time by itself. */
#define KC_STORM_STEP_NS (250 * 1000 * 1000LL)
void kcompat_listener_set_storm(struct kcompat *kc, struct kcompat_lsn *ls, int64_t until_ns);

/* The program's counters for this listener; -ENOENT if not registered. */
int kcompat_listener_counters(struct kcompat *kc, const struct kcompat_lsn *ls,
			      struct kc_listen_val *out);

void kcompat_listener_forget(struct kcompat *kc, struct kcompat_lsn *ls);

/*
 * An accepted socket of an active listener: did the handshake signal SMC?
 * From the program's counts when they leave one answer (no system call),
 * else from the socket's storage (a bpf() lookup). Called once per
 * accepted socket, right after accept() returned it.
 */
enum kc_peer kcompat_server_peer(struct kcompat *kc, struct kcompat_lsn *ls, int fd);

/* ---- pure helpers (unit-tested) ------------------------------------- */

/* The listener key of a bound socket's address (port from @addr). */
int kc_listen_key_make(uint64_t netns_cookie, const struct sockaddr *addr, struct kc_listen_key *k);

/* What a socket's storage flags (or none: @found false) mean for its peer. */
enum kc_peer kc_peer_from_flags(bool found, uint32_t flags);

/*
 * The kind of a socket just accepted, from @established (the program's
 * counts, read after accept() returned it: they include it) and @taken
 * (those this listener accepted before it, by kind): the only kind with
 * sockets established and not yet taken, or -1 when more than one has
 * some (the answer is the socket's storage then).
 */
int kc_estab_deduce(const uint64_t established[KC_ESTAB_KINDS],
		    const uint64_t taken[KC_ESTAB_KINDS]);

#endif
