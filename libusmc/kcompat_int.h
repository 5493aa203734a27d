/* SPDX-License-Identifier: MIT */
/*
 * The state of kernel-compatible mode, shared by its two files only:
 * kcompat.c loads the BPF program (or borrows a parent's) and owns it,
 * kcompat_sock.c marks sockets and reads what the program recorded of
 * them (docs/kernel-compat.md).
 */
#ifndef USMC_KCOMPAT_INT_H
#define USMC_KCOMPAT_INT_H

#include <limits.h>
#include <sys/types.h>

#include "kcompat.h"
#include "treiber.h"

#ifdef USMC_HAVE_BPF

struct bpf_object;
struct bpf_link;

/* The maps a child of fork() borrows (borrow_parent()), by index. */
enum { KC_MAP_SOCKS, KC_MAP_LISTENERS, KC_MAP_ESTAB, KC_MAPS_SHARED };

struct kcompat {
	struct bpf_object *obj;
	struct bpf_link *link;
	struct bpf_link *adopt_link; /* NULL: adopted listeners stay probed */
	int socks_fd;		     /* usmc_socks: per-socket flags, keyed by fd */
	int listeners_fd;	     /* usmc_listeners: per-port congestion + counters */
	char cgroup[PATH_MAX];	     /* where the program is attached (set once) */
	pid_t pid;		     /* the process that loaded it */
	bool can_adopt;		     /* the setsockopt hook is attached */
	/* a child of fork() using its parent's program (borrow_parent()): obj
	 * and the links are the parent's, socks_fd and listeners_fd duplicates,
	 * link_fd holds the program attached */
	bool borrowed;
	int link_fd;
	uint32_t ids[KC_MAPS_SHARED]; /* the maps' IDs, which a child checks */
	/* a child of fork() that loaded its own program: its parent's
	 * usmc_socks, if the parent had one (-1: none), which tells what the
	 * parent's program answered to a listener's connections queued before
	 * this process registered the port (kcompat_server_peer()) */
	int parent_socks_fd;

	/* usmc_peers, mapped read-only (NULL: not mappable, every client
	 * asks with bpf()); a connecting client holds one slot, taken from
	 * free_slots, until it has read it */
	const uint64_t *peers;
	size_t peers_len;
	const struct kc_lsn_estab *estab; /* usmc_estab, mapped read-only, or NULL */
	size_t estab_len;
	struct treiber_stack free_slots;
	_Atomic uint32_t slot_next[KC_PEER_SLOTS]; /* free_slots' links */
	uint32_t slot_gen[KC_PEER_SLOTS];	   /* each written by its slot's holder */
};

#else /* !USMC_HAVE_BPF: built without libbpf or clang */

struct kcompat {
	int unused;
};

#endif /* USMC_HAVE_BPF */
#endif
