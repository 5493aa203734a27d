/* SPDX-License-Identifier: MIT */
/*
 * Treiber stack of indices: a lock-free LIFO free list, ABA-safe.
 *
 * The stack holds small integers 0..capacity-1 (indices into an array the
 * caller owns, e.g. a slab of buffer descriptors). Each index has one link
 * word, next[idx], in an array that the caller allocates before treiber_init()
 * and keeps, unmoved and unfreed, for as long as any thread may touch the
 * stack. The head is one 64-bit word updated by compare-and-swap:
 *
 *	bits  0..31  index + 1 of the top element (0 = empty)
 *	bits 32..63  tag, incremented by every successful push and pop
 *
 * ABA. A pop reads head = {A, t} and next[A] = B, then CASes head to {B, ..}.
 * Between the read and the CAS, other threads may pop A, pop B and push A
 * again: the head index is A once more but next[A] is no longer B. Without
 * the tag the CAS would succeed and install B, which is now claimed by
 * someone else: the same element would be handed out twice. With the tag the
 * head is {A, t + 3} and the stale CAS fails. A false success needs the tag
 * to wrap, i.e. exactly 2^32 successful operations between one thread's load
 * and its CAS, which cannot happen in the time of a few instructions.
 *
 * Why reading next[A] of a possibly-popped element is safe: the link array
 * is never freed or moved while the stack is in use, so the read is of valid
 * memory; it is an atomic (relaxed) load, so a concurrent store by a pusher
 * is not a data race; and any value it returns after A left the stack is
 * discarded because the CAS fails (the tag moved on).
 *
 * Memory ordering (C11). What must be ordered is the caller's data: what a
 * thread wrote into the element before pushing it (e.g. zeroing a buffer)
 * must be visible to the thread that pops it.
 *  - push: the successful CAS is a release. It publishes the caller's
 *    earlier writes and the store to next[idx]. The failed CAS and the
 *    initial load are relaxed: push only copies the old head index into
 *    next[idx] and retries on failure, it dereferences nothing.
 *  - pop: the head load and the failed CAS (which reloads the head) are
 *    acquire; they read a value written by the release CAS of a push (or a
 *    later CAS in its release sequence - every write to head is a
 *    read-modify-write, so the release sequence is never broken). That makes
 *    the pusher's store to next[top] and its writes to the element visible
 *    before we load next[top]. The successful CAS is acquire-release: acquire
 *    so the caller's subsequent reads of the element see the pusher's writes;
 *    release so that our relaxed load of next[top] happens before any later
 *    push of top by a thread that pops it after us (that thread's acquire
 *    reads our CAS), so the load can never observe a link written in the
 *    future.
 *  - next[] accesses are relaxed: they are ordered by the head operations
 *    above and only need to be atomic to be race-free.
 *
 * Progress: lock-free. A CAS fails only because another thread's CAS
 * succeeded, so some thread always makes progress.
 */
#ifndef USMC_TREIBER_H
#define USMC_TREIBER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define TREIBER_EMPTY	  0u /* index + 1 encoding: 0 = no element */
#define TREIBER_MAX_CAP	  (UINT32_MAX - 1u)
#define TREIBER_TAG_SHIFT 32

struct treiber_stack {
	_Atomic uint64_t head;	/* {tag << 32 | (index + 1)} */
	_Atomic uint32_t *next; /* next[idx] = index + 1 of the element below */
	uint32_t capacity;
};

static inline uint32_t treiber_head_top(uint64_t head)
{
	return (uint32_t)head;
}

static inline uint32_t treiber_head_tag(uint64_t head)
{
	return (uint32_t)(head >> TREIBER_TAG_SHIFT);
}

static inline uint64_t treiber_head_make(uint32_t top, uint32_t tag)
{
	return ((uint64_t)tag << TREIBER_TAG_SHIFT) | top;
}

/*
 * Initialises an empty stack over next[0..capacity-1]. Not thread-safe: the
 * stack must be published to other threads afterwards (e.g. by pthread_create
 * or a release store).
 */
static inline void treiber_init(struct treiber_stack *s, _Atomic uint32_t *next, uint32_t capacity)
{
	s->next = next;
	s->capacity = capacity;
	for (uint32_t i = 0; i < capacity; i++)
		atomic_init(&next[i], TREIBER_EMPTY);
	atomic_init(&s->head, treiber_head_make(TREIBER_EMPTY, 0));
}

/* Pushes idx, which the caller owns (it is not on the stack). Lock-free. */
static inline void treiber_push(struct treiber_stack *s, uint32_t idx)
{
	uint64_t old = atomic_load_explicit(&s->head, memory_order_relaxed);
	uint64_t new;

	do {
		atomic_store_explicit(&s->next[idx], treiber_head_top(old), memory_order_relaxed);
		new = treiber_head_make(idx + 1, treiber_head_tag(old) + 1);
	} while (!atomic_compare_exchange_weak_explicit(&s->head, &old, new, memory_order_release,
							memory_order_relaxed));
}

/* Pops the top index into *idx; false if the stack is empty. Lock-free. */
static inline bool treiber_pop(struct treiber_stack *s, uint32_t *idx)
{
	uint64_t old = atomic_load_explicit(&s->head, memory_order_acquire);
	uint64_t new;
	uint32_t top;

	do {
		top = treiber_head_top(old);
		if (top == TREIBER_EMPTY)
			return false;
		/* May be stale if top was popped meanwhile; then the CAS fails. */
		uint32_t below = atomic_load_explicit(&s->next[top - 1], memory_order_relaxed);
		new = treiber_head_make(below, treiber_head_tag(old) + 1);
	} while (!atomic_compare_exchange_weak_explicit(&s->head, &old, new, memory_order_acq_rel,
							memory_order_acquire));
	*idx = top - 1;
	return true;
}

/*
 * Walks the stack from the top, calling fn for each index. Only for a
 * quiescent stack (no concurrent push or pop), e.g. at teardown.
 */
static inline void treiber_for_each_quiescent(const struct treiber_stack *s,
					      void (*fn)(uint32_t idx, void *arg), void *arg)
{
	uint32_t top = treiber_head_top(atomic_load_explicit(&s->head, memory_order_acquire));

	while (top != TREIBER_EMPTY) {
		fn(top - 1, arg);
		top = atomic_load_explicit(&s->next[top - 1], memory_order_relaxed);
	}
}

#endif
