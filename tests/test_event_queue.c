// SPDX-License-Identifier: MIT
/*
 * The ready queue of an event set (event_queue.h): an item is queued
 * exactly while its state has a bit its watcher asked for or one reported
 * unasked; the eventfd is readable exactly while the queue is not empty;
 * collecting is level-triggered and fair (taken items go to the tail); and
 * states set from several threads while another collects keep all of that
 * (run under TSan in that build).
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "event_queue.h"

#define RD   1u
#define WR   2u
#define HUP  4u
#define NOPE 8u /* a bit nobody asks for and that is not reported unasked */

static struct evq q;

static int setup(void **state)
{
	(void)state;
	assert_int_equal(evq_init(&q, HUP), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	evq_fini(&q);
	return 0;
}

static bool efd_readable(void)
{
	struct pollfd p = {.fd = q.efd, .events = POLLIN};

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static int collect(struct evq_item **items, uint32_t *bits, int max)
{
	int n;

	pthread_mutex_lock(&q.lock);
	n = evq_collect_locked(&q, items, bits, max);
	pthread_mutex_unlock(&q.lock);
	return n;
}

/* Queued only for a bit asked for (or HUP, unasked); the eventfd follows. */
static void test_interest(void **state)
{
	struct evq_item a = {0};
	struct evq_item *it[4];
	uint32_t b[4];

	(void)state;
	evq_set_state(&q, &a, RD);
	assert_false(a.queued); /* not watched yet */
	assert_false(efd_readable());
	evq_set_interest(&q, &a, WR);
	assert_false(a.queued);
	evq_set_state(&q, &a, RD | NOPE);
	assert_false(a.queued);
	assert_int_equal(collect(it, b, 4), 0);
	evq_set_state(&q, &a, RD | WR);
	assert_true(a.queued);
	assert_true(efd_readable());
	assert_int_equal(collect(it, b, 4), 1);
	assert_ptr_equal(it[0], &a);
	assert_int_equal(b[0], WR); /* what was asked, not all it is */
	evq_set_state(&q, &a, RD);
	assert_false(a.queued);
	assert_false(efd_readable());
	evq_set_state(&q, &a, HUP); /* unasked */
	assert_true(a.queued);
	assert_int_equal(collect(it, b, 4), 1);
	assert_int_equal(b[0], HUP);
	evq_set_interest(&q, &a, 0); /* unwatched: out, whatever its state */
	assert_false(a.queued);
	assert_false(efd_readable());
}

/* Level-triggered: collected again and again while the state holds. */
static void test_level(void **state)
{
	struct evq_item a = {0};
	struct evq_item *it[2];
	uint32_t b[2];

	(void)state;
	evq_set_interest(&q, &a, RD);
	evq_set_state(&q, &a, RD);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(collect(it, b, 2), 1);
		assert_ptr_equal(it[0], &a);
		assert_true(efd_readable());
	}
	evq_set_state(&q, &a, 0);
	assert_int_equal(collect(it, b, 2), 0);
	assert_false(efd_readable());
}

/* Fewer slots than ready items: the others come first next time, and every
 * item is seen within ceil(n / max) calls. */
static void test_fair(void **state)
{
	enum { N = 7, MAX = 3 };
	struct evq_item a[N];
	struct evq_item *it[MAX];
	uint32_t b[MAX];
	int seen[N] = {0};

	(void)state;
	memset(a, 0, sizeof(a));
	for (int i = 0; i < N; i++) {
		evq_set_interest(&q, &a[i], RD);
		evq_set_state(&q, &a[i], RD);
	}
	for (int round = 0; round < 3; round++) {
		int n = collect(it, b, MAX);

		assert_int_equal(n, MAX);
		for (int i = 0; i < n; i++) {
			int idx = (int)(it[i] - a);

			assert_true(idx >= 0 && idx < N);
			/* no item twice before all were seen once */
			assert_int_equal(seen[idx], (round * MAX + i) / N);
			seen[idx]++;
		}
	}
	for (int i = 0; i < N; i++)
		assert_true(seen[i] >= 1);
	/* the whole queue in one call: each once */
	assert_int_equal(collect((struct evq_item *[N + 2]){0}, (uint32_t[N + 2]){0}, N + 2), N);
	for (int i = 0; i < N; i++)
		evq_set_interest(&q, &a[i], 0);
	assert_false(efd_readable());
	assert_null(q.head);
	assert_null(q.tail);
}

/* Out of the middle, the head and the tail: the list stays whole. */
static void test_unlink(void **state)
{
	struct evq_item a[4];
	struct evq_item *it[4];
	uint32_t b[4];

	(void)state;
	memset(a, 0, sizeof(a));
	for (int i = 0; i < 4; i++) {
		evq_set_interest(&q, &a[i], RD);
		evq_set_state(&q, &a[i], RD);
	}
	evq_set_state(&q, &a[1], 0);
	evq_set_state(&q, &a[0], 0);
	evq_set_state(&q, &a[3], 0);
	assert_int_equal(collect(it, b, 4), 1);
	assert_ptr_equal(it[0], &a[2]);
	assert_ptr_equal(q.head, &a[2]);
	assert_ptr_equal(q.tail, &a[2]);
	evq_set_state(&q, &a[2], 0);
	assert_false(efd_readable());
}

/* ---- threads ---------------------------------------------------------- */

enum { SETTERS = 4, ITEMS = 32, FLIPS = 20000 };

static struct evq_item items[ITEMS];
static pthread_mutex_t item_lock[ITEMS]; /* as a connection's lock: the setter's */
static atomic_bool setters_done;
static atomic_long bad_bits, collected;

static void *setter(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;

	for (int i = 0; i < FLIPS; i++) {
		int k = (int)(rand_r(&seed) % ITEMS);
		uint32_t st = (uint32_t)(rand_r(&seed) % 16);

		pthread_mutex_lock(&item_lock[k]);
		evq_set_state(&q, &items[k], st);
		pthread_mutex_unlock(&item_lock[k]);
		if (i % 97 == 0) {
			pthread_mutex_lock(&item_lock[k]);
			evq_set_interest(&q, &items[k], rand_r(&seed) % 2 ? RD : RD | WR);
			pthread_mutex_unlock(&item_lock[k]);
		}
	}
	return NULL;
}

static void *poller(void *arg)
{
	struct evq_item *it[8];
	uint32_t b[8];

	(void)arg;
	while (!atomic_load(&setters_done)) {
		struct pollfd p = {.fd = q.efd, .events = POLLIN};
		int n;

		poll(&p, 1, 1);
		n = collect(it, b, 8);
		for (int i = 0; i < n; i++)
			if (!b[i]) /* queued with nothing to report */
				atomic_fetch_add(&bad_bits, 1);
		atomic_fetch_add(&collected, n);
	}
	return NULL;
}

static void test_threads(void **state)
{
	pthread_t s[SETTERS], p;
	int queued = 0;

	(void)state;
	memset(items, 0, sizeof(items));
	atomic_store(&setters_done, false);
	for (int i = 0; i < ITEMS; i++) {
		pthread_mutex_init(&item_lock[i], NULL);
		evq_set_interest(&q, &items[i], RD);
	}
	assert_int_equal(pthread_create(&p, NULL, poller, NULL), 0);
	for (int i = 0; i < SETTERS; i++)
		assert_int_equal(pthread_create(&s[i], NULL, setter, (void *)(uintptr_t)(i + 1)),
				 0);
	for (int i = 0; i < SETTERS; i++)
		pthread_join(s[i], NULL);
	atomic_store(&setters_done, true);
	pthread_join(p, NULL);
	assert_int_equal(atomic_load(&bad_bits), 0);
	assert_true(atomic_load(&collected) > 0);
	/* at rest: queued exactly the wanted ones, and the list agrees */
	for (int i = 0; i < ITEMS; i++) {
		bool want = items[i].state & (items[i].interest | HUP);

		assert_int_equal(items[i].queued, want);
		queued += want;
	}
	{
		int n = 0;

		for (struct evq_item *it = q.head; it; it = it->next)
			n++;
		assert_int_equal(n, queued);
	}
	assert_int_equal(efd_readable(), queued > 0);
	for (int i = 0; i < ITEMS; i++) {
		evq_set_interest(&q, &items[i], 0);
		pthread_mutex_destroy(&item_lock[i]);
	}
	assert_false(efd_readable());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_interest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_level, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fair, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
