// SPDX-License-Identifier: MIT
/*
 * Registration slots of a buffer pool: every buffer registered once per link
 * of its link group, in that link's protection domain, as Linux registers
 * each buffer on every link (net/smc/smc_core.c struct smc_buf_desc
 * mr[SMC_LINKS_PER_LGR_MAX]: smcr_buf_map_lgr() and smcr_link_reg_buf() when
 * a link comes, smcr_buf_unmap_link() when it goes); and bufpool_rekey(),
 * which registers a buffer anew in every slot.
 *
 * Everything that registers or deregisters a buffer does it under the pool's
 * grow lock: growth, a slot's addition and deletion, a rekey, a shrink. A
 * claimed buffer's holder reads a slot's keys without it (atomics), and a
 * slot is published (reg_active, release) only after every buffer has them.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "bufpool_int.h"

static unsigned int bufpool_access(const struct bufpool *pool)
{
	return pool->cfg.kind == BUFPOOL_RMB ? BUFPOOL_ACCESS_RMB : BUFPOOL_ACCESS_SNDBUF;
}

static struct bufpool_mr *buf_mr(struct bufpool_buf *buf, int slot)
{
	return slot ? &buf->slot_mr[slot - 1] : &buf->mr;
}

/* Sets the keys slot @slot shows of @buf: @mr's, or 0 without one. Slot 0's
 * are plain fields, read by the holder only; the others' stores are releases
 * (bufpool_buf_lkey()). */
static void buf_set_keys(const struct bufpool *pool, struct bufpool_buf *buf, int slot,
			 const struct bufpool_mr *mr)
{
	uint32_t lkey = mr ? mr->lkey : 0;
	uint32_t rkey = mr && pool->cfg.kind == BUFPOOL_RMB ? mr->rkey : 0;

	if (!slot) {
		buf->lkey = lkey;
		buf->rkey = rkey;
		return;
	}
	atomic_store_explicit(&buf->slot_keys[slot - 1].lkey, lkey, memory_order_release);
	atomic_store_explicit(&buf->slot_keys[slot - 1].rkey, rkey, memory_order_release);
}

static int hook_reg(struct bufpool *pool, int slot, struct bufpool_buf *buf, struct bufpool_mr *mr)
{
	int rc;

	memset(mr, 0, sizeof(*mr));
	rc = pool->cfg.ops->reg(pool->reg_ctx[slot], buf->addr, buf->len, bufpool_access(pool), mr);
	return rc < 0 ? rc : rc ? -EIO : 0;
}

static void note_dereg(struct bufpool_teardown_report *rep, int rc)
{
	if (!rc || !rep)
		return;
	if (!rep->dereg_fails)
		rep->first_dereg_err = rc;
	rep->dereg_fails++;
}

/* Drops slot @slot's registration of @buf. Requires grow_lock. */
static void buf_dereg_slot(struct bufpool *pool, struct bufpool_buf *buf, int slot,
			   struct bufpool_teardown_report *rep)
{
	buf_set_keys(pool, buf, slot, NULL);
	/* a dereg failure leaves a registration behind, not a reachable buffer */
	note_dereg(rep, pool->cfg.ops->dereg(pool->reg_ctx[slot], buf_mr(buf, slot)));
	buf->regs = (uint8_t)(buf->regs & ~(1u << slot));
}

int bufpool_buf_reg(struct bufpool *pool, struct bufpool_buf *buf, uint32_t slots)
{
	for (int s = 0; s < BUFPOOL_REGS_MAX; s++) {
		int rc;

		if (!(slots & (1u << s)))
			continue;
		rc = hook_reg(pool, s, buf, buf_mr(buf, s));
		if (rc) {
			for (int d = 0; d < s; d++)
				if (slots & (1u << d))
					buf_dereg_slot(pool, buf, d, NULL);
			return rc;
		}
		buf->regs |= (uint8_t)(1u << s);
		buf_set_keys(pool, buf, s, buf_mr(buf, s));
	}
	return 0;
}

unsigned int bufpool_buf_dereg(struct bufpool *pool, struct bufpool_buf *buf,
			       struct bufpool_teardown_report *rep)
{
	unsigned int n = 0;

	for (int s = 0; s < BUFPOOL_REGS_MAX; s++)
		if (buf->regs & (1u << s)) {
			buf_dereg_slot(pool, buf, s, rep);
			n++;
		}
	return n;
}

/* Drops every buffer's registration of @slot; returns their bytes.
 * Requires grow_lock. */
static uint64_t dereg_slot_all(struct bufpool *pool, int slot)
{
	uint64_t bytes = 0;

	for (int c = 0; c < SMC_BUF_CLASSES; c++) {
		struct bufpool_class *cls = &pool->classes[c];

		for (uint32_t i = 0; i < cls->count; i++) {
			struct bufpool_buf *buf = &cls->slab[i];

			if (!buf->addr || !(buf->regs & (1u << slot)))
				continue;
			buf_dereg_slot(pool, buf, slot, NULL);
			bytes += bufpool_pinned_len(pool, (uint8_t)c);
		}
	}
	return bytes;
}

/* Registers every buffer that has no registration in @slot; *made: their
 * bytes. Stops at the first failure, the hook's error. Requires grow_lock. */
static int reg_slot_all(struct bufpool *pool, int slot, uint64_t *made)
{
	for (int c = 0; c < SMC_BUF_CLASSES; c++) {
		struct bufpool_class *cls = &pool->classes[c];

		for (uint32_t i = 0; i < cls->count; i++) {
			struct bufpool_buf *buf = &cls->slab[i];
			int rc;

			if (!buf->addr || buf->regs & (1u << slot))
				continue; /* emptied by a shrink, or grown since */
			rc = hook_reg(pool, slot, buf, buf_mr(buf, slot));
			if (rc)
				return rc;
			buf->regs |= (uint8_t)(1u << slot);
			buf_set_keys(pool, buf, slot, buf_mr(buf, slot));
			*made += bufpool_pinned_len(pool, (uint8_t)c);
		}
	}
	return 0;
}

/* The bytes one more registration of every buffer would pin. Requires
 * grow_lock. */
static uint64_t live_bytes(struct bufpool *pool)
{
	uint64_t bytes = 0;

	for (int c = 0; c < SMC_BUF_CLASSES; c++)
		bytes += (uint64_t)pool->classes[c].live * bufpool_pinned_len(pool, (uint8_t)c);
	return bytes;
}

/*
 * The slot is reserved first (reg_slots: from then on growths register it,
 * and count it), then the budget is charged for one registration of every
 * buffer that exists - without the grow lock, as making room may shrink
 * this pool - and then the buffers are registered under the lock. Those
 * grown in between already have the slot and those shrunk in between need
 * none, so what is registered is never more than what was charged; the
 * rest is given back. On failure every registration of the slot goes, the
 * growths' too (they counted theirs), and the slot is free again. The
 * hook's -ENOMEM (the kernel's limit) gets one more try after a shrink, as
 * a growth's does.
 */
static int reg_add_try(struct bufpool *pool, int slot, void *ops_ctx, bool last)
{
	struct bufpool_budget *b = pool->cfg.budget;
	uint32_t bit = 1u << slot, slots;
	uint64_t charged = 0, made = 0, dropped = 0;
	bool hook_failed = false;
	int rc = 0;

	pthread_mutex_lock(&pool->grow_lock);
	slots = atomic_load_explicit(&pool->reg_slots, memory_order_relaxed);
	if (slots & bit) {
		pthread_mutex_unlock(&pool->grow_lock);
		return -EINVAL;
	}
	pool->reg_ctx[slot] = ops_ctx;
	atomic_store_explicit(&pool->reg_slots, slots | bit, memory_order_relaxed);
	if (b)
		charged = live_bytes(pool);
	pthread_mutex_unlock(&pool->grow_lock);

	if (b && bufpool_budget_take(b, charged)) {
		charged = 0;
		rc = -ENOMEM;
	}
	pthread_mutex_lock(&pool->grow_lock);
	if (!rc) {
		rc = reg_slot_all(pool, slot, &made);
		hook_failed = rc != 0;
	}
	assert(!b || made <= charged);
	if (rc) {
		dropped = dereg_slot_all(pool, slot);
		slots = atomic_load_explicit(&pool->reg_slots, memory_order_relaxed);
		atomic_store_explicit(&pool->reg_slots, slots & ~bit, memory_order_relaxed);
		pool->reg_ctx[slot] = NULL;
	} else {
		uint32_t active = atomic_load_explicit(&pool->reg_active, memory_order_relaxed);

		/* every buffer has the slot's keys: publish it */
		atomic_store_explicit(&pool->reg_active, active | bit, memory_order_release);
	}
	pthread_mutex_unlock(&pool->grow_lock);
	if (b)
		atomic_fetch_sub(&b->pinned, charged - made + dropped);
	if (rc == -ENOMEM && hook_failed && b && !last && bufpool_budget_shrink(b, charged))
		return reg_add_try(pool, slot, ops_ctx, true);
	return rc;
}

int bufpool_reg_add(struct bufpool *pool, int slot, void *ops_ctx)
{
	if (slot <= 0 || slot >= BUFPOOL_REGS_MAX)
		return -EINVAL;
	return reg_add_try(pool, slot, ops_ctx, false);
}

void bufpool_reg_del(struct bufpool *pool, int slot)
{
	uint32_t bit = 1u << slot, slots, active;
	uint64_t bytes;

	if (slot <= 0 || slot >= BUFPOOL_REGS_MAX)
		return;
	pthread_mutex_lock(&pool->grow_lock);
	slots = atomic_load_explicit(&pool->reg_slots, memory_order_relaxed);
	if (!(slots & bit)) {
		pthread_mutex_unlock(&pool->grow_lock);
		return;
	}
	active = atomic_load_explicit(&pool->reg_active, memory_order_relaxed);
	atomic_store_explicit(&pool->reg_active, active & ~bit, memory_order_release);
	atomic_store_explicit(&pool->reg_slots, slots & ~bit, memory_order_relaxed);
	bytes = dereg_slot_all(pool, slot);
	pool->reg_ctx[slot] = NULL;
	pthread_mutex_unlock(&pool->grow_lock);
	if (pool->cfg.budget)
		atomic_fetch_sub(&pool->cfg.budget->pinned, bytes);
}

unsigned int bufpool_regs_active(struct bufpool *pool)
{
	return atomic_load_explicit(&pool->reg_active, memory_order_acquire);
}

/*
 * Every slot the buffer is registered in gets a new registration before any
 * old one is dropped: a failure leaves all the old ones (and their keys).
 * Under the grow lock, so that no slot is added or deleted meanwhile.
 */
int bufpool_rekey(struct bufpool *pool, struct bufpool_buf *buf)
{
	struct bufpool_mr fresh[BUFPOOL_REGS_MAX];
	int rc = 0, s;

	pthread_mutex_lock(&pool->grow_lock);
	for (s = 0; s < BUFPOOL_REGS_MAX; s++) {
		if (!(buf->regs & (1u << s)))
			continue;
		rc = hook_reg(pool, s, buf, &fresh[s]);
		if (rc)
			break;
	}
	if (rc) {
		for (int d = 0; d < s; d++)
			if (buf->regs & (1u << d))
				pool->cfg.ops->dereg(pool->reg_ctx[d], &fresh[d]);
		pthread_mutex_unlock(&pool->grow_lock);
		return rc;
	}
	for (s = 0; s < BUFPOOL_REGS_MAX; s++) {
		struct bufpool_mr old;

		if (!(buf->regs & (1u << s)))
			continue;
		old = *buf_mr(buf, s);
		*buf_mr(buf, s) = fresh[s];
		buf_set_keys(pool, buf, s, &fresh[s]);
		/* a dereg failure leaves a registration behind, not a reachable buffer */
		pool->cfg.ops->dereg(pool->reg_ctx[s], &old);
	}
	buf->rkey_confirmed = false;
	pthread_mutex_unlock(&pool->grow_lock);
	return 0;
}
