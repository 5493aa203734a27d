// SPDX-License-Identifier: MIT
/*
 * Concurrency stress for the buffer pools and the Treiber stack; meant to run
 * under ThreadSanitizer (label tsan) but also meaningful without it.
 *
 * Every buffer carries an owner tag: a claimer CASes it from 0 to its thread
 * id, so a buffer handed out twice at the same time (the ABA failure) trips
 * the assertion. While holding a buffer a thread fills it with its id and
 * checks, before releasing, that nobody else wrote into it; after every claim
 * it checks that the buffer reads back as zeros.
 *
 * Usage: test_bufpool_stress [iterations-per-thread]
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bufpool.h"
#include "bufpool_noop.h"
#include "treiber.h"

#define THREADS		   4 /* more than the cores: preemption mid-CAS widens races */
#define DEFAULT_ITERS	   200000
#define MAX_HELD	   3  /* buffers a thread holds at once */
#define POOL_MAX_BUFS	   10 /* < THREADS * MAX_HELD: growth, limit and fallback race */
#define POOL_BUF_BYTES	   256
#define POOL_TOP_CLASS	   3
#define STACK_ELEMS	   3 /* few elements: the same index recycles constantly */
#define STACK_ITERS_FACTOR 10

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                 \
		}                                                                                \
	} while (0)

struct worker {
	pthread_t thread;
	uintptr_t id; /* non-zero */
	unsigned int seed;
	long iters;
	struct bufpool *pool;
	long claims;
	long limit_hits;
	/* Treiber-only phase */
	struct treiber_stack *stack;
	_Atomic uintptr_t *stack_owner;
};

static void take(struct worker *w, struct bufpool_buf *buf)
{
	const uint8_t *p = buf->addr;
	uintptr_t expected = 0;

	CHECK(atomic_compare_exchange_strong(&buf->owner, &expected, w->id));
	for (size_t i = 0; i < buf->len; i++)
		CHECK(p[i] == 0);
	memset(buf->addr, (int)(w->id & 0xff), buf->len);
	w->claims++;
}

static void give_back(struct worker *w, struct bufpool_buf *buf)
{
	const uint8_t *p = buf->addr;

	for (size_t i = 0; i < buf->len; i++)
		CHECK(p[i] == (uint8_t)(w->id & 0xff));
	CHECK(atomic_load(&buf->owner) == w->id);
	atomic_store(&buf->owner, 0);
	bufpool_release(w->pool, buf);
}

static void *pool_worker(void *arg)
{
	struct worker *w = arg;
	struct bufpool_buf *held[MAX_HELD];
	int nheld = 0;

	for (long i = 0; i < w->iters; i++) {
		bool claim = nheld == 0 || (nheld < MAX_HELD && rand_r(&w->seed) % 2);

		if (claim) {
			uint8_t class = (uint8_t)(rand_r(&w->seed) % (POOL_TOP_CLASS + 1));
			int rc = bufpool_claim_class(w->pool, class, &held[nheld]);

			if (rc == -ENOBUFS) {
				w->limit_hits++;
				continue;
			}
			CHECK(rc == 0);
			CHECK(held[nheld]->class <= class);
			take(w, held[nheld++]);
		} else {
			int pick = rand_r(&w->seed) % nheld;

			give_back(w, held[pick]);
			held[pick] = held[--nheld];
		}
	}
	while (nheld)
		give_back(w, held[--nheld]);
	return NULL;
}

static void *stack_worker(void *arg)
{
	struct worker *w = arg;
	long iters = w->iters * STACK_ITERS_FACTOR;

	for (long i = 0; i < iters; i++) {
		uintptr_t expected = 0;
		uint32_t idx;

		if (!treiber_pop(w->stack, &idx))
			continue;
		CHECK(atomic_compare_exchange_strong(&w->stack_owner[idx], &expected, w->id));
		w->claims++;
		atomic_store(&w->stack_owner[idx], 0);
		treiber_push(w->stack, idx);
	}
	return NULL;
}

static void run_workers(struct worker *workers, void *(*fn)(void *))
{
	for (int t = 0; t < THREADS; t++)
		CHECK(pthread_create(&workers[t].thread, NULL, fn, &workers[t]) == 0);
	for (int t = 0; t < THREADS; t++)
		CHECK(pthread_join(workers[t].thread, NULL) == 0);
}

static void stress_pool(long iters)
{
	struct bufpool_config cfg = {.kind = BUFPOOL_RMB,
				     .max_bufs = POOL_MAX_BUFS,
				     .buf_bytes = POOL_BUF_BYTES,
				     .ops = &bufpool_noop_ops};
	struct bufpool *pool = bufpool_create(&cfg);
	struct worker workers[THREADS] = {0};
	long claims = 0, limit_hits = 0;
	uint32_t total = 0;

	CHECK(pool);
	for (int t = 0; t < THREADS; t++)
		workers[t] = (struct worker){.id = (uintptr_t)t + 1,
					     .seed = (unsigned int)t * 7919u + 1,
					     .iters = iters,
					     .pool = pool};
	run_workers(workers, pool_worker);
	for (int t = 0; t < THREADS; t++) {
		claims += workers[t].claims;
		limit_hits += workers[t].limit_hits;
	}
	for (uint8_t c = 0; c <= SMC_BUF_CLASS_MAX; c++)
		total += bufpool_class_count(pool, c);
	CHECK(total <= POOL_MAX_BUFS);
	CHECK(bufpool_destroy(pool, NULL) == 0);
	printf("pool:  %d threads, %ld claims, %u buffers, %ld limit hits\n", THREADS, claims,
	       total, limit_hits);
}

static void stress_stack(long iters)
{
	_Atomic uint32_t links[STACK_ELEMS];
	_Atomic uintptr_t owner[STACK_ELEMS];
	struct treiber_stack stack;
	struct worker workers[THREADS] = {0};
	long claims = 0;
	uint32_t idx, found = 0;

	treiber_init(&stack, links, STACK_ELEMS);
	for (uint32_t i = 0; i < STACK_ELEMS; i++) {
		atomic_init(&owner[i], 0);
		treiber_push(&stack, i);
	}
	for (int t = 0; t < THREADS; t++)
		workers[t] = (struct worker){.id = (uintptr_t)t + 1,
					     .iters = iters,
					     .stack = &stack,
					     .stack_owner = owner};
	run_workers(workers, stack_worker);
	for (int t = 0; t < THREADS; t++)
		claims += workers[t].claims;
	/* Nothing lost, nothing duplicated. */
	while (treiber_pop(&stack, &idx)) {
		CHECK(idx < STACK_ELEMS && !(found & (1u << idx)));
		found |= 1u << idx;
	}
	CHECK(found == (1u << STACK_ELEMS) - 1);
	printf("stack: %d threads, %ld pops, %d elements\n", THREADS, claims, STACK_ELEMS);
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? strtol(argv[1], NULL, 10) : DEFAULT_ITERS;

	CHECK(iters > 0);
	stress_stack(iters);
	stress_pool(iters);
	return 0;
}
