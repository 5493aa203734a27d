// SPDX-License-Identifier: MIT
/*
 * The preload's background closes (libusmc/preload/preload_reaper.c) with
 * fakes for libusmc and the preload around it: a fake usmc_close() spends
 * the whole linger it is given, as a real close does when the peer never
 * reads. Closes given at once must end within about one linger time, not
 * one per connection; no more of them linger at a time than the preload
 * has threads for; beyond the cap of closes in progress a close is
 * abortive at once, and counted.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "preload.h"

#define LINGER_MS 500
#define SLACK_MS  1000 /* a loaded 2-core host, TSan: far below one more linger */

struct usmc_conn {
	long linger_ms;
	atomic_bool closed, aborted;
	atomic_long done_ms;
};

/* ---- fakes of the preload ---- */

pid_t my_pid;
__thread int in_lib;
static atomic_int lingering, max_lingering; /* usmc_close() calls at a time */
static atomic_int log_lines;

static void raise_max(atomic_int *max, int v)
{
	int m = atomic_load(max);

	while (v > m && !atomic_compare_exchange_weak(max, &m, v))
		;
}

int preload_thread_start(void *(*fn)(void *), void *arg, const char *name, size_t stack)
{
	pthread_attr_t a;
	pthread_t th;
	int rc;

	(void)name;
	(void)stack;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&th, &a, fn, arg);
	pthread_attr_destroy(&a);
	return rc;
}

void preload_log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
	atomic_fetch_add(&log_lines, 1);
}

/* ---- fakes of libusmc ---- */

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int usmc_conn_getopt(const struct usmc_conn *c, enum usmc_opt opt, long *value)
{
	assert_int_equal(opt, USMC_OPT_LINGER_MS);
	*value = c->linger_ms;
	return 0;
}

int usmc_conn_setopt(struct usmc_conn *c, enum usmc_opt opt, long value)
{
	assert_int_equal(opt, USMC_OPT_LINGER_MS);
	c->linger_ms = value;
	return 0;
}

/* The peer never reads: the close waits out the linger it was given. */
int usmc_close(struct usmc_conn *c)
{
	struct timespec ts = {c->linger_ms / 1000, c->linger_ms % 1000 * 1000000L};

	raise_max(&max_lingering, atomic_fetch_add(&lingering, 1) + 1);
	nanosleep(&ts, NULL);
	atomic_fetch_sub(&lingering, 1);
	atomic_store(&c->done_ms, now_ms());
	atomic_store(&c->closed, true);
	return 0;
}

int usmc_abort(struct usmc_conn *c)
{
	atomic_store(&c->done_ms, now_ms());
	atomic_store(&c->aborted, true);
	return 0;
}

/* ---- the tests ---- */

static struct usmc_conn *conns_new(int n, long linger_ms)
{
	struct usmc_conn *v = calloc(n, sizeof(*v));

	assert_non_null(v);
	for (int i = 0; i < n; i++)
		v[i].linger_ms = linger_ms;
	return v;
}

/* n closes given at once all end within one linger (plus slack). */
static void closes_at_once(int n)
{
	struct usmc_conn *v = conns_new(n, LINGER_MS);
	long t0 = now_ms(), took;

	atomic_store(&max_lingering, 0);
	for (int i = 0; i < n; i++)
		reaper_close(&v[i], false);
	reaper_flush();
	took = now_ms() - t0;
	print_message("%d closes, linger %d ms each: all ended after %ld ms\n", n, LINGER_MS, took);
	for (int i = 0; i < n; i++) {
		assert_true(atomic_load(&v[i].closed));
		assert_false(atomic_load(&v[i].aborted));
		assert_true(atomic_load(&v[i].done_ms) - t0 < LINGER_MS + SLACK_MS);
	}
	assert_true(took < LINGER_MS + SLACK_MS);
	assert_true(atomic_load(&max_lingering) > 1);
	free(v);
}

static void test_linger_in_parallel(void **state)
{
	(void)state;
	closes_at_once(REAPER_MAX_THREADS);
}

/* More closes than threads: those queued behind have spent their linger
 * in the queue, and the threads stay within their bound. */
static void test_more_than_threads(void **state)
{
	(void)state;
	closes_at_once(REAPER_MAX_THREADS * 5);
	assert_true(atomic_load(&max_lingering) <= REAPER_MAX_THREADS);
}

/* An abortive close (SO_LINGER {1, 0}) goes through the queue too, and
 * aborts. */
static void test_abort_queued(void **state)
{
	struct usmc_conn c = {.linger_ms = LINGER_MS};

	(void)state;
	reaper_close(&c, true);
	reaper_flush();
	assert_true(atomic_load(&c.aborted));
	assert_false(atomic_load(&c.closed));
}

/* At the cap, a close is abortive on the caller's thread at once, logged
 * and counted; those before it linger on. */
static void test_cap(void **state)
{
	const int extra = 10;
	struct usmc_conn *v = conns_new(REAPER_MAX_PENDING + extra, 3000);
	int logs = atomic_load(&log_lines);

	(void)state;
	atomic_store(&max_lingering, 0);
	assert_int_equal(reaper_overflows(), 0);
	for (int i = 0; i < REAPER_MAX_PENDING; i++)
		reaper_close(&v[i], false);
	for (int i = REAPER_MAX_PENDING; i < REAPER_MAX_PENDING + extra; i++) {
		reaper_close(&v[i], false);
		assert_true(atomic_load(&v[i].aborted)); /* before reaper_close() returned */
	}
	assert_int_equal(reaper_overflows(), extra);
	assert_int_equal(atomic_load(&log_lines), logs + 1); /* one line, not one per close */
	for (int i = 0; i < REAPER_MAX_PENDING; i++)
		assert_false(atomic_load(&v[i].aborted));
	reaper_flush();
	for (int i = 0; i < REAPER_MAX_PENDING; i++)
		assert_true(atomic_load(&v[i].closed));
	assert_true(atomic_load(&max_lingering) <= REAPER_MAX_THREADS);
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linger_in_parallel),
		cmocka_unit_test(test_more_than_threads),
		cmocka_unit_test(test_abort_queued),
		cmocka_unit_test(test_cap),
	};

	my_pid = getpid();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
