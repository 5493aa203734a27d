/* SPDX-License-Identifier: MIT */
/*
 * libusmc - a userspace SMC-R (RFC 7609) protocol stack.
 *
 * A connection starts as TCP. When both ends can, the CLC handshake moves
 * its data onto RDMA (SMC-R); otherwise it stays on the same TCP socket
 * ("fallback") and usmc_conn_info() says why. The API is the same either way.
 *
 * Conventions:
 *  - Every function returning int or ssize_t returns a negative errno value
 *    (or one of the documented USMC_E* codes) on failure; usmc_strerror()
 *    gives its text. Nothing sets errno for the caller to read.
 *  - Objects are opaque. A context owns no global state: several contexts
 *    may live in one process and are independent.
 *  - Thread safety: a context and a listener may be used from any thread. A
 *    connection may be used by one reader and one writer thread at a time
 *    (like a socket); close it only when no other thread uses it.
 *  - fork(): objects belong to the process that created the context. The
 *    library's threads (accept thread, handshake workers, SMC-R progress)
 *    do not exist in a child, so a child gets USMC_EFORKED at once from
 *    usmc_accept(), usmc_listener_fd(), usmc_listen(), usmc_listen_fd(),
 *    usmc_connect() and usmc_conn_create() on an inherited context or
 *    listener, instead of blocking forever; usmc_listener_close() and
 *    usmc_ctx_destroy() return USMC_EFORKED and touch nothing (the parent's
 *    listener keeps working; the library's descriptors are close-on-exec).
 *    In the child, create a new context. An inherited connection may be
 *    closed there with usmc_close()/usmc_abort(), which closes only the
 *    child's copy of its socket (the parent's connection is unaffected);
 *    its data calls work in TCP mode (a plain socket) and must not be used
 *    in SMC-R mode (the RDMA state is the parent's).
 *  - Environment variables (read once, by usmc_ctx_create) give process-wide
 *    defaults for the options below; the functions override them per
 *    context, listener or connection.
 */
#ifndef USMC_USMC_H
#define USMC_USMC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <usmc/version.h> /* USMC_VERSION_MAJOR/MINOR/PATCH/STRING */

#ifdef __cplusplus
extern "C" {
#endif

struct usmc_ctx;
struct usmc_listener;
struct usmc_conn;

/** usmc_version() - the library version, "MAJOR.MINOR.PATCH": the
 * USMC_VERSION_STRING of the library that runs (usmc/version.h). */
const char *usmc_version(void);

/* ------------------------------------------------------------------------
 * Sized structs
 *
 * struct usmc_conn_info, struct usmc_ctx_stats and struct
 * usmc_listener_stats may gain fields at their end in later versions. The
 * *_sized() functions take the caller's sizeof: they fill the first
 * min(size, sizeof as the library knows it) bytes and zero the rest of
 * @size. So a program built against an older header gets the fields it
 * knows, and one built against a newer header than the library finds the
 * fields the library does not know zeroed. usmc_conn_info(),
 * usmc_ctx_stats() and usmc_listener_stats() are inline wrappers that pass
 * sizeof(*p); the 0.1 symbols of those names stay in the library for
 * binaries built against 0.1.
 * ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------ */

/* libusmc's own error codes (negative, below -4095 so they never collide
 * with a negated errno). */
#define USMC_EPROTO_CLC (-5001) /* malformed or unexpected CLC message from the peer */
/* Reserved for an SMC-R-only mode (no fallback): this version never returns
 * them, since every connection that cannot use SMC-R falls back to TCP and
 * records why (usmc_conn_info()). usmc_strerror() names them. */
#define USMC_EPEERDECL	 (-5002) /* peer declined where no fallback is possible */
#define USMC_ENODEV_SMCR (-5003) /* operation needs an SMC-R device; none usable */
/* A context or listener used in a child of fork() (see "fork()" below). */
#define USMC_EFORKED (-5004)

/**
 * usmc_strerror() - text for a negative return value of this API.
 * @err: a negative errno value or a USMC_E* code.
 * Returns a static string; never NULL.
 */
const char *usmc_strerror(int err);

/* ------------------------------------------------------------------------
 * Fallback reasons
 *
 * The SMC_CLC_DECL_* codes Linux carries in a CLC DECLINE, plus libusmc's
 * own local reasons (0x0a......, never sent on the wire).
 * ------------------------------------------------------------------------ */
#define USMC_REASON_NONE	 0x00000000u /* running SMC-R, no fallback */
#define USMC_REASON_MEM		 0x01010000u /* insufficient memory */
#define USMC_REASON_TIMEOUT_CL	 0x02010000u /* timeout waiting for LLC CONFIRM_LINK */
#define USMC_REASON_PEERNOSMC	 0x03010000u /* peer did not indicate SMC */
#define USMC_REASON_NOSMCDEV	 0x03030000u /* no SMC device (R or D) */
#define USMC_REASON_NOSMCRDEV	 0x03030002u /* no SMC-R device */
#define USMC_REASON_NOUEID	 0x03030008u /* no common UEID */
#define USMC_REASON_SYNCERR	 0x04000000u /* link group out of sync */
#define USMC_REASON_PEERDECL	 0x05000000u /* peer declined */
#define USMC_REASON_INTERR	 0x09990000u /* internal error */
#define USMC_REASON_DISABLED	 0x0a000001u /* SMC-R disabled by option */
#define USMC_REASON_HS_CONGESTED 0x0a000002u /* our handshake queue was congested */
#define USMC_REASON_SERVER_BUSY	 0x0a000003u /* the server's handshake queue was congested */
#define USMC_REASON_HS_TIMEOUT	 0x0a000004u /* CLC message not received in time */
#define USMC_REASON_SRC_BUSY	 0x0a000005u /* its address held its share of our handshakes */
/* Any other SMC_CLC_DECL_* value may appear too; usmc_reason_name() knows them. */

/** usmc_reason_name() - short name ("NOSMCRDEV"), or "UNKNOWN". */
const char *usmc_reason_name(uint32_t reason);
/** usmc_reason_text() - one-line description, or "unknown reason". */
const char *usmc_reason_text(uint32_t reason);

/* ------------------------------------------------------------------------
 * Options
 *
 * Integer options with a process-wide default from the environment, set
 * per context (inherited by its listeners and connections), per listener
 * (inherited by the connections it accepts) or per connection (between
 * usmc_conn_create() and usmc_conn_connect(), or after usmc_accept()). Out-of-range values give
 * -EINVAL; an invalid environment value makes usmc_ctx_create() fail with -EINVAL.
 * ------------------------------------------------------------------------ */
enum usmc_opt {
	/* Try SMC-R at all (0/1). Env USMC_SMC, default 1. */
	USMC_OPT_SMC = 0,
	/* Milliseconds to wait for the peer's first bytes when telling SMC
	 * peers from plain TCP ones (see docs/tcp-path.md). Env USMC_PROBE_MS,
	 * default 100, range 1..60000. */
	USMC_OPT_PROBE_MS,
	/* Milliseconds to wait for each CLC message. Env USMC_CLC_TIMEOUT_MS,
	 * default 6000 (Linux CLC_WAIT_TIME), range 100..600000. */
	USMC_OPT_CLC_TIMEOUT_MS,
	/* Listener: decide TCP at once while the handshake queue is
	 * congested (0/1). Env USMC_AUTO_FALLBACK, default 0. */
	USMC_OPT_AUTO_FALLBACK,
	/* Listener: handshake worker threads. Env USMC_HS_THREADS, default 2,
	 * range 1..64. */
	USMC_OPT_HS_THREADS,
	/* Listener: handshake queue depth at which it counts as congested.
	 * Env USMC_HS_CONGESTION, default 0 = 2 x USMC_OPT_HS_THREADS,
	 * range 0..65536. */
	USMC_OPT_HS_CONGESTION,
	/* Bytes of the receive buffer (RMB) asked for a connection, rounded up
	 * to a size class. Env USMC_RMB_SIZE, default 65536, range 16384..2^29. */
	USMC_OPT_RMB_SIZE,
	/* Bytes of the send buffer. Env USMC_SNDBUF_SIZE, default 65536. */
	USMC_OPT_SNDBUF_SIZE,
	/* Milliseconds usmc_close() waits for unsent data. Env USMC_LINGER_MS,
	 * default 2000 (Linux SMC_MAX_STREAM_WAIT_TIMEOUT). */
	USMC_OPT_LINGER_MS,
	/* Poll completion queues instead of sleeping on them (0/1): lower
	 * latency, one core busy. Env USMC_BUSY_POLL, default 0. */
	USMC_OPT_BUSY_POLL,
	/* Context: milliseconds without receiving anything on an SMC-R link
	 * before it sends an LLC TEST_LINK (unanswered within 2 s: the link
	 * fails; its connections move to another link if one is up, else
	 * the link group and its connections end). 0 = never. Env USMC_TESTLINK_MS,
	 * default 30000 (Linux net.smc.smcr_testlink_time), range 0..3600000. */
	USMC_OPT_TESTLINK_MS,
	/* Context: milliseconds an SMC-R link group without connections is
	 * kept for reuse before it is freed (DELETE_LINK). Env USMC_LGR_IDLE_MS,
	 * default 600000 (Linux SMC_LGR_FREE_DELAY_SERV), range 100..86400000. */
	USMC_OPT_LGR_IDLE_MS,
	/* Listener: take connections from the kernel with an io_uring
	 * multishot accept where the kernel supports it (0/1; 0 = accept4()
	 * from epoll; use 0 under valgrind, which hangs while the accept
	 * thread sleeps in io_uring_enter()). Read by usmc_listen().
	 * Env USMC_ACCEPT_URING, default 1. */
	USMC_OPT_ACCEPT_URING,
	/* Listener: seconds the kernel holds a new connection until its
	 * first bytes arrive (TCP_DEFER_ACCEPT), so that the probe finds them
	 * at once: fewer wake-ups per connection under a storm, but a client
	 * that waits for the server to speak first is accepted only after
	 * about this long. 0 = off. Read by usmc_listen(); not with
	 * USMC_LISTEN_TCP_ONLY. Env USMC_DEFER_ACCEPT, default 0, range 0..3600. */
	USMC_OPT_DEFER_ACCEPT,
	/* Listener: the accept thread runs as SCHED_BATCH (0/1): it never
	 * preempts the application's threads when a connection wakes it. With
	 * an idle CPU it runs at once; when every CPU is busy it runs at the
	 * next scheduling point (at most one scheduler slice later) and takes
	 * all connections that arrived meanwhile in one round, at a third of
	 * the CPU per connection (docs/listener.md). Read by usmc_listen().
	 * Env USMC_ACCEPT_BATCH, default 1. */
	USMC_OPT_ACCEPT_BATCH,
	/* SMC-R: milliseconds a connection closed by usmc_close() waits for
	 * the peer's close before it is aborted and reclaimed (its descriptors,
	 * table slot and send buffer; its RMB once the peer provably cannot
	 * write it), as TCP bounds FIN_WAIT2. Read by usmc_close(). Env
	 * USMC_CLOSE_WAIT_MS, default 60000 (Linux net.ipv4.tcp_fin_timeout),
	 * range 100..3600000. */
	USMC_OPT_CLOSE_WAIT_MS,
	/* SMC-R buffers per pool of a link group: at most this many RMBs and
	 * this many send buffers, i.e. connections per link group (a tuning
	 * and test knob; when a pool is full the handshake declines with
	 * USMC_REASON_MEM and the connection runs TCP). Read when a link
	 * group is created, from the options of the connection whose
	 * handshake creates it (for a server: the listener's). Env
	 * USMC_MAX_BUFS, default 255 (Linux SMC_RMBS_PER_LGR_MAX), range 1..255. */
	USMC_OPT_MAX_BUFS,
	/* SMC-R: link groups a context keeps at most, handshaking ones
	 * included (each costs a thread, a QP and pinned buffers). Incoming
	 * first contacts still in their handshake hold at most half of it,
	 * and leave its last eighth (at least 1) to the context's own
	 * connects. At the cap the link group idle the longest is freed for
	 * the new one (usmc_ctx_stats().lgrs_reclaimed); with none idle a new
	 * peer is declined (MEM) and falls back to TCP. Read at each
	 * handshake. Env USMC_MAX_LGRS, default 128, range 1..4096. */
	USMC_OPT_MAX_LGRS,
	/* SMC-R: link groups a context keeps at most with one peer IPv4
	 * address (a peer can claim any number of system IDs), of which its
	 * incoming first contacts still in their handshake hold at most half;
	 * at the cap its link group idle the longest is freed for the new
	 * one. Env USMC_MAX_LGRS_PER_PEER, default 8, range 1..4096. */
	USMC_OPT_MAX_LGRS_PER_PEER,
	/* Context: publish the context's state to the usmc-stat tool (0/1)
	 * through an abstract UNIX socket "@usmc-stat/<pid>/<n>" served by
	 * one thread per context, readable only by the same uid or root
	 * (docs/usmc-stat.md). Read by usmc_ctx_create(); usmc_ctx_setopt()
	 * starts or stops it. Env USMC_STAT, default 1. */
	USMC_OPT_STAT,
	/* Listener: milliseconds a client's whole SMC-R handshake may take,
	 * from its accept to its final mode, however slowly it sends (each
	 * CLC message also within USMC_OPT_CLC_TIMEOUT_MS). Past it the
	 * connection is dropped and counted in hs_failed. A client that has
	 * not sent the whole of a CLC message holds no handshake worker: the
	 * accept thread waits for its bytes. Env USMC_HS_TIMEOUT_MS, default
	 * 10000, range 100..600000. */
	USMC_OPT_HS_TIMEOUT_MS,
	/* Context: a thread that waits for the answer to what its connection
	 * sent polls the completion queue for a while before it sleeps (0/1).
	 * 1: it spins up to a bound scaled to how fast this machine wakes a
	 * thread (docs/smcr.md "Run to completion"), fewer wake-ups and a
	 * shorter round trip for a CPU kept busy meanwhile. 0: every wait
	 * sleeps at once, for machines whose CPUs are all taken. Read when a
	 * link group is created. Env USMC_SPIN, default 1. */
	USMC_OPT_SPIN,
	/* Context: bytes of SMC-R buffers (RMBs and send buffers) the context
	 * keeps registered with its devices at most, over all its link groups.
	 * Registered memory is pinned (counted against RLIMIT_MEMLOCK) and a
	 * link group keeps its free buffers registered while it lingers
	 * (USMC_OPT_LGR_IDLE_MS): a new buffer past the budget first
	 * deregisters free buffers of any link group, and only if that makes
	 * no room is the handshake declined (USMC_REASON_MEM; so is one the
	 * kernel's own limit refuses, after the same shrink). 0 = the soft
	 * RLIMIT_MEMLOCK when usmc_ctx_create() or usmc_ctx_setopt() runs, or
	 * no cap if it is unlimited or the process has CAP_IPC_LOCK (the
	 * kernel then pins without limit); past half of that limit in use,
	 * new buffers are the smallest (16 KiB), so that an unprivileged
	 * process's 8 MiB holds about 130 connections, not 62; -1 = no cap. Lowering it frees
	 * free buffers at once (docs/buffers.md); the bytes pinned now:
	 * usmc_ctx_stats().pinned_bytes. Env USMC_REG_MEM_MAX (not read by a
	 * privileged process), default 0, range -1..LONG_MAX. */
	USMC_OPT_REG_MEM_MAX,
	/* Listener (0/1): in kernel-compatible mode, and for a listener
	 * without SMC, usmc_accept() takes the connections whose TCP handshake
	 * decided TCP (the client sent no SMC option, or the listener was
	 * congested) from the kernel itself, in the caller's thread, as
	 * accept(2) would: no hop through the accept thread
	 * (docs/listener.md "Plain TCP"). 0 = every connection through the
	 * accept thread. Read by usmc_listen(). Env USMC_ACCEPT_DIRECT,
	 * default 1. */
	USMC_OPT_ACCEPT_DIRECT,
	/* SMC-R: links a link group may hold (RFC 7609 "link groups"; Linux
	 * SMC_LINKS_PER_LGR_MAX). 2: after a first contact the server adds a
	 * second link (LLC ADD_LINK, then CONFIRM_LINK on it; docs/smcr.md
	 * "Links") on another RoCE port of each end, or, where one end has
	 * one port, on that port for the other end's second (asymmetric);
	 * connections are spread over both, and move to the other when one
	 * fails; 1: one link per link group, the peer's ADD_LINK rejected.
	 * Advertised as max_links in the CLC v2.1 fields. Read at each
	 * handshake. Env USMC_MAX_LINKS, default 2 (as Linux's
	 * smcr_max_links_per_lgr), range 1..2. Works with libusmc and with
	 * the kernel's SMC-R at the other end. */
	USMC_OPT_MAX_LINKS,
	USMC_OPT_COUNT_ /* not an option */
};

int usmc_ctx_setopt(struct usmc_ctx *ctx, enum usmc_opt opt, long value);
int usmc_ctx_getopt(const struct usmc_ctx *ctx, enum usmc_opt opt, long *value);
int usmc_listener_setopt(struct usmc_listener *l, enum usmc_opt opt, long value);
int usmc_listener_getopt(const struct usmc_listener *l, enum usmc_opt opt, long *value);
int usmc_conn_setopt(struct usmc_conn *c, enum usmc_opt opt, long value);
int usmc_conn_getopt(const struct usmc_conn *c, enum usmc_opt opt, long *value);

/* ------------------------------------------------------------------------
 * Context
 * ------------------------------------------------------------------------ */

/**
 * usmc_ctx_create() - a new context: options from the environment, RDMA
 * devices discovered (none is fine: connections then use TCP).
 * Returns 0 or -EINVAL (bad environment value: usmc_env_check() names
 * it), -ENOMEM, USMC_KERNEL_COMPAT=1's load error.
 */
int usmc_ctx_create(struct usmc_ctx **ctx);

/**
 * usmc_ctx_create_env() - usmc_ctx_create(), with every USMC_* variable
 * read from @env instead of the process's environment: an array of
 * "NAME=VALUE" strings ending with NULL, as environ(7) (NULL: the
 * process's environment). The rule of a privileged process holds as for
 * the environment (usmc(7), SECURITY). @env is read during the call only.
 * For a caller that keeps the settings of its start, e.g. a preload
 * library in a program that clears its environment afterwards.
 */
int usmc_ctx_create_env(struct usmc_ctx **ctx, const char *const *env);

/**
 * usmc_env_check() - check the USMC_* environment variables as
 * usmc_ctx_create() reads them, to say which one made it fail with -EINVAL.
 * Returns 0 if every variable set has a valid value (@msg then ""), else
 * -EINVAL with one line in @msg naming the first bad variable, e.g.
 * "USMC_PROBE_MS=abc: not an integer" (truncated to @len bytes, always
 * terminated when @len > 0; @msg may be NULL when @len is 0). Keeps no state.
 */
int usmc_env_check(char *msg, size_t len);

/** usmc_env_check_env() - usmc_env_check() of the variables in @env, as
 * usmc_ctx_create_env() reads them (@env NULL: the process's environment). */
int usmc_env_check_env(const char *const *env, char *msg, size_t len);

/** usmc_ctx_destroy() - free a context; its listeners and connections must
 * be closed first (returns -EBUSY otherwise, and frees nothing). */
int usmc_ctx_destroy(struct usmc_ctx *ctx);

struct usmc_device_info {
	char name[64];	 /* RDMA device, e.g. "rxe0" */
	uint8_t port;	 /* port number */
	char netdev[16]; /* netdev of the port's RoCE v2 GID, "" if none */
	int gid_index;	 /* IPv4-mapped RoCE v2 GID index, -1 if none */
};

/**
 * usmc_ctx_devices() - the RDMA ports the context found.
 * Fills up to @max entries; returns how many ports exist (may exceed @max).
 */
int usmc_ctx_devices(const struct usmc_ctx *ctx, struct usmc_device_info *devs, int max);

/**
 * usmc_ctx_set_devices() - the RDMA ports this context may use for SMC-R,
 * as a comma-separated list of "device" (every port of it) or
 * "device:port", e.g. "mlx5_0,mlx5_1:2"; NULL or "" lets it use every port
 * (the default, unless env USMC_DEVICES gives a list). A connection whose
 * local address maps to a port not in the list falls back to TCP
 * (USMC_REASON_NOSMCRDEV), and a link group's further links
 * (USMC_OPT_MAX_LINKS) are made only on listed ports. This is the role
 * Linux's pnet table plays for the kernel's SMC-R: it keeps a host to its
 * own devices where one system sees several hosts' (containers sharing
 * RDMA devices, the soft-RoCE test guest). At most 16 entries. Returns 0,
 * or -EINVAL (NULL @ctx, a malformed list: an empty name, a name of 64
 * characters or more, a port not in 1-255). Applies to link groups made
 * afterwards.
 */
int usmc_ctx_set_devices(struct usmc_ctx *ctx, const char *list);

/*
 * Counters of the SMC-R data path: how many completions were polled and
 * what they cost in thread wake-ups and system calls. Per link group in
 * usmc_conn_info().lgr_engine (the connection's link group, shared with
 * the other connections to that peer), summed over every link group the
 * context ever had in usmc_ctx_stats().engine. Deltas around a workload
 * divided by its message count give the cost per message (usmc_bench).
 */
struct usmc_engine_stats {
	uint64_t cqes;		 /* work completions polled */
	uint64_t wakeups;	 /* data-path sleeps that ended: a thread woke */
	uint64_t channel_sleeps; /* of those, sleeps on the completion channel */
	uint64_t spins_ok;	 /* waits that polling the CQ ended before any sleep */
	uint64_t doorbells;	 /* ibv_post_send() calls */
	uint64_t cq_arms;	 /* ibv_req_notify_cq() calls */
	uint64_t ready_ops;	 /* writes and reads of the usmc_conn_fd() descriptor */
	uint64_t syscalls;	 /* system calls of the data path, as the library counts them */
};

struct usmc_ctx_stats {
	uint64_t connects;     /* usmc_connect() that established a connection */
	uint64_t accepts;      /* connections returned by usmc_accept() */
	uint64_t smcr;	       /* connections that run SMC-R */
	uint64_t fallbacks;    /* connections that run TCP */
	uint64_t hs_errors;    /* handshakes that failed (no fallback possible) */
	uint64_t open_conns;   /* connections not yet closed */
	uint64_t lgrs_created; /* SMC-R link groups ever created */
	uint64_t lgrs_open;    /* SMC-R link groups that exist now (idle ones too) */
	/* LLC messages (the link's 44-byte control messages: CONFIRM_LINK,
	 * CONFIRM_RKEY, DELETE_RKEY, TEST_LINK ..., requests and responses)
	 * sent and received over all of this context's link groups; 0 from a
	 * library older than these fields */
	uint64_t llc_sent;
	uint64_t llc_received;
	/* appended after 0.2: the SMC-R engine, all link groups ever */
	struct usmc_engine_stats engine;
	/* appended after engine: idle link groups freed before their time
	 * because a new one needed their place (USMC_OPT_MAX_LGRS,
	 * USMC_OPT_MAX_LGRS_PER_PEER full) */
	uint64_t lgrs_reclaimed;
	/* appended after lgrs_reclaimed: registered (pinned) buffer memory
	 * (USMC_OPT_REG_MEM_MAX) */
	uint64_t pinned_bytes;	 /* bytes of buffers registered now */
	uint64_t pinned_max;	 /* the budget in force, 0: no cap */
	uint64_t pool_shrinks;	 /* free buffers deregistered to make room */
	uint64_t pinned_refused; /* buffer registrations refused for want of room */
	/* appended after pinned_refused: the links of SMC-R link groups (a
	 * link group may hold up to 3 links, one RC QP per RoCE path) */
	uint64_t links_added; /* links that became ACTIVE beyond a link group's first (ADD_LINK) */
	uint64_t link_failures; /* ACTIVE links that went down on an error (not an orderly end) */
	uint64_t failovers;	/* connections moved from a failed link to another */
};

/**
 * usmc_ctx_set_ueid() - the SMC-Rv2 User EID this context offers and
 * accepts (1-32 characters A-Z, 0-9, '.', '-', the first alphanumeric;
 * blank padded on the wire). Both ends need the same one. Default: env
 * USMC_UEID, else "LIBUSMC", so two libusmc processes meet unconfigured.
 * Returns 0 or -EINVAL. Applies to handshakes started afterwards.
 */
int usmc_ctx_set_ueid(struct usmc_ctx *ctx, const char *ueid);

/*
 * Logging. A context reports what an operator wants to know and cannot see
 * in the return values: link groups up and down, DECLINEs sent and
 * received with their reasons, protocol violations by a peer, resource
 * limits hit (listener backlog cap, handshake congestion fallback, buffer
 * pools or connection tables full), kernel-compat attached. Each kind of
 * line is logged once per event and rate-limited per level (10 lines at
 * once, then 10 per second; how many were dropped is appended to the next
 * line of that level). Logging costs nothing measurable while off.
 */
enum usmc_log_level {
	USMC_LOG_ERR = 0,   /* the library lost something it should not have */
	USMC_LOG_WARN = 1,  /* a peer misbehaved, or a limit was hit */
	USMC_LOG_INFO = 2,  /* link groups up/down, DECLINEs, kernel-compat attach */
	USMC_LOG_DEBUG = 3, /* details, e.g. a link group that died before it was up */
};

/*
 * A log sink: @msg is one line without a newline, valid during the call.
 * Called from any of the library's threads (application, accept, handshake
 * worker, link group progress), one call at a time per context (a lock is
 * held across it), possibly while library locks are held: it must return
 * soon and must not call libusmc functions on the same context.
 */
typedef void (*usmc_log_fn)(void *arg, enum usmc_log_level level, const char *msg);

/**
 * usmc_ctx_set_log() - send the context's lines of level @max and more
 * severe to @fn(@arg, ...), replacing the USMC_LOG default; @fn NULL turns
 * logging off. Returns 0, or -EINVAL (no @ctx, @max not a level).
 *
 * Default: env USMC_LOG, read by usmc_ctx_create(), "level[,file]" with
 * level one of off, err (error), warn (warning), info, debug: lines
 * "usmc: <level>: <msg>" to stderr, or appended to file. Unset or "" is
 * off. A malformed value makes usmc_ctx_create() fail with -EINVAL, a
 * file that cannot be opened with its open error (e.g. -ENOENT).
 */
int usmc_ctx_set_log(struct usmc_ctx *ctx, enum usmc_log_level max, usmc_log_fn fn, void *arg);

/**
 * usmc_ctx_stats_sized() - a snapshot of the context's counters into @st,
 * a struct of @size bytes (see "Sized structs" below). Returns 0 or -EINVAL.
 * usmc_ctx_stats() - the same with sizeof(*st), for a struct of this header.
 */
int usmc_ctx_stats_sized(const struct usmc_ctx *ctx, struct usmc_ctx_stats *st, size_t size);
static inline void usmc_ctx_stats(const struct usmc_ctx *ctx, struct usmc_ctx_stats *st)
{
	(void)usmc_ctx_stats_sized(ctx, st, sizeof(*st));
}

/**
 * usmc_ctx_fallback_count() - connections of this context that fell back
 * to TCP for @reason (a USMC_REASON_* / SMC_CLC_DECL_* value).
 */
uint64_t usmc_ctx_fallback_count(const struct usmc_ctx *ctx, uint32_t reason);

/**
 * usmc_ctx_kernel_compat() - 1 if the context runs in kernel-compat mode,
 * 0 if it uses the userspace-only rule; -EINVAL if @ctx is NULL.
 *
 * Kernel-compat mode (docs/kernel-compat.md) makes usmc signal SMC in the
 * TCP handshake as Linux does: a BPF sock_ops program, attached to the
 * process's cgroup v2, puts the SMC TCP option on the SYN of usmc clients
 * and on the SYN-ACK of usmc listeners (only to SYNs that had it, and not
 * while the listener is congested). Linux kernel SMC peers then run CLC
 * with usmc; a peer whose SYN or SYN-ACK lacked the option is TCP at once
 * (reason USMC_REASON_PEERNOSMC): a listener does not probe it, a client
 * does not propose. Without it a usmc listener tells SMC clients by their
 * first bytes, which Linux clients never send (they see no option).
 *
 * Env USMC_KERNEL_COMPAT, read by usmc_ctx_create(): "auto" (default) =
 * on if the program loads and attaches (needs CAP_BPF and CAP_NET_ADMIN,
 * or root, and cgroup v2), else off; "1" = required: usmc_ctx_create()
 * fails with the load error; "0" = off. USMC_KERNEL_COMPAT_CGROUP names the
 * cgroup v2 directory to attach to (default: the process's own cgroup).
 *
 * Scope: the program runs for every TCP connection of every process in
 * that cgroup and below (changing nothing for sockets that are not
 * usmc's). As root outside a service manager the process's cgroup is
 * usually the root cgroup: then it runs for every TCP connection of the
 * host while the context lives. The attach is logged at USMC_LOG_INFO
 * with the cgroup path. Run the application in its own cgroup, set
 * USMC_KERNEL_COMPAT_CGROUP, or set USMC_KERNEL_COMPAT=0 to avoid it.
 */
int usmc_ctx_kernel_compat(const struct usmc_ctx *ctx);

/* ------------------------------------------------------------------------
 * Listener
 * ------------------------------------------------------------------------ */

/* Flags of usmc_listen(). */
#define USMC_LISTEN_AUTO_FALLBACK (1u << 0) /* USMC_OPT_AUTO_FALLBACK = 1 */
#define USMC_LISTEN_NONBLOCK	  (1u << 1) /* usmc_accept() returns -EAGAIN when empty */
#define USMC_LISTEN_REUSEPORT	  (1u << 2) /* SO_REUSEPORT on the TCP listener */
#define USMC_LISTEN_TCP_ONLY	  (1u << 3) /* USMC_OPT_SMC = 0: plain TCP, no probing */

/**
 * usmc_listen() - listen on @addr (IPv4 or IPv6, port 0 picks one).
 * @backlog: cap on connections in the handshake plus connections waiting
 *	in the accept queue (see docs/listener.md); 1..65535.
 * A dedicated thread accepts TCP connections and tells SMC clients from
 * plain TCP clients; completed connections wait for usmc_accept().
 * Returns 0 and sets *@out, or -EINVAL, -EADDRINUSE, -EAFNOSUPPORT, ...
 */
int usmc_listen(struct usmc_ctx *ctx, const struct sockaddr *addr, socklen_t addrlen, int backlog,
		unsigned int flags, struct usmc_listener **out);

/**
 * usmc_listen_fd() - adopt @fd, a TCP socket (AF_INET or AF_INET6,
 * SOCK_STREAM, IPPROTO_TCP) that is already bound and listening, e.g. one
 * passed by systemd socket activation (sd_listen_fds()) or inherited
 * across exec. Works as usmc_listen() from there on.
 * @backlog: the cap of usmc_listen(), 1..65535; 0 = the backlog the socket
 *	was given to listen(2).
 * @flags: as usmc_listen(), except USMC_LISTEN_REUSEPORT (-EINVAL: the
 *	socket is bound already).
 * On success the listener owns @fd: the library sets O_NONBLOCK and
 * FD_CLOEXEC on it (and TCP_DEFER_ACCEPT if USMC_OPT_DEFER_ACCEPT is set),
 * and usmc_listener_close() closes it. On failure @fd stays the caller's
 * (O_NONBLOCK may have been set). In kernel-compat mode the adopted
 * socket's SYN-ACKs carry the SMC option from the call on (Linux 6.12 or
 * later; before, its clients are told apart by their first bytes,
 * docs/tcp-path.md), or from its listen() if usmc_listen_prepare() marked
 * it before; connections completed before either were answered without.
 * Returns 0 and sets *@out, or -EBADF (not a descriptor), -ENOTSOCK (not a
 * socket), -EAFNOSUPPORT (not IPv4/IPv6), -EINVAL (not a listening TCP
 * stream socket, or bad arguments), -ENOMEM, ...
 */
int usmc_listen_fd(struct usmc_ctx *ctx, int fd, int backlog, unsigned int flags,
		   struct usmc_listener **out);

/**
 * usmc_listen_prepare() - before listen(2) of @fd, a bound TCP socket
 * (AF_INET or AF_INET6) that usmc_listen_fd() will adopt later, in this
 * process or in a child of fork() (a pre-fork server's master listens, its
 * workers accept). In kernel-compat mode (usmc_ctx_kernel_compat()) it
 * marks the socket for the library's BPF program, which then gives the
 * SMC option to the SYN-ACKs of SMC SYNs from the socket's listen(2) on,
 * before any listener exists: those clients wait in the kernel's accept
 * queue and run the SMC handshake once usmc_listen_fd() has adopted the
 * socket (on any kernel the program loads on, where usmc_listen_fd() alone
 * needs Linux 6.12). Without it, connections completed before the
 * adoption are plain TCP. A context in the userspace-only rule, or without
 * SMC (USMC_OPT_SMC = 0), does nothing (0). The socket must then be
 * adopted: its SMC clients propose and would be read as data by a plain
 * accept(2). The program keeps the port registered until a listener on it
 * closes in the process that loaded the program, or the program is
 * unloaded (no SYN-ACK reads it once no marked socket listens there).
 * Returns 0, or -EBADF, -ENOTSOCK, -EAFNOSUPPORT, -EINVAL (not a TCP
 * stream socket, not bound, listening already, or @ctx NULL), -E2BIG (the
 * program's table of listeners is full), USMC_EFORKED.
 */
int usmc_listen_prepare(struct usmc_ctx *ctx, int fd);

/**
 * usmc_listener_fd() - a file descriptor that is readable while
 * usmc_accept() has a connection to give (for epoll, libev, io_uring): the
 * accept queue is not empty or, in direct mode (USMC_OPT_ACCEPT_DIRECT:
 * kernel-compatible mode, or a listener without SMC), the kernel's accept
 * queue holds connections and the backlog cap leaves room. In direct mode
 * it is an epoll descriptor, else an eventfd; do not read, close or change
 * it; it lives as long as the listener. A readable descriptor may still
 * give -EAGAIN: another thread took the connection, or it was an SMC
 * client that usmc_accept() handed to the listener's handshake.
 */
int usmc_listener_fd(const struct usmc_listener *l);

/** usmc_listener_addr() - the bound address (useful with port 0). */
int usmc_listener_addr(const struct usmc_listener *l, struct sockaddr_storage *addr,
		       socklen_t *addrlen);

/* Flags of usmc_accept() and usmc_connect(). */
#define USMC_NONBLOCK (1u << 0) /* the connection's send/recv do not block */
/* usmc_connect() / usmc_conn_connect*() only, with USMC_NONBLOCK (ignored
 * without it): usmc_connect_finish() never blocks on the CLC handshake
 * either; drive it with usmc_connect_events() (see there). */
#define USMC_CONNECT_ASYNC (1u << 1)

/**
 * usmc_accept() - take the next established connection: from the accept
 * queue first; when it is empty, in direct mode (see usmc_listener_fd()),
 * from the kernel's accept queue in the caller's thread, as accept(2): a
 * connection whose TCP handshake decided TCP (no SMC option, congestion,
 * SMC off) is returned at once; one that signalled SMC goes to the
 * listener's handshake and comes back through the accept queue.
 * Blocks unless the listener was created with USMC_LISTEN_NONBLOCK
 * (then -EAGAIN). @flags: USMC_NONBLOCK for the new connection.
 */
int usmc_accept(struct usmc_listener *l, unsigned int flags, struct usmc_conn **out);

/* Buckets of the handshake time histogram: bucket 0 counts handshakes
 * under 2 us, bucket i (1..N-2) those in [2^i, 2^(i+1)) us, the last one
 * those of 2^(N-1) us (about 8.4 s) and more. */
#define USMC_HS_HIST_BUCKETS 24

/*
 * Listener counters (docs/listener.md says exactly what each counts).
 * "Handshake" below means the server side of the CLC exchange: from the
 * moment the accept thread took the TCP connection from the kernel to the
 * moment the connection's mode was decided and answered.
 */
struct usmc_listener_stats {
	uint64_t accepted;	       /* TCP connections taken from the kernel */
	uint64_t smcr;		       /* of those, handed out running SMC-R */
	uint64_t fallbacks;	       /* of those, handed out running TCP */
	uint64_t hs_failed;	       /* handshakes that failed; connection dropped */
	uint64_t congestion_fallbacks; /* SMC clients declined at once (auto-fallback) */
	uint64_t backlog_full;	       /* times the accept thread paused at the backlog cap */
	uint32_t in_handshake;	       /* now: being probed or in the CLC handshake */
	uint32_t queued;	       /* now: waiting for usmc_accept() */
	uint32_t hs_queue_depth;       /* now: handshakes waiting for a worker */
	uint32_t hs_queue_high;	       /* high-water mark of hs_queue_depth */
	uint32_t backlog_high;	       /* high-water mark of in_handshake + queued */
	uint32_t accept_stash_high;    /* io_uring: most sockets accepted past the cap */
	uint32_t kernel_queue;	       /* now: connections in the kernel's accept queue */
	uint64_t listen_drops;	       /* kernel: connections this listen socket dropped */
	uint64_t hs_time_hist[USMC_HS_HIST_BUCKETS]; /* CLC handshakes by duration */
	int accept_uring;			     /* 1: io_uring multishot accept; 0: accept4 */
	/* of congestion_fallbacks, those declined while the handshake queue was
	 * below its threshold: a storm's SMC-R admission budget was spent
	 * (docs/listener.md "Admission by cost"); 0 from an older library */
	uint64_t budget_fallbacks;
	/* SMC clients refused because their source address held its share of
	 * the backlog (docs/listener.md "One address"): declined at once
	 * (those are also fallbacks of reason USMC_REASON_SRC_BUSY) or, with
	 * their message incomplete, closed (also in hs_failed); 0 from an
	 * older library */
	uint64_t source_refused;
};

/**
 * usmc_listener_stats_sized() - a snapshot of the listener's counters into
 * @st, a struct of @size bytes ("Sized structs" below). Returns 0 or -EINVAL.
 * usmc_listener_stats() - the same with sizeof(*st).
 */
int usmc_listener_stats_sized(const struct usmc_listener *l, struct usmc_listener_stats *st,
			      size_t size);
static inline void usmc_listener_stats(const struct usmc_listener *l,
				       struct usmc_listener_stats *st)
{
	(void)usmc_listener_stats_sized(l, st, sizeof(*st));
}

/**
 * usmc_listener_fallback_count() - connections this listener handed out
 * running TCP because of @reason (a USMC_REASON_* / SMC_CLC_DECL_* value),
 * e.g. USMC_REASON_HS_CONGESTED for auto-fallback.
 */
uint64_t usmc_listener_fallback_count(const struct usmc_listener *l, uint32_t reason);

/**
 * usmc_listener_close() - stop listening: the accept thread and handshake
 * workers stop, queued connections are closed, the listen socket (also one
 * adopted by usmc_listen_fd()) is closed. No other thread may be
 * inside usmc_accept() on this listener.
 */
int usmc_listener_close(struct usmc_listener *l);

/* ------------------------------------------------------------------------
 * Connections
 * ------------------------------------------------------------------------ */

/**
 * usmc_connect() - connect to @addr; SMC-R if the server and this context
 * can, else TCP. Blocks until the connection runs in its final mode, unless
 * @flags has USMC_NONBLOCK: then it returns 0 at once with *@out set; poll
 * usmc_conn_fd() for writability and call usmc_connect_finish().
 */
int usmc_connect(struct usmc_ctx *ctx, const struct sockaddr *addr, socklen_t addrlen,
		 unsigned int flags, struct usmc_conn **out);

/**
 * usmc_conn_create() / usmc_conn_connect() - the same in two steps, so that
 * per-connection options (usmc_conn_setopt) apply to the handshake:
 * create, set options, connect. usmc_conn_connect() returns as
 * usmc_connect(); after a failure the connection must be closed.
 */
int usmc_conn_create(struct usmc_ctx *ctx, struct usmc_conn **out);
int usmc_conn_connect(struct usmc_conn *c, const struct sockaddr *addr, socklen_t addrlen,
		      unsigned int flags);

/**
 * usmc_conn_connect_fd() - usmc_conn_connect() on @fd, a TCP socket of the
 * caller (AF_INET or AF_INET6 as @addr, SOCK_STREAM, IPPROTO_TCP, not
 * connected) instead of a new one: a socket already bound (bind(2) to a
 * local address or port) or with options set before the connect
 * (SO_RCVBUF, IP_TOS, SO_MARK, TCP_NODELAY, ...). Returns as
 * usmc_conn_connect(). The checks made before it takes @fd fail with
 * -EINVAL (bad arguments; a listening, non-TCP or connected socket),
 * -EBADF, -ENOTSOCK or -EAFNOSUPPORT (@fd is not of @addr's family), and
 * @fd then stays the caller's. Past them the connection owns @fd whatever
 * the call returns: the library sets O_NONBLOCK and FD_CLOEXEC on it, and
 * usmc_close() closes it. A connect that fails with the socket's own
 * errno (-ECONNREFUSED, -EADDRNOTAVAIL, ...) leaves the connection to be
 * closed, as usmc_conn_connect().
 */
int usmc_conn_connect_fd(struct usmc_conn *c, int fd, const struct sockaddr *addr,
			 socklen_t addrlen, unsigned int flags);

/**
 * usmc_connect_finish() - complete a non-blocking connect: 0 when the
 * connection is established in its final mode, -EINPROGRESS if not yet
 * (poll again), or the negative errno of the failed connect (the
 * connection must then be closed).
 *
 * Without USMC_CONNECT_ASYNC, once the TCP connect is done this call runs
 * the CLC handshake, which blocks (bounded by USMC_OPT_CLC_TIMEOUT_MS per
 * message) when SMC-R is attempted.
 *
 * With USMC_CONNECT_ASYNC (and USMC_NONBLOCK) it never waits for the
 * server: each call takes the handshake as far as it can go without
 * waiting and returns -EINPROGRESS until it has ended. The first call
 * that finds TCP connected sends the PROPOSAL (or, with SMC-R off, no
 * device or a kernel-compat server without SMC, decides TCP at once);
 * later calls read the server's ACCEPT or DECLINE as it arrives (what came
 * of a partial message is kept) and, once it is whole, finish the
 * handshake: a DECLINE means TCP with the server's reason
 * (usmc_conn_info() peer_declined); an ACCEPT means reusing our link
 * group to that server (a CONFIRM_RKEY round trip over RDMA when the
 * buffer is new to the peer) or creating one (first contact: the CONFIRM,
 * QP setup and the LLC CONFIRM_LINK exchange; once per link group). The
 * LLC answers come over RDMA, not on the socket: while one is awaited,
 * usmc_connect_events() says 0 events and a few milliseconds, and each
 * call only looks (the server's CONFIRM_LINK up to 4 s, then its DECLINE
 * up to 4 s more, POLLIN; a CONFIRM_RKEY's answer up to 2 s after the
 * link group's LLC flow is free). A reuse ACCEPT that names a link
 * group another thread's first contact with the same server is still
 * setting up returns -EINPROGRESS, never waits, and is retried by the
 * next call (for up to 2 s, then the connection falls back to TCP,
 * SYNCERR). Fallback reasons and errors are those of the blocking
 * handshake. The server's answer is due USMC_OPT_CLC_TIMEOUT_MS after the
 * PROPOSAL: the first call past that deadline fails the connection with
 * -ETIMEDOUT, as the blocking handshake does with a silent server. Once
 * the handshake failed every later call returns the same error (nothing
 * is sent again).
 */
int usmc_connect_finish(struct usmc_conn *c);

/**
 * usmc_connect_events() - what to wait for before the next
 * usmc_connect_finish() of a connection still connecting: POLLOUT (the TCP
 * connect) or POLLIN (the server's CLC answer) on usmc_conn_fd(c), within
 * *@timeout_ms milliseconds (-1: no limit of its own; 0: call
 * usmc_connect_finish() now). At *@timeout_ms usmc_connect_finish() is due
 * whether or not the descriptor became ready: it then applies the
 * handshake's deadline (USMC_CONNECT_ASYNC: USMC_OPT_CLC_TIMEOUT_MS for
 * the server's answer, -ETIMEDOUT past it). 0 events with a positive
 * timeout: nothing to poll for, call again after it (a link group being
 * set up by another thread). 0 events with 0: the connect has ended, or
 * must be finished now. Returns the events (a poll(2) mask), or -EINVAL.
 * Without USMC_CONNECT_ASYNC it says POLLOUT, -1 until the connect ends.
 * @timeout_ms may be NULL.
 */
int usmc_connect_events(struct usmc_conn *c, int *timeout_ms);

/**
 * usmc_conn_fd() - the descriptor to poll: readable when usmc_recv() would
 * not block (data, EOF or an error), writable when usmc_send() would not
 * block. In TCP mode it is the TCP socket; in SMC-R mode a descriptor the
 * library keeps exactly in step with the connection (docs/smcr.md). It is
 * stable from the moment the connection is established: after a
 * non-blocking connect, take it again once usmc_connect_finish() returned 0.
 * Do not read, write or close it yourself. In SMC-R mode the first call
 * creates it: a connection whose user only blocks in usmc_recv/usmc_send
 * pays nothing for readiness. Returns the descriptor, -EINVAL (NULL), or
 * the negative errno of creating it (-EMFILE...).
 */
int usmc_conn_fd(const struct usmc_conn *c);

/**
 * usmc_send() / usmc_sendv() - send bytes; returns how many were taken
 * (> 0), -EAGAIN if non-blocking and no room, -EPIPE after usmc_shutdown()
 * (SHUT_WR), -EPIPE in SMC-R mode once the peer closed the connection (not
 * a shutdown(SHUT_WR): it reads nothing more; a TCP peer answers such data
 * with a reset), -ECONNRESET or -EPIPE after a peer reset (below), or
 * another negative errno (-ETIMEDOUT, -EPROTO, ...) when the connection
 * failed. Never raises SIGPIPE.
 * After a peer reset (usmc_abort(), close with unread data, the peer
 * process died) both modes behave as TCP: the reset is reported once, as
 * -ECONNRESET, to the first usmc_send() or usmc_recv() that sees it; later
 * sends return -EPIPE. (Later receives return 0 in TCP mode and
 * -ECONNRESET again in SMC-R mode.)
 * @flags: 0 or an OR of
 *	MSG_DONTWAIT	do not block, even on a blocking connection;
 *	MSG_NOSIGNAL	accepted for portability: every send already behaves so;
 *	MSG_MORE	more data follows: passed to the kernel in TCP mode (as
 *			TCP_CORK for this call); in SMC-R mode a hint that this
 *			version ignores (each call's data leaves at once).
 * Any other flag gives -EINVAL.
 */
ssize_t usmc_send(struct usmc_conn *c, const void *buf, size_t len, int flags);
ssize_t usmc_sendv(struct usmc_conn *c, const struct iovec *iov, int iovcnt, int flags);

/**
 * usmc_recv() / usmc_recvv() - receive bytes; returns how many (> 0), 0 at
 * the end of the stream, -EAGAIN if non-blocking and nothing is there.
 * @flags: 0, MSG_DONTWAIT, MSG_WAITALL, MSG_PEEK.
 */
ssize_t usmc_recv(struct usmc_conn *c, void *buf, size_t len, int flags);
ssize_t usmc_recvv(struct usmc_conn *c, const struct iovec *iov, int iovcnt, int flags);

/** usmc_shutdown() - SHUT_RD, SHUT_WR or SHUT_RDWR, as shutdown(2). */
int usmc_shutdown(struct usmc_conn *c, int how);

/**
 * usmc_close() - close the connection: unsent data gets up to
 * USMC_OPT_LINGER_MS to leave, then the connection and its buffers are
 * freed. @c is invalid afterwards.
 */
int usmc_close(struct usmc_conn *c);

/** usmc_abort() - close at once, discarding unsent data (TCP: RST). */
int usmc_abort(struct usmc_conn *c);

/**
 * usmc_conn_setsockopt() / usmc_conn_getsockopt() - setsockopt(2) and
 * getsockopt(2) on the connection's TCP socket, in both modes, e.g.
 * TCP_NODELAY, SO_KEEPALIVE, TCP_KEEPIDLE, TCP_USER_TIMEOUT. In SMC-R mode
 * the TCP socket stays open beside the RDMA link (it carried the CLC
 * handshake and tells the library when the peer dies), so keepalive and
 * timeouts still matter; TCP_NODELAY, TCP_CORK and the like have no effect
 * on the SMC-R data path. Answered by the library in SMC-R mode:
 *	SO_RCVBUF / SO_SNDBUF	get: the bytes of the RMB / send buffer the
 *				connection uses; set: -EOPNOTSUPP (the sizes are
 *				fixed by the handshake: USMC_OPT_RMB_SIZE and
 *				USMC_OPT_SNDBUF_SIZE before connecting);
 *	SO_ERROR		the SMC-R connection's error (positive errno,
 *				not cleared by reading) if it has one, else the
 *				TCP socket's.
 * In TCP mode everything is the kernel's answer. Available once the TCP
 * socket exists (from usmc_conn_connect(), usmc_connect() or usmc_accept());
 * before that -ENOTCONN. Returns 0 or the negative errno of the call.
 */
int usmc_conn_setsockopt(struct usmc_conn *c, int level, int optname, const void *val,
			 socklen_t len);
int usmc_conn_getsockopt(const struct usmc_conn *c, int level, int optname, void *val,
			 socklen_t *len);

enum usmc_mode {
	USMC_MODE_CONNECTING = 0, /* handshake not finished */
	USMC_MODE_SMCR = 1,	  /* data moves over RDMA */
	USMC_MODE_TCP = 2,	  /* data moves over the TCP socket (fallback) */
};

struct usmc_conn_info {
	enum usmc_mode mode;
	uint32_t reason;   /* fallback reason, USMC_REASON_NONE when SMC-R */
	int peer_declined; /* 1 if @reason came from the peer's DECLINE */
	int is_server;	   /* 1 if accepted, 0 if connected */
	struct sockaddr_storage local;
	/* the peer's, kept from the connect or the SMC handshake: after a reset too */
	struct sockaddr_storage peer;
	uint32_t lgr_id;     /* link group id when SMC-R, else 0 */
	uint8_t smc_version; /* 2 for SMC-Rv2 when SMC-R, else 0 */
	uint64_t bytes_sent;
	uint64_t bytes_received;
	/* appended after 0.2: the engine counters of its link group (SMC-R), else 0 */
	struct usmc_engine_stats lgr_engine;
	/* appended after lgr_engine: where the stream's bytes stand (SMC-R), else 0 */
	uint64_t snd_unsent;	 /* in the send buffer, not yet written into the peer's RMB */
	uint64_t snd_unconsumed; /* in the peer's RMB, not yet consumed there, as its last
				    consumer cursor says */
	uint64_t rcv_unread;	 /* in our RMB, not yet read by the application */
	uint32_t flow_flags;	 /* USMC_FLOW_* */
};

/* usmc_conn_info.flow_flags: why an SMC-R stream is not moving. */
#define USMC_FLOW_WINDOW_FULL  0x1 /* the peer's RMB is full: we wait for its consumer cursor */
#define USMC_FLOW_SQ_WAIT      0x2 /* data waits for room in the link's send queue */
#define USMC_FLOW_PEER_BLOCKED 0x4 /* the peer said it waits for room in our RMB */
#define USMC_FLOW_EOF_HELD     0x8 /* the peer's end of stream waits for data it still holds */

/**
 * usmc_conn_info_sized() - mode, fallback reason, addresses, link group,
 * byte counts into @info, a struct of @size bytes ("Sized structs" below).
 * Returns 0 or -EINVAL (NULL pointer, @size 0).
 * usmc_conn_info() - the same with sizeof(*info).
 */
int usmc_conn_info_sized(const struct usmc_conn *c, struct usmc_conn_info *info, size_t size);
static inline int usmc_conn_info(const struct usmc_conn *c, struct usmc_conn_info *info)
{
	return usmc_conn_info_sized(c, info, sizeof(*info));
}

/** usmc_mode_name() - "SMC-R", "TCP" or "CONNECTING". */
const char *usmc_mode_name(enum usmc_mode mode);

/* ------------------------------------------------------------------------
 * Events: one descriptor per context for an event loop (docs/events.md)
 *
 * Watch connections and listeners with usmc_conn_watch() and
 * usmc_listener_watch(); put usmc_ctx_event_fd() in your epoll set, libev
 * loop or poll() array; when it is readable, usmc_ctx_poll() says what is
 * ready. Level-triggered, as epoll's default: a connection is reported by
 * every usmc_ctx_poll() while it is in a state it was watched for, so read
 * until -EAGAIN or not, as you like. A watched SMC-R connection needs no
 * readiness descriptor (no usmc_conn_fd(), no socketpair); a TCP-mode one
 * is watched through its socket. usmc_conn_fd() works as before beside it.
 *
 * Threads: usmc_ctx_poll() may run in several threads at once, and a watch
 * may change or end (usmc_close()) while another thread polls; an event
 * names a connection or listener as it was watched when the poll took it,
 * so a loop that closes connections in one thread and polls in another must
 * not use an event of a connection it closed meanwhile (as with epoll and
 * a closed descriptor). usmc_conn_watch() and usmc_close() of one connection
 * are its owner's calls, not made at once from two threads.
 * ------------------------------------------------------------------------ */

/*
 * usmc_event.events and the @events of the watch calls:
 * READ	  usmc_recv() returns at once: data, EOF or an error;
 * WRITE  usmc_send() returns at once: room, or an error;
 * HUP	  nothing more will arrive: the peer closed or shut down its write
 *	  side, a reset, an error (epoll's EPOLLRDHUP: only when asked for);
 * ERR	  the connection failed or was reset, the next call returns the
 *	  error (reported unasked, as epoll's EPOLLERR);
 * ACCEPT a listener's: usmc_accept() has a connection;
 * FD	  alone, for usmc_conn_watch() only: the connection's readiness stays
 *	  on its own descriptor (usmc_conn_fd()) and usmc_ctx_poll() runs its
 *	  completions, instead of the library's thread. For a loop that waits
 *	  on connections' descriptors and on usmc_ctx_event_fd() in one wait
 *	  (epoll) and calls usmc_ctx_poll() when the latter is readable, as the
 *	  preload does; usmc_ctx_poll() reports no event for such a watch. A
 *	  TCP-mode connection's descriptor is its socket: nothing changes.
 */
#define USMC_EV_READ   (1u << 0)
#define USMC_EV_WRITE  (1u << 1)
#define USMC_EV_HUP    (1u << 2)
#define USMC_EV_ERR    (1u << 3)
#define USMC_EV_ACCEPT (1u << 4)
#define USMC_EV_FD     (1u << 5)

struct usmc_event {
	struct usmc_conn *conn;		/* the connection, or NULL */
	struct usmc_listener *listener; /* the listener, or NULL */
	void *user;			/* as given to the watch call */
	uint32_t events;		/* USMC_EV_* */
};

/**
 * usmc_conn_watch() - report @c in usmc_ctx_poll() of its context while it
 * is in one of the states @events asks for (USMC_EV_READ, USMC_EV_WRITE,
 * USMC_EV_HUP; ERR comes unasked and may be given), with @user in the event.
 * Again on a watched connection: its new events and @user (to or from
 * USMC_EV_FD: the watch starts again). @events 0:
 * no longer watched (usmc_close() and usmc_abort() do it too). A
 * connection being connected (USMC_NONBLOCK) is finished first
 * (usmc_connect_finish()): until it is, its error (-EINPROGRESS) is
 * returned. Returns 0, -EINVAL (NULL, an unknown or USMC_EV_ACCEPT bit,
 * USMC_EV_FD with another),
 * -ENOTCONN (no socket yet), USMC_EFORKED, or the negative errno of
 * epoll_ctl() or of making the context's event set (-ENOMEM, -EMFILE).
 */
int usmc_conn_watch(struct usmc_conn *c, uint32_t events, void *user);

/**
 * usmc_listener_watch() - report @l with USMC_EV_ACCEPT in usmc_ctx_poll()
 * of its context while usmc_accept() would find a connection; @events is
 * USMC_EV_ACCEPT, or 0 for no longer (usmc_listener_close() does it too).
 * Returns 0, -EINVAL, USMC_EFORKED, or a negative errno as
 * usmc_conn_watch().
 */
int usmc_listener_watch(struct usmc_listener *l, uint32_t events, void *user);

/**
 * usmc_ctx_event_fd() - the context's event descriptor: readable whenever
 * usmc_ctx_poll() has something to report (level-triggered; it may also be
 * readable for a moment after the state went away, and usmc_ctx_poll()
 * then returns 0). Poll it, do not read it. The same descriptor for the
 * context's life, made at the first event call. Returns it, -EINVAL,
 * USMC_EFORKED, or the negative errno of making it.
 */
int usmc_ctx_event_fd(struct usmc_ctx *ctx);

/**
 * usmc_ctx_poll() - wait at most @timeout_ms (0: not at all, -1: until
 * something is ready) for watched connections and listeners of @ctx that
 * are ready, and fill up to @max events into @ev; those that did not fit
 * come first in the next call. Returns how many (> 0), 0 when the time
 * passed with nothing ready, -EINVAL (NULL, @max < 1, @timeout_ms < -1),
 * -EINTR (a signal), USMC_EFORKED, or another negative errno.
 * The completions of the watched SMC-R connections' link groups are run
 * here, in the caller's thread, when no other thread runs them (one blocked
 * in usmc_recv(), the library's own for an LLC exchange); the context's
 * descriptor is readable when a completion comes. A loop that does not call
 * it leaves them waiting (the library's thread drains them at least every
 * 250 ms, and answers the peer's LLC requests itself).
 */
int usmc_ctx_poll(struct usmc_ctx *ctx, struct usmc_event *ev, int max, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
