/* SPDX-License-Identifier: MIT */
/*
 * Per-link-group buffer pools: RMBs (the peer RDMA-WRITEs into them) and send
 * buffers, one free list per size class (net/smc/smc_core.c __smc_buf_create(),
 * smc_compress_bufsize(); docs/buffers.md).
 *
 * A buffer is allocated and registered once, the first time its class has
 * no free buffer, and then stays allocated and registered until the pool
 * is destroyed (or a budget's shrink takes it off the free list); claiming
 * and releasing it afterwards is O(1) and lock-free (a Treiber stack per
 * class, see treiber.h). Only growing a class takes a lock.
 *
 * Pools may share a budget of registered memory (struct bufpool_budget):
 * then a growth that would pass it first deregisters free buffers of the
 * pools that share it, and only then is refused.
 *
 * A buffer may carry one registration per link of its link group
 * (registration slots, BUFPOOL_REGS_MAX, bufpool_reg_add()).
 *
 * Thread safety: bufpool_claim*() and bufpool_release() may be called from
 * any number of threads concurrently. bufpool_create() and bufpool_destroy()
 * may not race with anything on the same pool (see bufpool_destroy()); a
 * shrink of a shared budget may run on any of its pools concurrently with
 * their claims and releases, and so may bufpool_reg_add() and
 * bufpool_reg_del().
 */
#ifndef USMC_BUFPOOL_H
#define USMC_BUFPOOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define SMC_BUF_MIN_SIZE      16384u /* class 0 */
#define SMC_BUF_MIN_SHIFT     14
#define SMC_BUF_CLASS_MAX     15 /* 2^(15 + 14) = 512 MiB, SMCR_RMBE_SIZES */
#define SMC_BUF_CLASSES	      (SMC_BUF_CLASS_MAX + 1)
#define SMC_RMBS_PER_LGR_MAX  255u
#define BUFPOOL_ACCESS_RMB    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
#define BUFPOOL_ACCESS_SNDBUF IBV_ACCESS_LOCAL_WRITE
/*
 * Registrations a buffer may carry: one per link of a link group, each link a
 * QP on its own RoCE device with its own protection domain
 * (SMC_LINKS_PER_LGR_MAX; net/smc/smc_core.h struct smc_buf_desc mr[]).
 */
#define BUFPOOL_REGS_MAX 3

/* smc_compress_bufsize: the smallest class whose buffers hold size bytes. */
uint8_t smc_compress_bufsize(size_t size);
/* smc_uncompress_bufsize: the buffer size of a class, 16 KiB << class. */
size_t smc_uncompress_bufsize(uint8_t class);

enum bufpool_kind {
	BUFPOOL_RMB,	/* registered for local + remote write */
	BUFPOOL_SNDBUF, /* registered for local write only */
};

/* A registration as the hook returns it. */
struct bufpool_mr {
	void *handle; /* hook-private, e.g. the struct ibv_mr * */
	uint32_t lkey;
	uint32_t rkey;
};

/*
 * Registration hook. reg() registers [addr, addr + len) with the given
 * IBV_ACCESS_* flags and fills *mr; it returns 0 or a negative errno. dereg()
 * undoes one successful reg(); it returns 0 or a negative errno. reg() is
 * called with the pool's grow lock held: it must not call back into the pool.
 */
struct bufpool_reg_ops {
	int (*reg)(void *ctx, void *addr, size_t len, unsigned int access, struct bufpool_mr *mr);
	int (*dereg)(void *ctx, struct bufpool_mr *mr);
};

/* The rdma-core hook: ctx is the struct ibv_pd * to register in. */
extern const struct bufpool_reg_ops bufpool_verbs_hooks;

/*
 * One buffer. The pool writes the public fields once, before the buffer is
 * first handed out, and never changes them while the pool lives (apart from
 * the keys, which the holder's bufpool_rekey() changes); the holder of a
 * claimed buffer may read them and use [addr, addr + len) freely. lkey and
 * rkey are registration slot 0's; bufpool_buf_lkey() and bufpool_buf_rkey()
 * read any slot's.
 */
struct bufpool_buf {
	void *addr;		 /* page-aligned; also the IOVA of the MR */
	size_t len;		 /* usable bytes: the class size (or the pool's buf_bytes) */
	uint8_t class;		 /* size class, as sent in CLC ACCEPT/CONFIRM */
	uint32_t lkey;		 /* for local SGEs */
	uint32_t rkey;		 /* RMB: what the peer RDMA-WRITEs with (CONFIRM_RKEY) */
	_Atomic uintptr_t owner; /* free for the holder's use (connection, test tag);
				  * the pool only zeroes it at creation */
	/* RMB: the peer holds this rkey (its CONFIRM_RKEY answered, or sent in
	 * a first contact's CLC). The holder sets it; it stays as it is across
	 * release and claim (a pooled RMB stays known to the peer), and
	 * bufpool_rekey() clears it (a new rkey is unknown to the peer). */
	bool rkey_confirmed;
	/* RMB: the link group's links_made when the peer was last told its
	 * rkeys on every link (a first contact: 0); the holder's, as above */
	unsigned int rkey_links;
	/* private */
	uint32_t index;	      /* slot in its class's slab */
	struct bufpool_mr mr; /* registration slot 0's */
	/* Registration slots 1..: their keys (bufpool_buf_lkey(), 0 while the
	 * slot has none) and the hook's registrations (under the grow lock). */
	struct bufpool_slot_keys {
		_Atomic uint32_t lkey;
		_Atomic uint32_t rkey;
	} slot_keys[BUFPOOL_REGS_MAX - 1];
	struct bufpool_mr slot_mr[BUFPOOL_REGS_MAX - 1];
	uint8_t regs; /* the slots it is registered in, a bit each; under the grow lock */
};

/*
 * The keys of registration slot @slot (0 .. BUFPOOL_REGS_MAX - 1) of a
 * buffer. Slot 0's are the buffer's lkey and rkey. Another slot's may be read
 * by the holder of a claimed buffer at any time without a data race; they are
 * that slot's registration of this buffer once bufpool_regs_active() has
 * shown the slot active, until bufpool_reg_del() of the slot is called: the
 * slot's keys are written before it is published (a release that
 * bufpool_regs_active()'s acquire pairs with), and a buffer grown later has
 * its keys before anyone can claim it. Once bufpool_reg_del() runs they read
 * as the deleted registration's or as 0: reg_del() zeroes them with a release
 * that these loads pair with, so a reader that sees 0 also sees what its
 * caller did before it called reg_del(). An rkey is 0 in a send-buffer pool.
 */
static inline uint32_t bufpool_buf_lkey(const struct bufpool_buf *buf, int slot)
{
	if (!slot)
		return buf->lkey;
	return atomic_load_explicit(&buf->slot_keys[slot - 1].lkey, memory_order_acquire);
}

static inline uint32_t bufpool_buf_rkey(const struct bufpool_buf *buf, int slot)
{
	if (!slot)
		return buf->rkey;
	return atomic_load_explicit(&buf->slot_keys[slot - 1].rkey, memory_order_acquire);
}

struct bufpool;

/*
 * A budget of registered memory that pools share (a context's:
 * USMC_OPT_REG_MEM_MAX). Registered memory is pinned and counted against
 * RLIMIT_MEMLOCK (drivers/infiniband/core/umem.c ib_umem_get()), and a pool
 * keeps its free buffers registered, for ten minutes after a link group's
 * last close (USMC_OPT_LGR_IDLE_MS). So a growth that would take the pools
 * past @max first deregisters free buffers of any pool that shares the
 * budget, largest classes first, and is refused (-ENOMEM) only if that does
 * not make room; a registration the hook refuses with -ENOMEM (the kernel's
 * limit, which also counts what no pool holds: queues, receive buffers) is
 * tried once more after the same shrink. Counts are in bytes of whole
 * pages, as the kernel counts, and every registration counts on its own: a
 * buffer registered in two slots (two links' protection domains) counts
 * twice, as the kernel pins and counts the pages once per registration
 * (ib_umem_get() per ibv_reg_mr()).
 *
 * Past @small_from bytes of claimed buffers, a claim that finds no free
 * buffer of its class grows the smallest class (16 KiB) instead. A context
 * sets it to half a budget that is the kernel's RLIMIT_MEMLOCK: the kernel
 * also counts what the budget does not see, and a process with the
 * default 8 MiB would otherwise refuse its 62nd connection of 64 KiB
 * buffers rather than give it smaller ones (docs/buffers.md).
 */
struct bufpool_budget {
	_Atomic uint64_t pinned;  /* bytes registered now by the pools */
	_Atomic uint64_t claimed; /* bytes of the buffers claimed now, once each */
	_Atomic uint64_t max;	  /* 0: no cap of ours */
	/* claimed bytes (once per registration slot) past which growths take
	 * the smallest class; 0: never */
	_Atomic uint64_t small_from;
	_Atomic uint64_t shrinks; /* free buffers deregistered to make room */
	_Atomic uint64_t refused; /* registrations refused: no room made */
	/* protects pools; taken before a pool's grow lock, never under one */
	pthread_mutex_t lock;
	struct bufpool *pools; /* that share it (bufpool_create() links them) */
};

void bufpool_budget_init(struct bufpool_budget *b, uint64_t max);
/* After every pool that shares it is destroyed. */
void bufpool_budget_fini(struct bufpool_budget *b);
/*
 * bufpool_budget_shrink() - deregister free buffers of @b's pools until
 * @bytes are freed or none is left; returns the bytes freed. Lock-free
 * against the pools' claims and releases (a buffer popped off a free list
 * is the shrink's alone); takes @b's lock and each pool's grow lock in turn.
 */
uint64_t bufpool_budget_shrink(struct bufpool_budget *b, uint64_t bytes);

struct bufpool_config {
	enum bufpool_kind kind;
	/* Most buffers over all classes; 0 = SMC_RMBS_PER_LGR_MAX. A higher value
	 * is for benchmarks: the protocol caps a link group at 255 RMBs. */
	uint32_t max_bufs;
	/* 0 = buffers are their class size (the protocol). Non-zero: every buffer
	 * is this many bytes whatever its class - a benchmark mode, never to be
	 * advertised to a peer. */
	size_t buf_bytes;
	const struct bufpool_reg_ops *ops;
	void *ops_ctx;
	/* The budget its registrations count against; NULL: none. */
	struct bufpool_budget *budget;
	/* A shrink is about to deregister a free RMB whose rkey the peer
	 * holds (rkey_confirmed): tell the peer to forget it. NULL: nobody to
	 * tell. Runs in the thread that needed the room, under the budget's
	 * lock: it may not claim from or release to any pool. */
	void (*dropped)(void *arg, const struct bufpool_buf *buf);
	void *dropped_arg;
};

/* Creates an empty pool; NULL with errno set on failure. */
struct bufpool *bufpool_create(const struct bufpool_config *cfg);

/*
 * Claims a zeroed buffer of class smc_compress_bufsize(size) (sizes beyond
 * 512 MiB get class 15, as in Linux) or, if that class has no free buffer and
 * cannot grow, of the next smaller class that has or can (down to class 0), as
 * Linux does. Returns 0 and *out, or the error of the last class tried:
 * -ENOBUFS (max_bufs reached), -ENOMEM (also: no room in the budget even
 * after shrinking), or the hook's error. Lock-free when a free buffer
 * exists; takes the pool's grow lock otherwise (and, to grow within a
 * budget, the budget's lock and other pools' grow locks, never together).
 */
int bufpool_claim(struct bufpool *pool, size_t size, struct bufpool_buf **out);
int bufpool_claim_class(struct bufpool *pool, uint8_t class, struct bufpool_buf **out);

/*
 * Zeroes buf and returns it to its class's free list. O(1), lock-free. An RMB
 * must be released only after the peer can no longer write to it (after
 * DELETE_RKEY or when the link is down). The registration stays.
 */
void bufpool_release(struct bufpool *pool, struct bufpool_buf *buf);
/* The same, zeroing only the first @dirty bytes (at most the buffer): the
 * holder knows nothing was written past them since its claim. A short
 * connection writes a few bytes of a 64 KiB buffer. */
void bufpool_release_dirty(struct bufpool *pool, struct bufpool_buf *buf, size_t dirty);

/*
 * Registers a claimed buffer anew and drops its old registration, so that
 * its old rkey no longer reaches it: a peer that still writes with it fails
 * at its own end. The holder may then release it to be reused at once.
 * Every registration slot gets a new registration, so all its keys change.
 * Clears rkey_confirmed. Takes the grow lock.
 * 0, or the hook's error (the old registrations then all stay).
 */
int bufpool_rekey(struct bufpool *pool, struct bufpool_buf *buf);

/*
 * Registration slots: a link group's links each register every buffer in
 * their own protection domain, as Linux registers each buffer once per link
 * (net/smc/smc_core.c smcr_buf_map_lgr() when a link is added,
 * smcr_link_reg_buf(); smcr_buf_unmap_link() when it goes). Slot 0 is the
 * pool's cfg.ops_ctx, active from bufpool_create() to bufpool_destroy().
 * Every registration goes through cfg.ops; every active slot is registered
 * by a growth, re-registered by bufpool_rekey() and deregistered by a shrink
 * and by bufpool_destroy().
 *
 * bufpool_reg_add() - registers every buffer of @pool, free and claimed,
 * under @slot in @ops_ctx (for bufpool_verbs_hooks: the link's struct
 * ibv_pd *), then publishes the slot: from then on every growth registers it
 * too. All or nothing: on failure no buffer keeps a registration of @slot.
 * The registrations count against the pool's budget like a growth's: room is
 * made by shrinking, else -ENOMEM, and the hook's -ENOMEM gets one more try
 * after a shrink. Returns 0, -EINVAL (slot 0, out of range or already
 * added), -ENOMEM, or the hook's error. Takes the grow lock (registering
 * every buffer under it, as Linux maps a new link's buffers under
 * rmbs_lock); may run concurrently with claims, releases, growths, shrinks,
 * rekeys and reg_add()/reg_del() of other slots, not with reg_del() of the
 * same slot or bufpool_destroy().
 */
int bufpool_reg_add(struct bufpool *pool, int slot, void *ops_ctx);
/*
 * bufpool_reg_del() - unpublishes @slot and deregisters it from every buffer
 * (its link went away); the slot may be added again afterwards. The caller
 * stops using the slot's keys first (the link is down or its QP gone), as
 * Linux does before smcr_buf_unmap_link(). A slot not added is ignored.
 * Same concurrency as bufpool_reg_add().
 */
void bufpool_reg_del(struct bufpool *pool, int slot);
/*
 * bufpool_regs_active() - the active registration slots, bit s for slot s
 * (bit 0 always). An acquire: a slot it shows has its keys in every buffer
 * (bufpool_buf_lkey()).
 */
unsigned int bufpool_regs_active(struct bufpool *pool);

/* Buffers that exist (free or claimed) in a class; for stats and tests. */
uint32_t bufpool_class_count(struct bufpool *pool, uint8_t class);

/* One class's buffers now, for statistics (usmc-stat). */
struct bufpool_class_usage {
	size_t size;	 /* bytes per buffer */
	uint32_t total;	 /* buffers that exist (free or claimed) */
	uint32_t in_use; /* of those, claimed */
};

/*
 * bufpool_usage() - every class's usage. Read-only: the totals under the
 * grow lock (a leaf), the claimed counts from per-class atomics that
 * claim/release keep (one relaxed add each, no lock). May run concurrently
 * with claims and releases, not with bufpool_destroy().
 */
void bufpool_usage(struct bufpool *pool, struct bufpool_class_usage out[SMC_BUF_CLASSES]);

struct bufpool_teardown_report {
	uint32_t busy;	      /* buffers still claimed at destroy (should be 0) */
	uint32_t dereg_fails; /* dereg() errors (the memory is freed anyway) */
	int first_dereg_err;
};

/*
 * Calls fn for each claimed buffer. Same contract as bufpool_destroy(): no
 * claim or release may run concurrently.
 */
void bufpool_for_each_busy(struct bufpool *pool, void (*fn)(struct bufpool_buf *buf, void *arg),
			   void *arg);

/*
 * Deregisters (every registration slot) and frees every buffer and the pool.
 * Contract: the caller guarantees that no claim or release (nor
 * bufpool_reg_add() or bufpool_reg_del()) runs concurrently or later (the
 * link group is unreachable and its connections are gone) and that the peer
 * can no longer write into RMBs. Buffers still claimed are freed too (their
 * holders must not touch them again); their number is reported in rep
 * (may be NULL) and returned: 0 is the only correct outcome. The pool
 * leaves its budget first (no shrink reaches it), and its bytes with it.
 */
uint32_t bufpool_destroy(struct bufpool *pool, struct bufpool_teardown_report *rep);

#endif
