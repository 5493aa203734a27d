// SPDX-License-Identifier: MIT
/*
 * bench_bufpool: cost of claiming and releasing one buffer while many others
 * are held, for three free-list schemes:
 *
 *   treiber  libusmc's pool (bufpool_claim_class + bufpool_release)
 *   scan     the Linux scheme (smc_buf_get_slot): a list of descriptors,
 *            newest at the head, scanned under the read side of an rwlock
 *            with a compare-and-swap on each `used` flag; held buffers stay
 *            in the list, so they are scanned before the free ones
 *   mutex    a stack of free buffers behind a pthread mutex
 *
 * For each number of held buffers (10, 200, 1000, 10000) and 1 and 2
 * threads, every thread repeatedly claims one buffer and releases it for a
 * fixed time; the table shows the mean time of one claim + release as seen
 * by one thread (median of a few runs).
 *
 * All schemes use 64-byte buffers, zeroed on release, with a no-op
 * registration: the benchmark measures the free list, not memset or the NIC.
 * 10000 buffers exceed the protocol's 255 per link group, so the treiber pool
 * is created with max_bufs lifted and buf_bytes = 64 (bufpool_config).
 *
 * Usage: bench_bufpool [--quick] [--check]
 *   --quick  shorter runs (CI smoke test)
 *   --check  exit 1 unless treiber is flat (<= 1.5x from 10 to 10000 held)
 *            and >= 100x faster than scan at 1000 held (1 thread)
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bufpool.h"
#include "bufpool_noop.h"
#include "mono_clock.h"

#define BUF_BYTES	   64
#define MAX_THREADS	   2
#define RUNS		   3 /* median of */
#define FULL_RUN_NS	   200000000ull
#define QUICK_RUN_NS	   10000000ull
#define CLOCK_EVERY	   64 /* ops between clock reads */
#define FLAT_LIMIT	   1.5
#define SCAN_SPEEDUP_MIN   100.0
#define SPEEDUP_IN_USE_REF 1000u

static const unsigned int in_use_levels[] = {10, 200, 1000, 10000};
static const int thread_counts[] = {1, 2};
#define LEVELS	(sizeof(in_use_levels) / sizeof(in_use_levels[0]))
#define TCOUNTS (sizeof(thread_counts) / sizeof(thread_counts[0]))

static void die(const char *what)
{
	fprintf(stderr, "bench_bufpool: %s\n", what);
	exit(2);
}

/* A free-list scheme under test. */
struct scheme {
	const char *name;
	/* A pool with `held` buffers claimed and `spare` free ones. */
	void *(*create)(unsigned int held, unsigned int spare);
	void *(*claim)(void *pool);
	void (*release)(void *pool, void *buf);
	void (*destroy)(void *pool);
};

/* ---- treiber: the libusmc pool ---- */

static void *treiber_create(unsigned int held, unsigned int spare)
{
	struct bufpool_config cfg = {.kind = BUFPOOL_RMB,
				     .max_bufs = held + spare,
				     .buf_bytes = BUF_BYTES,
				     .ops = &bufpool_noop_ops};
	struct bufpool *pool = bufpool_create(&cfg);
	struct bufpool_buf *buf, **spares = calloc(spare, sizeof(*spares));

	if (!pool || !spares)
		die("out of memory");
	for (unsigned int i = 0; i < held; i++)
		if (bufpool_claim_class(pool, 0, &buf))
			die("treiber setup");
	for (unsigned int i = 0; i < spare; i++)
		if (bufpool_claim_class(pool, 0, &spares[i]))
			die("treiber setup");
	for (unsigned int i = 0; i < spare; i++)
		bufpool_release(pool, spares[i]);
	free(spares);
	return pool;
}

static void *treiber_claim(void *pool)
{
	struct bufpool_buf *buf;

	return bufpool_claim_class(pool, 0, &buf) ? NULL : buf;
}

static void treiber_release(void *pool, void *buf)
{
	bufpool_release(pool, buf);
}

static void treiber_destroy(void *pool)
{
	/* The held buffers are still claimed by design; they are freed anyway. */
	bufpool_destroy(pool, NULL);
}

/* ---- scan: the kernel's list + rwlock + cmpxchg(used) ---- */

struct scan_buf {
	struct scan_buf *next;
	_Atomic int used;
	void *addr;
};

struct scan_pool {
	pthread_rwlock_t lock; /* read: claim; write: add a buffer */
	struct scan_buf *head; /* newest first, as list_add() */
};

static struct scan_buf *scan_add(struct scan_pool *pool, int used)
{
	struct scan_buf *buf = calloc(1, sizeof(*buf));

	if (!buf || !(buf->addr = aligned_alloc(BUF_BYTES, BUF_BYTES)))
		die("out of memory");
	memset(buf->addr, 0, BUF_BYTES);
	atomic_init(&buf->used, used);
	pthread_rwlock_wrlock(&pool->lock);
	buf->next = pool->head;
	pool->head = buf;
	pthread_rwlock_unlock(&pool->lock);
	return buf;
}

static void *scan_create(unsigned int held, unsigned int spare)
{
	struct scan_pool *pool = calloc(1, sizeof(*pool));

	if (!pool || pthread_rwlock_init(&pool->lock, NULL))
		die("out of memory");
	/* Spares first: the held buffers, added later, sit in front of them. */
	for (unsigned int i = 0; i < spare; i++)
		scan_add(pool, 0);
	for (unsigned int i = 0; i < held; i++)
		scan_add(pool, 1);
	return pool;
}

static void *scan_claim(void *p)
{
	struct scan_pool *pool = p;
	struct scan_buf *buf;

	pthread_rwlock_rdlock(&pool->lock);
	for (buf = pool->head; buf; buf = buf->next) {
		int expected = 0;

		if (atomic_compare_exchange_strong(&buf->used, &expected, 1))
			break;
	}
	pthread_rwlock_unlock(&pool->lock);
	return buf ? buf : scan_add(pool, 1);
}

static void scan_release(void *pool, void *p)
{
	struct scan_buf *buf = p;

	memset(buf->addr, 0, BUF_BYTES);
	atomic_store_explicit(&buf->used, 0, memory_order_release);
}

static void scan_destroy(void *p)
{
	struct scan_pool *pool = p;

	while (pool->head) {
		struct scan_buf *buf = pool->head;

		pool->head = buf->next;
		free(buf->addr);
		free(buf);
	}
	pthread_rwlock_destroy(&pool->lock);
	free(pool);
}

/* ---- mutex: a locked stack of free buffers ---- */

struct mutex_pool {
	pthread_mutex_t lock;
	void **free; /* stack of free buffers */
	unsigned int nfree;
	void **all; /* every buffer, for destroy */
	unsigned int nall, cap;
};

static void *mutex_new_buf(struct mutex_pool *pool)
{
	void *buf = aligned_alloc(BUF_BYTES, BUF_BYTES);

	if (!buf || pool->nall == pool->cap)
		die("mutex pool setup");
	memset(buf, 0, BUF_BYTES);
	pool->all[pool->nall++] = buf;
	return buf;
}

static void *mutex_create(unsigned int held, unsigned int spare)
{
	struct mutex_pool *pool = calloc(1, sizeof(*pool));

	if (!pool)
		die("out of memory");
	pool->cap = held + spare;
	pool->free = calloc(pool->cap, sizeof(void *));
	pool->all = calloc(pool->cap, sizeof(void *));
	if (!pool->free || !pool->all || pthread_mutex_init(&pool->lock, NULL))
		die("out of memory");
	for (unsigned int i = 0; i < held; i++)
		mutex_new_buf(pool);
	for (unsigned int i = 0; i < spare; i++)
		pool->free[pool->nfree++] = mutex_new_buf(pool);
	return pool;
}

static void *mutex_claim(void *p)
{
	struct mutex_pool *pool = p;
	void *buf = NULL;

	pthread_mutex_lock(&pool->lock);
	if (pool->nfree)
		buf = pool->free[--pool->nfree];
	pthread_mutex_unlock(&pool->lock);
	return buf; /* the bench never needs to grow this one */
}

static void mutex_release(void *p, void *buf)
{
	struct mutex_pool *pool = p;

	memset(buf, 0, BUF_BYTES);
	pthread_mutex_lock(&pool->lock);
	pool->free[pool->nfree++] = buf;
	pthread_mutex_unlock(&pool->lock);
}

static void mutex_destroy(void *p)
{
	struct mutex_pool *pool = p;

	for (unsigned int i = 0; i < pool->nall; i++)
		free(pool->all[i]);
	free(pool->all);
	free(pool->free);
	pthread_mutex_destroy(&pool->lock);
	free(pool);
}

static const struct scheme schemes[] = {
	{"treiber", treiber_create, treiber_claim, treiber_release, treiber_destroy},
	{"scan", scan_create, scan_claim, scan_release, scan_destroy},
	{"mutex", mutex_create, mutex_claim, mutex_release, mutex_destroy},
};
#define SCHEMES (sizeof(schemes) / sizeof(schemes[0]))
enum { TREIBER, SCAN, MUTEX };

/* ---- measurement ---- */

struct runner {
	pthread_t thread;
	const struct scheme *scheme;
	void *pool;
	pthread_barrier_t *start;
	uint64_t duration_ns;
	uint64_t ops;
	uint64_t elapsed_ns;
};

static void *runner_main(void *arg)
{
	struct runner *r = arg;
	uint64_t begin, end, ops = 0;

	pthread_barrier_wait(r->start);
	begin = mono_ns();
	do {
		for (int i = 0; i < CLOCK_EVERY; i++) {
			void *buf = r->scheme->claim(r->pool);

			if (!buf)
				die("claim failed");
			r->scheme->release(r->pool, buf);
		}
		ops += CLOCK_EVERY;
		end = mono_ns();
	} while (end - begin < r->duration_ns);
	r->ops = ops;
	r->elapsed_ns = end - begin;
	return NULL;
}

/* Mean ns per claim + release over the threads of one run. */
static double run_once(const struct scheme *scheme, unsigned int held, int threads,
		       uint64_t duration_ns)
{
	struct runner runners[MAX_THREADS];
	pthread_barrier_t start;
	void *pool = scheme->create(held, (unsigned int)threads);
	double sum = 0;

	pthread_barrier_init(&start, NULL, (unsigned int)threads);
	for (int t = 0; t < threads; t++) {
		runners[t] = (struct runner){.scheme = scheme,
					     .pool = pool,
					     .start = &start,
					     .duration_ns = duration_ns};
		if (pthread_create(&runners[t].thread, NULL, runner_main, &runners[t]))
			die("pthread_create");
	}
	for (int t = 0; t < threads; t++) {
		pthread_join(runners[t].thread, NULL);
		sum += (double)runners[t].elapsed_ns / (double)runners[t].ops;
	}
	pthread_barrier_destroy(&start);
	scheme->destroy(pool);
	return sum / threads;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double measure(const struct scheme *scheme, unsigned int held, int threads,
		      uint64_t duration_ns)
{
	double runs[RUNS];

	for (int i = 0; i < RUNS; i++)
		runs[i] = run_once(scheme, held, threads, duration_ns);
	qsort(runs, RUNS, sizeof(runs[0]), cmp_double);
	return runs[RUNS / 2];
}

static void print_table(double ns[SCHEMES][TCOUNTS][LEVELS])
{
	printf("claim+release, ns/op per thread (median of %d runs)\n\n", RUNS);
	printf("%-8s %7s %10s %10s %10s %11s %11s\n", "threads", "in-use", "treiber", "scan",
	       "mutex", "scan/treib", "mutex/treib");
	for (size_t t = 0; t < TCOUNTS; t++)
		for (size_t l = 0; l < LEVELS; l++)
			printf("%-8d %7u %10.1f %10.1f %10.1f %10.1fx %10.1fx\n", thread_counts[t],
			       in_use_levels[l], ns[TREIBER][t][l], ns[SCAN][t][l], ns[MUTEX][t][l],
			       ns[SCAN][t][l] / ns[TREIBER][t][l],
			       ns[MUTEX][t][l] / ns[TREIBER][t][l]);
}

/* The acceptance criteria, on the 1-thread row. */
static bool verdict(double ns[SCHEMES][TCOUNTS][LEVELS])
{
	size_t ref = 0;
	double flat, speedup;
	bool ok;

	for (size_t l = 0; l < LEVELS; l++)
		if (in_use_levels[l] == SPEEDUP_IN_USE_REF)
			ref = l;
	flat = ns[TREIBER][0][LEVELS - 1] / ns[TREIBER][0][0];
	speedup = ns[SCAN][0][ref] / ns[TREIBER][0][ref];
	ok = flat <= FLAT_LIMIT && speedup >= SCAN_SPEEDUP_MIN;
	printf("\ntreiber %u vs %u in use: %.2fx (limit %.1fx)\n", in_use_levels[LEVELS - 1],
	       in_use_levels[0], flat, FLAT_LIMIT);
	printf("scan/treiber at %u in use: %.0fx (need >= %.0fx)\n", SPEEDUP_IN_USE_REF, speedup,
	       SCAN_SPEEDUP_MIN);
	printf("acceptance: %s\n", ok ? "PASS" : "FAIL");
	return ok;
}

int main(int argc, char **argv)
{
	static double ns[SCHEMES][TCOUNTS][LEVELS];
	uint64_t duration_ns = FULL_RUN_NS;
	bool check = false;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			duration_ns = QUICK_RUN_NS;
		} else if (!strcmp(argv[i], "--check")) {
			check = true;
		} else {
			fprintf(stderr, "usage: %s [--quick] [--check]\n", argv[0]);
			return 2;
		}
	}
	for (size_t s = 0; s < SCHEMES; s++)
		for (size_t t = 0; t < TCOUNTS; t++)
			for (size_t l = 0; l < LEVELS; l++)
				ns[s][t][l] = measure(&schemes[s], in_use_levels[l],
						      thread_counts[t], duration_ns);
	print_table(ns);
	return verdict(ns) || !check ? 0 : 1;
}
