// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Kernel-compat mode: the SMC TCP option on usmc sockets (what Linux writes
 * in net/ipv4/tcp_output.c smc_options_write() and reads in
 * net/ipv4/tcp_input.c smc_parse_options()), so that Linux kernel SMC peers
 * start CLC with usmc.
 *
 *  client: its SYN carries the option; the SYN-ACK tells whether the
 *          server answered with it (KC_SOCK_PEER_SMC on the socket).
 *  server: its SYN-ACK carries the option only if the SYN had it and the
 *          listener is not congested (the kernel's SMC_LIMIT_HS) nor in a
 *          storm (libusmc's admission by cost, docs/listener.md); the
 *          accepted socket gets KC_SOCK_PEER_SMC when it did.
 *
 * Only sockets libusmc marked (KC_SOCK_USMC in usmc_socks, set through the
 * map by socket fd before connect()/listen()) are touched: every other
 * socket of the cgroup costs one storage lookup at connect/listen/
 * established time and nothing per packet.
 */
#include <linux/bpf.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "../kcompat_abi.h"

#define TCPHDR_SYN	0x02
#define TCPHDR_ACK	0x10
#define SOL_TCP		6
#define TCP_MAX_HDR_LEN 60
#define ENOENT		2 /* bpf_load_hdr_opt(): no SYN to search */
#define IPPROTO_TCP	6
/* bpf_{get,set}sockopt() of a socket's sock_ops callback flags (Linux
 * 6.12, include/uapi/linux/bpf.h; newer than the UAPI headers we build
 * with) */
#define KC_TCP_BPF_SOCK_OPS_CB_FLAGS 1008

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kc_sock);
} usmc_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KC_MAX_LISTENERS);
	__type(key, struct kc_listen_key);
	__type(value, struct kc_listen_val);
} usmc_listeners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KC_MAX_PENDING);
	__type(key, struct kc_flow_key);
	__type(value, __u32);
} usmc_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KC_PEER_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} usmc_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KC_LSN_SLOTS);
	__type(key, __u32);
	__type(value, struct kc_lsn_estab);
} usmc_estab SEC(".maps");

/* Our usmc-marked full socket, or NULL. */
static struct kc_sock *usmc_sock(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct kc_sock *s;

	if (!sk)
		return NULL;
	s = bpf_sk_storage_get(&usmc_socks, sk, NULL, 0);
	return s && (s->flags & KC_SOCK_USMC) ? s : NULL;
}

static struct kc_listen_val *usmc_listener(struct bpf_sock_ops *skops)
{
	struct kc_listen_key k = {
		.netns_cookie = bpf_get_netns_cookie(skops),
		.port = skops->local_port,
	};

	return bpf_map_lookup_elem(&usmc_listeners, &k);
}

static void set_write_cb(struct bpf_sock_ops *skops, int on)
{
	__u32 f = skops->bpf_sock_ops_cb_flags;

	f = on ? f | BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG : f & ~BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG;
	bpf_sock_ops_cb_flags_set(skops, f);
}

/* connect() or listen() of a usmc socket: ask for the option callbacks. */
static void on_connect_or_listen(struct bpf_sock_ops *skops)
{
	struct kc_sock *s = usmc_sock(skops);

	if (!s)
		return;
	s->flags |= KC_SOCK_SEEN;
	set_write_cb(skops, 1);
}

/* Did the SYN (being answered) carry the option? 1, 0, or -1 if the SYN is
 * gone (a SYN-ACK retransmitted by the request timer). */
static int syn_had_option(struct bpf_sock_ops *skops)
{
	__u8 opt[KC_OPT_LEN];
	long rc;

	kc_opt_fill(opt);
	rc = bpf_load_hdr_opt(skops, opt, sizeof(opt), BPF_LOAD_HDR_OPT_TCP_SYN);
	if (rc == -ENOENT)
		return -1;
	return rc > 0;
}

/* The SYN-ACK key: the SYN-ACK's ack_seq is the client's ISN + 1, which is
 * also the sequence number of the ACK that completes the handshake. */
static int synack_flow(struct bpf_sock_ops *skops, struct kc_flow_key *k)
{
	struct tcphdr *th = (void *)(long)skops->skb_data;

	if ((void *)(th + 1) > (void *)(long)skops->skb_data_end)
		return -1;
	kc_flow_from_synack(k, bpf_get_netns_cookie(skops), th->source, th->dest, th->ack_seq);
	return 0;
}

/* The same key from the SYN being answered (length callback: our header is
 * not written yet). */
static int syn_flow(struct bpf_sock_ops *skops, struct kc_flow_key *k)
{
	union {
		struct tcphdr th;
		__u8 raw[TCP_MAX_HDR_LEN]; /* whole header, or -ENOSPC */
	} syn;

	if (bpf_getsockopt(skops, SOL_TCP, TCP_BPF_SYN, &syn, sizeof(syn)) < (int)sizeof(syn.th))
		return -1;
	kc_flow_from_synack(k, bpf_get_netns_cookie(skops), syn.th.dest, syn.th.source,
			    bpf_htonl(bpf_ntohl(syn.th.seq) + 1));
	return 0;
}

/* Answer SMC SYNs without the option: congested, or in a storm. */
static int suppressed(const struct kc_listen_val *l)
{
	return l->congested || bpf_ktime_get_ns() < l->storm_until_ns;
}

/* An SMC SYN answered without the option: the accepted socket learns why. */
static void note_suppressed(struct kc_listen_val *l, struct kc_flow_key *k)
{
	__u32 v = KC_FLOW_SUPPRESSED;

	bpf_map_update_elem(&usmc_flows, k, &v, BPF_ANY);
	__sync_fetch_and_add(&l->suppressed, 1);
}

static void hdr_len(struct bpf_sock_ops *skops)
{
	struct kc_listen_val *l;
	struct kc_flow_key k;
	int had;

	if (!(skops->skb_tcp_flags & TCPHDR_SYN))
		return;
	if (!(skops->skb_tcp_flags & TCPHDR_ACK)) {
		if (usmc_sock(skops)) /* our client's SYN */
			bpf_reserve_hdr_opt(skops, KC_OPT_LEN, 0);
		return;
	}
	l = usmc_listener(skops);
	if (!l || skops->args[0] == BPF_WRITE_HDR_TCP_SYNACK_COOKIE)
		return; /* no state survives a SYN cookie: stay plain TCP */
	had = syn_had_option(skops);
	if (had == 0) {
		__sync_fetch_and_add(&l->plain, 1);
		return;
	}
	if (had > 0 && suppressed(l)) {
		if (!syn_flow(skops, &k))
			note_suppressed(l, &k);
		return;
	}
	/* SMC SYN, not congested; or a retransmission: the write decides */
	bpf_reserve_hdr_opt(skops, KC_OPT_LEN, 0);
}

/* Is the option in the SYN-ACK being written (by an earlier program)? */
static int option_written(struct bpf_sock_ops *skops)
{
	__u8 opt[KC_OPT_LEN];

	kc_opt_fill(opt);
	return bpf_load_hdr_opt(skops, opt, sizeof(opt), 0) > 0;
}

static void write_synack(struct bpf_sock_ops *skops)
{
	__u8 opt[KC_OPT_LEN];
	struct kc_listen_val *l = usmc_listener(skops);
	struct kc_flow_key k;
	__u32 echoed = KC_FLOW_ECHOED, *v;
	int had;

	/* (space may have been reserved by another program of the cgroup) */
	if (!l || skops->args[0] == BPF_WRITE_HDR_TCP_SYNACK_COOKIE || synack_flow(skops, &k))
		return;
	kc_opt_fill(opt);
	had = syn_had_option(skops);
	if (had < 0) {
		/* retransmission: repeat exactly what the first SYN-ACK said */
		v = bpf_map_lookup_elem(&usmc_flows, &k);
		if (v && *v == KC_FLOW_ECHOED)
			bpf_store_hdr_opt(skops, opt, sizeof(opt), 0);
		return;
	}
	if (!had)
		return;
	/* another usmc program of the cgroup wrote it: several processes
	 * share the listener (pre-fork workers, each with its own program),
	 * and its SYN-ACK carries the option whatever ours decides */
	if (option_written(skops))
		goto echoed;
	if (suppressed(l)) { /* became congested since the length callback */
		note_suppressed(l, &k);
		return;
	}
	if (bpf_store_hdr_opt(skops, opt, sizeof(opt), 0))
		return;
echoed:
	bpf_map_update_elem(&usmc_flows, &k, &echoed, BPF_ANY);
	__sync_fetch_and_add(&l->echoed, 1);
}

static void write_hdr(struct bpf_sock_ops *skops)
{
	__u8 opt[KC_OPT_LEN];

	if (!(skops->skb_tcp_flags & TCPHDR_SYN))
		return;
	if (skops->skb_tcp_flags & TCPHDR_ACK) {
		write_synack(skops);
		return;
	}
	kc_opt_fill(opt);
	if (usmc_sock(skops))
		bpf_store_hdr_opt(skops, opt, sizeof(opt), 0);
}

/* A client's flags to its usmc_peers slot, which libusmc reads without a
 * bpf() call: one 64-bit store, under the socket's lock, which the
 * library's getsockopt(TCP_INFO) takes before it reads the slot. */
static void publish_peer(const struct kc_sock *s)
{
	__u32 i = s->slot - 1;
	__u64 *v;

	if (!s->slot)
		return;
	v = bpf_map_lookup_elem(&usmc_peers, &i);
	if (v)
		*v = (__u64)s->gen << KC_PEER_GEN_SHIFT | s->flags;
}

/* Client: the SYN-ACK that completes the handshake is in skb_data. */
static void active_established(struct bpf_sock_ops *skops)
{
	__u8 opt[KC_OPT_LEN];
	struct kc_sock *s = usmc_sock(skops);

	if (!s)
		return;
	kc_opt_fill(opt);
	if (bpf_load_hdr_opt(skops, opt, sizeof(opt), 0) > 0)
		s->flags |= KC_SOCK_PEER_SMC;
	set_write_cb(skops, 0); /* no callbacks for data segments */
	publish_peer(s);
}

/* The accepted socket's storage from its flow entry; what it got. */
static enum kc_estab_kind accepted_kind(struct bpf_sock_ops *skops)
{
	struct tcphdr *th = (void *)(long)skops->skb_data;
	struct kc_flow_key k = {};
	struct bpf_sock *sk = skops->sk;
	enum kc_estab_kind kind;
	struct kc_sock *s;
	__u32 *v, flags;

	if (!sk || (void *)(th + 1) > (void *)(long)skops->skb_data_end)
		return KC_ESTAB_PLAIN;
	kc_flow_from_ack(&k, bpf_get_netns_cookie(skops), th->source, th->dest, th->seq);
	v = bpf_map_lookup_elem(&usmc_flows, &k);
	if (!v)
		return KC_ESTAB_PLAIN; /* the SYN had no option: plain TCP, no storage */
	kind = *v == KC_FLOW_ECHOED ? KC_ESTAB_SMC : KC_ESTAB_CONGESTED;
	flags = KC_SOCK_USMC | KC_SOCK_SEEN;
	flags |= kind == KC_ESTAB_SMC ? KC_SOCK_PEER_SMC : KC_SOCK_CONGESTED;
	bpf_map_delete_elem(&usmc_flows, &k);
	s = bpf_sk_storage_get(&usmc_socks, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!s)
		return KC_ESTAB_PLAIN; /* no storage: libusmc reads plain TCP */
	s->flags = flags;
	return kind;
}

/* Server: the new socket, with the ACK that completes the handshake. Runs
 * before accept() can return it, and counts it, so that the accept thread
 * can often tell its kind without a bpf() lookup (kcompat.c). */
static void passive_established(struct bpf_sock_ops *skops)
{
	__u32 slot = kc_listen_slot(bpf_get_netns_cookie(skops), skops->local_port);
	enum kc_estab_kind kind;
	struct kc_lsn_estab *e;

	if (!usmc_listener(skops))
		return;
	/* inherited from the listener: not wanted on data segments */
	set_write_cb(skops, 0);
	kind = accepted_kind(skops);
	e = bpf_map_lookup_elem(&usmc_estab, &slot);
	if (e && kind < KC_ESTAB_KINDS)
		__sync_fetch_and_add(&e->n[kind], 1);
}

SEC("sockops")
int usmc_smc_synopt(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
	case BPF_SOCK_OPS_TCP_LISTEN_CB:
		on_connect_or_listen(skops);
		break;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		hdr_len(skops);
		break;
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB:
		write_hdr(skops);
		break;
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		active_established(skops);
		break;
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		passive_established(skops);
		break;
	}
	return 1;
}

/*
 * A socket that was listening before libusmc had it (usmc_listen_fd():
 * inherited, or listened to by the program under the preload): its
 * listen() ran no callback that libusmc had marked it for, so its SYN-ACKs
 * have no option callbacks, and only a program running on the listener
 * itself can ask for them (tcp_output.c bpf_skops_hdr_opt_len() tests the
 * listener's flags). libusmc's setsockopt(SOL_TCP, KC_SOCKOPT_ADOPT) on
 * the marked socket runs this hook under the socket's lock
 * (kernel/bpf/cgroup.c __cgroup_bpf_run_filter_setsockopt()), which does
 * here what on_connect_or_listen() does at listen(). Setting the flags
 * needs TCP_BPF_SOCK_OPS_CB_FLAGS in bpf_setsockopt() (Linux 6.12): where
 * it fails, the setsockopt() fails and the listener keeps the
 * userspace-only rule. Any other setsockopt goes on to the kernel.
 */
SEC("cgroup/setsockopt")
int usmc_adopt_listener(struct bpf_sockopt *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	struct kc_sock *s;
	int f = 0;

	if (ctx->level != SOL_TCP || ctx->optname != KC_SOCKOPT_ADOPT)
		return 1;
	if (!sk || sk->protocol != IPPROTO_TCP || sk->state != BPF_TCP_LISTEN)
		return 1; /* the kernel answers ENOPROTOOPT */
	s = bpf_sk_storage_get(&usmc_socks, sk, NULL, 0);
	if (!s || !(s->flags & KC_SOCK_USMC))
		return 1;
	if (bpf_getsockopt(sk, SOL_TCP, KC_TCP_BPF_SOCK_OPS_CB_FLAGS, &f, sizeof(f)))
		return 0; /* EPERM: this kernel cannot */
	f |= BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG;
	if (bpf_setsockopt(sk, SOL_TCP, KC_TCP_BPF_SOCK_OPS_CB_FLAGS, &f, sizeof(f)))
		return 0;
	s->flags |= KC_SOCK_SEEN;
	ctx->optlen = -1; /* done: the kernel's setsockopt() is not called */
	return 1;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
