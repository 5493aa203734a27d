// SPDX-License-Identifier: MIT
/*
 * Per-link-group buffer pools with a lock-free free list per size class.
 * Design, ABA and memory-ordering arguments: docs/buffers.md and treiber.h.
 * Registration slots (one registration per link) are in bufpool_reg.c.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bufpool_int.h"

/* Rounds of shrinking one growth may take while other growths take the
 * room it made: past them it is refused (no livelock of two growths). */
#define BUFPOOL_BUDGET_TRIES 8

uint8_t smc_compress_bufsize(size_t size)
{
	size_t units;
	uint8_t class = 0;

	if (size <= SMC_BUF_MIN_SIZE)
		return 0;
	/* floor(log2((size - 1) >> 14)) + 1: round up to a power of two. */
	units = (size - 1) >> SMC_BUF_MIN_SHIFT;
	while (units) {
		class ++;
		units >>= 1;
	}
	return class > SMC_BUF_CLASS_MAX ? SMC_BUF_CLASS_MAX : class;
}

size_t smc_uncompress_bufsize(uint8_t class)
{
	return (size_t)1 << (class + SMC_BUF_MIN_SHIFT);
}

static void bufpool_free_classes(struct bufpool *pool)
{
	for (int c = 0; c < SMC_BUF_CLASSES; c++) {
		free(pool->classes[c].slab);
		free(pool->classes[c].links);
		free(pool->classes[c].vacant);
	}
	free(pool->free_marks);
}

static int bufpool_init_class(struct bufpool_class *cls, uint32_t capacity)
{
	cls->slab = calloc(capacity, sizeof(*cls->slab));
	cls->links = calloc(capacity, sizeof(*cls->links));
	cls->vacant = calloc(capacity, sizeof(*cls->vacant));
	if (!cls->slab || !cls->links || !cls->vacant)
		return -ENOMEM;
	for (uint32_t i = 0; i < capacity; i++) {
		atomic_init(&cls->slab[i].owner, 0);
		for (int s = 0; s < BUFPOOL_REGS_MAX - 1; s++) {
			atomic_init(&cls->slab[i].slot_keys[s].lkey, 0);
			atomic_init(&cls->slab[i].slot_keys[s].rkey, 0);
		}
	}
	treiber_init(&cls->free, cls->links, capacity);
	cls->count = cls->live = cls->nvacant = 0;
	atomic_init(&cls->in_use, 0);
	return 0;
}

struct bufpool *bufpool_create(const struct bufpool_config *cfg)
{
	struct bufpool *pool;

	if (!cfg || !cfg->ops || !cfg->ops->reg || !cfg->ops->dereg ||
	    (cfg->kind != BUFPOOL_RMB && cfg->kind != BUFPOOL_SNDBUF) ||
	    cfg->max_bufs > TREIBER_MAX_CAP) {
		errno = EINVAL;
		return NULL;
	}
	pool = aligned_alloc(CACHELINE, bufpool_round_up(sizeof(*pool), CACHELINE));
	if (!pool) {
		errno = ENOMEM;
		return NULL;
	}
	memset(pool, 0, sizeof(*pool));
	pool->cfg = *cfg;
	if (!pool->cfg.max_bufs)
		pool->cfg.max_bufs = SMC_RMBS_PER_LGR_MAX;
	pool->page_size = (size_t)sysconf(_SC_PAGESIZE);
	pool->reg_ctx[0] = cfg->ops_ctx;
	atomic_init(&pool->reg_slots, 1u);
	atomic_init(&pool->reg_active, 1u);
	pool->free_marks = calloc(pool->cfg.max_bufs, 1);
	if (!pool->free_marks)
		goto nomem;
	for (int c = 0; c < SMC_BUF_CLASSES; c++)
		if (bufpool_init_class(&pool->classes[c], pool->cfg.max_bufs))
			goto nomem;
	if (pthread_mutex_init(&pool->grow_lock, NULL))
		goto nomem;
	if (cfg->budget) {
		pthread_mutex_lock(&cfg->budget->lock);
		pool->budget_next = cfg->budget->pools;
		cfg->budget->pools = pool;
		pthread_mutex_unlock(&cfg->budget->lock);
	}
	return pool;
nomem:
	bufpool_free_classes(pool);
	free(pool);
	errno = ENOMEM;
	return NULL;
}

/* Maps a new buffer in slot buf and registers it in every registration slot
 * of @slots. Requires grow_lock. */
static int bufpool_make_buf(struct bufpool *pool, struct bufpool_buf *buf, uint8_t class,
			    uint32_t index, uint32_t slots)
{
	size_t len = bufpool_buf_len(pool, class);
	size_t map_len = bufpool_round_up(len, pool->page_size);
	void *addr;
	int rc;

	/* Anonymous mappings are page-aligned and already zero. */
	addr = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (addr == MAP_FAILED)
		return -ENOMEM;
	buf->addr = addr;
	buf->len = len;
	rc = bufpool_buf_reg(pool, buf, slots);
	if (rc) {
		buf->addr = NULL;
		munmap(addr, map_len);
		return rc;
	}
	buf->class = class;
	buf->index = index;
	return 0;
}

/* bufpool_grow_once()'s @counted when no budget counts the growth */
#define BUFPOOL_UNCOUNTED UINT32_MAX

/*
 * Adds one buffer to a class, in an emptied slot if there is one, and hands
 * it straight to the caller (it never goes on the free list, so no other
 * thread can see it yet). Growth is rare and may register memory, which is
 * slow: a plain mutex is fine here and keeps the limit and the slot
 * numbering simple. @counted is the number of registrations the budget was
 * charged for: -EAGAIN if the registration slots changed since (count
 * again), BUFPOOL_UNCOUNTED without a budget.
 */
static int bufpool_grow_once(struct bufpool *pool, uint8_t class, uint32_t counted,
			     struct bufpool_buf **out)
{
	struct bufpool_class *cls = &pool->classes[class];
	uint32_t idx, slots;
	int rc;

	pthread_mutex_lock(&pool->grow_lock);
	if (pool->total >= pool->cfg.max_bufs) {
		rc = -ENOBUFS;
		goto out;
	}
	slots = atomic_load_explicit(&pool->reg_slots, memory_order_relaxed);
	if (counted != BUFPOOL_UNCOUNTED && counted != bufpool_nregs(slots)) {
		rc = -EAGAIN;
		goto out;
	}
	idx = cls->nvacant ? cls->vacant[cls->nvacant - 1] : cls->count;
	rc = bufpool_make_buf(pool, &cls->slab[idx], class, idx, slots);
	if (rc)
		goto out;
	*out = &cls->slab[idx];
	if (cls->nvacant)
		cls->nvacant--;
	else
		cls->count++;
	cls->live++;
	pool->total++;
out:
	pthread_mutex_unlock(&pool->grow_lock);
	return rc;
}

static bool bufpool_full(struct bufpool *pool)
{
	bool full;

	pthread_mutex_lock(&pool->grow_lock);
	full = pool->total >= pool->cfg.max_bufs;
	pthread_mutex_unlock(&pool->grow_lock);
	return full;
}

int bufpool_budget_take(struct bufpool_budget *b, uint64_t bytes)
{
	uint64_t cur = atomic_load(&b->pinned);

	for (int tries = 0; tries <= BUFPOOL_BUDGET_TRIES;) {
		uint64_t max = atomic_load(&b->max);

		if (!max || cur + bytes <= max) {
			if (atomic_compare_exchange_weak(&b->pinned, &cur, cur + bytes))
				return 0;
			continue;
		}
		if (tries++ == BUFPOOL_BUDGET_TRIES || !bufpool_budget_shrink(b, cur + bytes - max))
			break;
		cur = atomic_load(&b->pinned);
	}
	atomic_fetch_add(&b->refused, 1);
	return -ENOMEM;
}

/*
 * bufpool_grow_once() within the pool's budget: the bytes are counted
 * before the registration, so that growths racing each other never pass
 * the budget together, and given back if it fails. They are those of one
 * registration per registration slot; a slot added or deleted meanwhile
 * (the check is under the grow lock, which the budget's shrink may need)
 * makes it count again. A full pool is told first: shrinking others would
 * not help it.
 */
static int bufpool_grow(struct bufpool *pool, uint8_t class, struct bufpool_buf **out)
{
	struct bufpool_budget *b = pool->cfg.budget;
	int rc;

	if (!b)
		return bufpool_grow_once(pool, class, BUFPOOL_UNCOUNTED, out);
	if (bufpool_full(pool))
		return -ENOBUFS;
	do {
		uint32_t slots = atomic_load_explicit(&pool->reg_slots, memory_order_relaxed);
		uint32_t n = bufpool_nregs(slots);
		uint64_t bytes = bufpool_pinned_len(pool, class) * n;

		rc = bufpool_budget_take(b, bytes);
		if (rc)
			return rc;
		rc = bufpool_grow_once(pool, class, n, out);
		/* the kernel's limit: free buffers of ours hold some of it */
		if (rc == -ENOMEM && bufpool_budget_shrink(b, bytes))
			rc = bufpool_grow_once(pool, class, n, out);
		if (rc) {
			atomic_fetch_sub(&b->pinned, bytes);
			if (rc == -ENOMEM)
				atomic_fetch_add(&b->refused, 1);
		}
	} while (rc == -EAGAIN);
	return rc;
}

/*
 * The budget's claimed buffers (each counted once per registration slot of
 * @pool, as its growth would count them) reach its small_from: growths
 * take the smallest class from here on (bufpool.h, struct bufpool_budget).
 */
static bool bufpool_budget_tight(const struct bufpool *pool)
{
	const struct bufpool_budget *b = pool->cfg.budget;
	uint64_t from, slots;

	if (!b)
		return false;
	from = atomic_load(&b->small_from);
	slots = bufpool_nregs(atomic_load_explicit(&pool->reg_slots, memory_order_relaxed));
	return from && atomic_load(&b->claimed) * slots >= from;
}

/* @buf of @class is its claimer's now: counted in use. */
static void bufpool_claimed(struct bufpool *pool, uint8_t class, struct bufpool_buf *buf,
			    struct bufpool_buf **out)
{
	*out = buf;
	atomic_fetch_add_explicit(&pool->classes[class].in_use, 1, memory_order_relaxed);
	if (pool->cfg.budget)
		atomic_fetch_add(&pool->cfg.budget->claimed, bufpool_pinned_len(pool, class));
}

int bufpool_claim_class(struct bufpool *pool, uint8_t class, struct bufpool_buf **out)
{
	bool tight = bufpool_budget_tight(pool);
	struct bufpool_buf *buf;
	int rc = -EINVAL;

	if (class > SMC_BUF_CLASS_MAX)
		return -EINVAL;
	/* As Linux __smc_buf_create: reuse, else grow, else try a smaller
	 * class; on a tight budget only the smallest class grows. */
	for (int c = class; c >= 0; c--) {
		struct bufpool_class *cls = &pool->classes[c];
		uint32_t idx;

		if (treiber_pop(&cls->free, &idx)) {
			bufpool_claimed(pool, (uint8_t)c, &cls->slab[idx], out);
			return 0;
		}
		if (tight && c > 0)
			continue;
		rc = bufpool_grow(pool, (uint8_t)c, &buf);
		if (!rc) {
			bufpool_claimed(pool, (uint8_t)c, buf, out);
			return 0;
		}
	}
	return rc;
}

int bufpool_claim(struct bufpool *pool, size_t size, struct bufpool_buf **out)
{
	return bufpool_claim_class(pool, smc_compress_bufsize(size), out);
}

void bufpool_release(struct bufpool *pool, struct bufpool_buf *buf)
{
	bufpool_release_dirty(pool, buf, buf->len);
}

void bufpool_release_dirty(struct bufpool *pool, struct bufpool_buf *buf, size_t dirty)
{
	struct bufpool_class *cls = &pool->classes[buf->class];

	assert(buf >= cls->slab && buf < cls->slab + pool->cfg.max_bufs);
	/* No data leaks to the next holder; the push's release CAS publishes it. */
	memset(buf->addr, 0, dirty < buf->len ? dirty : buf->len);
	atomic_fetch_sub_explicit(&cls->in_use, 1, memory_order_relaxed);
	if (pool->cfg.budget)
		atomic_fetch_sub(&pool->cfg.budget->claimed, bufpool_pinned_len(pool, buf->class));
	treiber_push(&cls->free, buf->index);
}

void bufpool_usage(struct bufpool *pool, struct bufpool_class_usage out[SMC_BUF_CLASSES])
{
	pthread_mutex_lock(&pool->grow_lock);
	for (int c = 0; c < SMC_BUF_CLASSES; c++)
		out[c].total = pool->classes[c].live;
	pthread_mutex_unlock(&pool->grow_lock);
	for (int c = 0; c < SMC_BUF_CLASSES; c++) {
		uint32_t n = atomic_load_explicit(&pool->classes[c].in_use, memory_order_relaxed);

		/* read apart from the totals: clamp a claim that grew meanwhile */
		out[c].in_use = n > out[c].total ? out[c].total : n;
		out[c].size = bufpool_buf_len(pool, (uint8_t)c);
	}
}

uint32_t bufpool_class_count(struct bufpool *pool, uint8_t class)
{
	uint32_t n;

	if (class > SMC_BUF_CLASS_MAX)
		return 0;
	pthread_mutex_lock(&pool->grow_lock);
	n = pool->classes[class].live;
	pthread_mutex_unlock(&pool->grow_lock);
	return n;
}

static void bufpool_mark_free(uint32_t idx, void *arg)
{
	uint8_t *marks = arg;

	marks[idx] = 1;
}

void bufpool_for_each_busy(struct bufpool *pool, void (*fn)(struct bufpool_buf *buf, void *arg),
			   void *arg)
{
	for (int c = 0; c < SMC_BUF_CLASSES; c++) {
		struct bufpool_class *cls = &pool->classes[c];

		memset(pool->free_marks, 0, cls->count);
		treiber_for_each_quiescent(&cls->free, bufpool_mark_free, pool->free_marks);
		for (uint32_t i = 0; i < cls->nvacant; i++)
			pool->free_marks[cls->vacant[i]] = 1; /* no buffer at all */
		for (uint32_t i = 0; i < cls->count; i++)
			if (!pool->free_marks[i])
				fn(&cls->slab[i], arg);
	}
}

static void bufpool_count_busy(struct bufpool_buf *buf, void *arg)
{
	uint32_t *busy = arg;

	(*busy)++;
}

/* Deregisters every registration of a buffer and unmaps it; returns the
 * bytes it pinned (every registration's). */
static uint64_t bufpool_unmake_buf(struct bufpool *pool, struct bufpool_buf *buf,
				   struct bufpool_teardown_report *rep)
{
	unsigned int n = bufpool_buf_dereg(pool, buf, rep);

	munmap(buf->addr, bufpool_round_up(buf->len, pool->page_size));
	return (uint64_t)n * bufpool_pinned_len(pool, buf->class);
}

/* The bytes of the pool's claimed buffers, as its budget counts them. */
static uint64_t bufpool_claimed_len(struct bufpool *pool)
{
	uint64_t len = 0;

	for (int c = 0; c < SMC_BUF_CLASSES; c++)
		len += atomic_load_explicit(&pool->classes[c].in_use, memory_order_relaxed) *
		       bufpool_pinned_len(pool, (uint8_t)c);
	return len;
}

/* Out of its budget's list: no shrink reaches it any more. */
static void bufpool_budget_unlink(struct bufpool *pool)
{
	struct bufpool_budget *b = pool->cfg.budget;

	pthread_mutex_lock(&b->lock);
	for (struct bufpool **pp = &b->pools; *pp; pp = &(*pp)->budget_next)
		if (*pp == pool) {
			*pp = pool->budget_next;
			break;
		}
	pthread_mutex_unlock(&b->lock);
}

uint32_t bufpool_destroy(struct bufpool *pool, struct bufpool_teardown_report *rep)
{
	struct bufpool_teardown_report local = {0};
	uint64_t pinned = 0;

	if (!pool)
		return 0;
	if (pool->cfg.budget)
		bufpool_budget_unlink(pool);
	bufpool_for_each_busy(pool, bufpool_count_busy, &local.busy);
	for (int c = 0; c < SMC_BUF_CLASSES; c++) {
		struct bufpool_class *cls = &pool->classes[c];

		for (uint32_t i = 0; i < cls->count; i++) {
			if (!cls->slab[i].addr)
				continue; /* emptied by a shrink */
			pinned += bufpool_unmake_buf(pool, &cls->slab[i], &local);
		}
	}
	if (pool->cfg.budget) {
		atomic_fetch_sub(&pool->cfg.budget->pinned, pinned);
		atomic_fetch_sub(&pool->cfg.budget->claimed, bufpool_claimed_len(pool));
	}
	pthread_mutex_destroy(&pool->grow_lock);
	bufpool_free_classes(pool);
	free(pool);
	if (rep)
		*rep = local;
	return local.busy;
}

/* ---- a budget of registered memory ----------------------------------- */

void bufpool_budget_init(struct bufpool_budget *b, uint64_t max)
{
	atomic_init(&b->pinned, 0);
	atomic_init(&b->claimed, 0);
	atomic_init(&b->max, max);
	atomic_init(&b->small_from, 0);
	atomic_init(&b->shrinks, 0);
	atomic_init(&b->refused, 0);
	pthread_mutex_init(&b->lock, NULL);
	b->pools = NULL;
}

void bufpool_budget_fini(struct bufpool_budget *b)
{
	if (!b->pools) /* else a pool outlived its owner's wait: leave the lock */
		pthread_mutex_destroy(&b->lock);
}

/*
 * Deregister and unmap free buffers of one class of @pool until @bytes are
 * freed or its free list is empty; returns the bytes freed, every
 * registration slot's. A popped buffer is the shrink's alone (as a
 * claim's); it is deregistered and its slot emptied, for the next growth,
 * under the grow lock, so that no registration slot is added to it or
 * deleted from it meanwhile. An RMB the peer holds the rkey of is told
 * first (cfg.dropped): the peer's table of our rkeys must not fill up with
 * dead ones (Linux's has 255 entries, net/smc/smc_core.c smc_rtoken_add()).
 * Requires the budget's lock.
 */
static uint64_t bufpool_shrink_class(struct bufpool *pool, uint8_t class, uint64_t bytes)
{
	struct bufpool_class *cls = &pool->classes[class];
	struct bufpool_budget *b = pool->cfg.budget;
	struct bufpool_teardown_report ignored = {0};
	uint64_t freed = 0;
	uint32_t idx;

	while (freed < bytes && treiber_pop(&cls->free, &idx)) {
		struct bufpool_buf *buf = &cls->slab[idx];
		uint64_t len;

		if (buf->rkey_confirmed && pool->cfg.dropped)
			pool->cfg.dropped(pool->cfg.dropped_arg, buf);
		pthread_mutex_lock(&pool->grow_lock);
		/* a dereg failure leaves a registration behind, not a buffer */
		len = bufpool_unmake_buf(pool, buf, &ignored);
		buf->addr = NULL;
		buf->rkey_confirmed = false;
		cls->vacant[cls->nvacant++] = idx;
		cls->live--;
		pool->total--;
		pthread_mutex_unlock(&pool->grow_lock);
		atomic_fetch_sub(&b->pinned, len);
		atomic_fetch_add(&b->shrinks, 1);
		freed += len;
	}
	return freed;
}

uint64_t bufpool_budget_shrink(struct bufpool_budget *b, uint64_t bytes)
{
	uint64_t freed = 0;

	pthread_mutex_lock(&b->lock);
	/* the largest first: fewest deregistrations for the room */
	for (int c = SMC_BUF_CLASS_MAX; c >= 0 && freed < bytes; c--)
		for (struct bufpool *p = b->pools; p && freed < bytes; p = p->budget_next)
			freed += bufpool_shrink_class(p, (uint8_t)c, bytes - freed);
	pthread_mutex_unlock(&b->lock);
	return freed;
}
