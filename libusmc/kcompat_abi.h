/* SPDX-License-Identifier: MIT */
/*
 * What the kernel-compat BPF program (bpf/smc_synopt.bpf.c) and libusmc
 * (kcompat.c) share: the SMC TCP option, the map layouts and their flags.
 * Included by both the BPF object (clang -target bpf) and the library, so
 * only fixed-size kernel types are used.
 */
#ifndef USMC_KCOMPAT_ABI_H
#define USMC_KCOMPAT_ABI_H

#include <linux/types.h>

/*
 * The SMC capability option: experimental kind 254, length 6, 4-byte magic
 * "SMCR" in EBCDIC (Linux: TCPOPT_SMC_MAGIC in include/net/tcp.h, written by
 * smc_options_write() in net/ipv4/tcp_output.c, parsed by
 * smc_parse_options() in net/ipv4/tcp_input.c). Linux pads it with two NOPs in
 * front; a BPF program can only write the option itself, so the kernel pads
 * after it instead. Receivers skip NOPs anywhere, so both forms parse alike.
 */
#define KC_OPT_KIND 254
#define KC_OPT_LEN  6
/*
 * The same word as the CLC eyecatcher CLC_EYECATCHER_SMCR (wire/clc.h), but
 * kept here: this header is compiled by clang -target bpf, which has no libc
 * and must not pull the codecs in. kcompat.c asserts that the two agree.
 */
#define KC_OPT_MAGIC 0xE2D4C3D9u

/* Per-socket flags (BPF_MAP_TYPE_SK_STORAGE "usmc_socks"). */
#define KC_SOCK_USMC	  (1u << 0) /* a usmc socket: set by libusmc before connect/listen */
#define KC_SOCK_SEEN	  (1u << 1) /* the program ran for it (connect or listen) */
#define KC_SOCK_PEER_SMC  (1u << 2) /* the peer signalled SMC and we did too */
#define KC_SOCK_CONGESTED (1u << 3) /* the peer signalled SMC; we did not: congested */

/* Values of usmc_flows: what our SYN-ACK said to an SMC SYN. */
#define KC_FLOW_ECHOED	   1
#define KC_FLOW_SUPPRESSED 2

struct kc_sock {
	__u32 flags;
	__u32 slot; /* a client's entry in usmc_peers, + 1; 0: none */
	__u32 gen;  /* what that entry's holder expects in it; never 0 */
	__u32 pad;
};

/*
 * usmc_peers (BPF_MAP_TYPE_ARRAY, BPF_F_MMAPABLE): what a connecting
 * client's SYN-ACK said, written by the program when the connection is
 * established, (gen << KC_PEER_GEN_SHIFT) | its usmc_socks flags, and read
 * by libusmc from its mapping of the array: no bpf() call per connection.
 * A slot belongs to one connecting socket at a time; gen tells a value
 * written for this holder from one left by a previous one.
 *
 * The values are 8 bytes because that is the mapping's stride whatever
 * their size: an array's elements are 8-byte aligned (kernel/bpf/
 * arraymap.c, elem_size = round_up(value_size, 8)). With 4-byte values
 * slot i sits at byte 8 i, not 4 i, and reading it as a __u32[] mixes
 * slots up (a first version did, reverted in c1e0481).
 */
#define KC_PEER_SLOTS	   8192
#define KC_PEER_GEN_SHIFT  32
#define KC_PEER_FLAGS_MASK 0xffffffffu

/*
 * A usmc listener, found from its SYN-ACKs: those run on a request socket,
 * which has no socket storage of its own and no way to the listener's, so
 * listeners are looked up by network namespace and local port instead.
 */
struct kc_listen_key {
	__u64 netns_cookie;
	__u32 port; /* host byte order */
	__u32 pad;
};

struct kc_listen_val {
	__u32 congested; /* written by libusmc: SYN-ACKs go out without the option */
	__u32 pad;
	__u64 echoed;	  /* SYN-ACKs that carried the option */
	__u64 suppressed; /* SYNs with the option answered without it (congested) */
	__u64 plain;	  /* SYNs without the option */
	/* written by libusmc: SYN-ACKs go out without the option until this
	 * CLOCK_MONOTONIC time (bpf_ktime_get_ns()): a storm (listen.c
	 * listen_admit_smcr()), which so ends without another write */
	__u64 storm_until_ns;
};

/*
 * A connection between its SYN-ACK (with the option) and the ACK that
 * creates the accepted socket. The client's ISN + 1 tells apart
 * connections of one listener port without needing the addresses (which a
 * request socket of an IPv6 listener does not hold for IPv4 clients).
 */
struct kc_flow_key {
	__u64 netns_cookie;
	__u32 ack_seq; /* client ISN + 1, network byte order */
	__u16 lport;   /* network byte order */
	__u16 rport;   /* network byte order */
};

/* The option as written on the wire (and as bpf_load_hdr_opt() searches
 * it: kind, then a kind-length of 6 that means a 4-byte magic). */
static inline void kc_opt_fill(__u8 opt[KC_OPT_LEN])
{
	opt[0] = KC_OPT_KIND;
	opt[1] = KC_OPT_LEN;
	opt[2] = (KC_OPT_MAGIC >> 24) & 0xff;
	opt[3] = (KC_OPT_MAGIC >> 16) & 0xff;
	opt[4] = (KC_OPT_MAGIC >> 8) & 0xff;
	opt[5] = KC_OPT_MAGIC & 0xff;
}

/* Flow key from our SYN-ACK's TCP header (fields in network byte order). */
static inline void kc_flow_from_synack(struct kc_flow_key *k, __u64 netns_cookie, __u16 source,
				       __u16 dest, __u32 ack_seq)
{
	k->netns_cookie = netns_cookie;
	k->ack_seq = ack_seq;
	k->lport = source;
	k->rport = dest;
}

/* The same key from the client's ACK that completes the handshake. */
static inline void kc_flow_from_ack(struct kc_flow_key *k, __u64 netns_cookie, __u16 source,
				    __u16 dest, __u32 seq)
{
	k->netns_cookie = netns_cookie;
	k->ack_seq = seq;
	k->lport = dest;
	k->rport = source;
}

/*
 * usmc_estab (BPF_MAP_TYPE_ARRAY, BPF_F_MMAPABLE): how many sockets each
 * listener's handshakes established, by kind, counted by the program at
 * PASSIVE_ESTABLISHED_CB; libusmc maps it read-only. A listener's entry is
 * kc_listen_slot() of its key; listeners whose keys share a slot share the
 * counts, which only makes them ask with bpf() more often (kcompat.c
 * kc_estab_deduce()).
 */
enum kc_estab_kind {
	KC_ESTAB_PLAIN,	    /* no storage: the SYN had no option (or a cookie) */
	KC_ESTAB_SMC,	    /* KC_SOCK_PEER_SMC */
	KC_ESTAB_CONGESTED, /* KC_SOCK_CONGESTED */
	KC_ESTAB_KINDS
};

struct kc_lsn_estab {
	__u64 n[KC_ESTAB_KINDS];
};

#define KC_LSN_SLOTS 1024 /* a power of two */

static inline __u32 kc_listen_slot(__u64 netns_cookie, __u32 port)
{
	__u64 h = (netns_cookie ^ (netns_cookie >> 31) ^ port) * 0x9E3779B97F4A7C15ull;

	return (__u32)(h >> 32) & (KC_LSN_SLOTS - 1);
}

/*
 * setsockopt(fd, SOL_TCP, KC_SOCKOPT_ADOPT, &one, sizeof(int)) on a
 * listening socket marked KC_SOCK_USMC: the program's cgroup/setsockopt
 * hook gives it the option callbacks that its listen() did not (it was
 * listening before libusmc had it) and sets KC_SOCK_SEEN; the kernel's
 * setsockopt() is not called. No TCP option has this number ("USMC"), so
 * without the hook the kernel answers ENOPROTOOPT.
 */
#define KC_SOCKOPT_ADOPT 0x55534d43

#define KC_MAX_LISTENERS 1024
#define KC_MAX_PENDING	 65536 /* SYN-ACKs awaiting their ACK; LRU beyond */

#endif
