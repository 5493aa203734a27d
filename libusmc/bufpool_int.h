/* SPDX-License-Identifier: MIT */
/*
 * What bufpool.c (the pool: classes, claims, growth, the budget) and
 * bufpool_reg.c (registration slots, rekey) share. Not for other files.
 */
#ifndef USMC_BUFPOOL_INT_H
#define USMC_BUFPOOL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bufpool.h"
#include "treiber.h"

#define CACHELINE 64

/*
 * One size class. The slab and the link array are allocated at pool creation
 * with room for max_bufs buffers and never move or get freed before
 * bufpool_destroy(): a Treiber pop may read the link of a slot another thread
 * has just claimed, and that read must be of valid memory. A slot a shrink
 * emptied (addr NULL) waits on the vacant stack for the next growth.
 */
struct bufpool_class {
	_Alignas(CACHELINE) struct treiber_stack free; /* own line: no false sharing */
	struct bufpool_buf *slab;
	_Atomic uint32_t *links;
	uint32_t count;	  /* slots ever used (0..count-1); under grow_lock */
	uint32_t live;	  /* of those, holding a buffer (free or claimed); under grow_lock */
	uint32_t *vacant; /* emptied slots, nvacant of them; under grow_lock */
	uint32_t nvacant;
	atomic_uint in_use; /* claimed now (statistics only; no lock) */
};

struct bufpool {
	struct bufpool_config cfg;
	size_t page_size;
	/* serialises growth, registration slots' changes, rekeys and a shrink's
	 * deregistration: everything that registers or deregisters a buffer */
	pthread_mutex_t grow_lock;
	uint32_t total;		     /* buffers over all classes; under grow_lock */
	uint8_t *free_marks;	     /* teardown scratch, max_bufs entries */
	struct bufpool *budget_next; /* cfg.budget's list, under its lock */
	/*
	 * Registration slots (bufpool_reg.c). reg_ctx[s] is slot s's hook
	 * context (reg_ctx[0] = cfg.ops_ctx). reg_slots are the slots a growth
	 * registers: the active ones and one being added; written under
	 * grow_lock, atomic so that a growth may read their number before it
	 * takes the lock (to count them in the budget; it checks again under
	 * the lock). reg_active are the published slots: a release store after
	 * every buffer has the slot's keys (bufpool_regs_active()).
	 */
	void *reg_ctx[BUFPOOL_REGS_MAX];
	_Atomic uint32_t reg_slots;
	_Atomic uint32_t reg_active;
	struct bufpool_class classes[SMC_BUF_CLASSES];
};

static inline size_t bufpool_round_up(size_t n, size_t align)
{
	return (n + align - 1) / align * align;
}

static inline size_t bufpool_buf_len(const struct bufpool *pool, uint8_t class)
{
	return pool->cfg.buf_bytes ? pool->cfg.buf_bytes : smc_uncompress_bufsize(class);
}

/* The bytes one registration of a buffer of @class pins: whole pages, as
 * the kernel counts. */
static inline uint64_t bufpool_pinned_len(const struct bufpool *pool, uint8_t class)
{
	return bufpool_round_up(bufpool_buf_len(pool, class), pool->page_size);
}

static inline unsigned int bufpool_nregs(uint32_t slots)
{
	return (unsigned int)__builtin_popcount(slots);
}

/* Counts @bytes into @b if they fit, shrinking the pools to make room;
 * -ENOMEM if they do not. Takes no lock of the caller's pool held. */
int bufpool_budget_take(struct bufpool_budget *b, uint64_t bytes);

/*
 * bufpool_buf_reg() - registers the mapped memory of @buf in every slot of
 * @slots and sets their keys; all or nothing (0, or the hook's negative
 * errno with nothing registered). Requires grow_lock, and @buf no
 * registration in @slots.
 */
int bufpool_buf_reg(struct bufpool *pool, struct bufpool_buf *buf, uint32_t slots);
/*
 * bufpool_buf_dereg() - deregisters @buf from every slot it is registered in
 * and zeroes their keys; returns how many registrations it dropped. dereg()
 * failures go into @rep. Requires grow_lock (or bufpool_destroy()'s quiet).
 */
unsigned int bufpool_buf_dereg(struct bufpool *pool, struct bufpool_buf *buf,
			       struct bufpool_teardown_report *rep);

#endif
