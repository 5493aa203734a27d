// SPDX-License-Identifier: MIT
/*
 * Pools that share a budget of registered memory (bufpool.h struct
 * bufpool_budget, a context's USMC_OPT_REG_MEM_MAX): the budget is never
 * passed, free buffers of any pool are deregistered to make room before a
 * growth is refused, an RMB the peer knows is reported before it goes, the
 * kernel's own limit (the hook's -ENOMEM) is met the same way, past
 * small_from claimed bytes growths take the smallest class, and the
 * counts stay right. A fake registration hook stands in for ibv_reg_mr().
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bufpool.h"
#include "common/bufpool_fake.h"

#define KiB	       1024u
#define BUF	       (64 * KiB) /* every test's buffers: class 2 */
#define DROPPED_MAX    8
#define STRESS_THREADS 4
#define STRESS_ROUNDS  2000
#define STRESS_HOLD    2 /* buffers a thread holds at once: 8 wanted, 3 fit */

/* The rkeys a shrink reported (cfg.dropped). */
static uint32_t dropped[DROPPED_MAX];
static int ndropped;

static void on_dropped(void *arg, const struct bufpool_buf *buf)
{
	(void)arg;
	assert_true(ndropped < DROPPED_MAX);
	dropped[ndropped++] = buf->rkey;
}

/* The fake's @limit (0: none) plays the kernel's RLIMIT_MEMLOCK. */
static void fake_init(struct fake_reg *f)
{
	fake_reg_init(f, 1);
	ndropped = 0;
}

static struct bufpool *make_pool(struct fake_reg *f, struct bufpool_budget *b,
				 enum bufpool_kind kind)
{
	struct bufpool_config cfg = {.kind = kind,
				     .ops = &fake_reg_ops,
				     .ops_ctx = f,
				     .budget = b,
				     .dropped = on_dropped};
	struct bufpool *pool = bufpool_create(&cfg);

	assert_non_null(pool);
	return pool;
}

static struct bufpool_buf *claim(struct bufpool *pool)
{
	struct bufpool_buf *buf = NULL;

	assert_int_equal(bufpool_claim(pool, BUF, &buf), 0);
	assert_int_equal(buf->len, BUF);
	return buf;
}

static uint32_t pool_total(struct bufpool *pool)
{
	return bufpool_class_count(pool, smc_compress_bufsize(BUF));
}

/* A growth past the budget with nothing free anywhere is refused
 * (-ENOMEM, also for the smaller classes tried after it), counted, and
 * pins nothing. */
static void test_budget_respected(void **state)
{
	struct bufpool_budget b;
	struct fake_reg f;
	struct bufpool *pool;
	struct bufpool_buf *bufs[3], *none;

	(void)state;
	fake_init(&f);
	bufpool_budget_init(&b, 3 * BUF);
	pool = make_pool(&f, &b, BUFPOOL_SNDBUF);
	for (int i = 0; i < 3; i++)
		bufs[i] = claim(pool);
	assert_int_equal(atomic_load(&b.pinned), 3 * BUF);
	assert_int_equal(bufpool_claim(pool, BUF, &none), -ENOMEM);
	assert_int_equal(bufpool_claim(pool, 16 * KiB, &none), -ENOMEM);
	assert_int_equal(f.regs, 3); /* the hook was not even asked */
	assert_int_equal(atomic_load(&b.pinned), 3 * BUF);
	assert_true(atomic_load(&b.refused) >= 2);
	assert_int_equal(atomic_load(&b.shrinks), 0);
	for (int i = 0; i < 3; i++)
		bufpool_release(pool, bufs[i]);
	assert_int_equal(bufpool_destroy(pool, NULL), 0);
	assert_int_equal(atomic_load(&b.pinned), 0);
	assert_int_equal(f.deregs, f.regs);
	bufpool_budget_fini(&b);
	assert_int_equal(f.errors, 0);
	fake_reg_fini(&f);
}

/* Past small_from claimed bytes a claim with no free buffer of its class
 * grows a 16 KiB one; a free buffer of its class is still taken; the
 * claimed count follows claims, releases and the pool's end. */
static void test_small_past_threshold(void **state)
{
	struct bufpool_budget b;
	struct fake_reg f;
	struct bufpool *pool;
	struct bufpool_buf *bufs[4];

	(void)state;
	fake_init(&f);
	bufpool_budget_init(&b, 16 * BUF);
	atomic_store(&b.small_from, 2 * BUF);
	pool = make_pool(&f, &b, BUFPOOL_RMB);
	bufs[0] = claim(pool);
	bufs[1] = claim(pool);
	assert_int_equal(atomic_load(&b.claimed), 2 * BUF);
	assert_int_equal(bufpool_claim(pool, BUF, &bufs[2]), 0);
	assert_int_equal(bufs[2]->len, 16 * KiB);
	assert_int_equal(atomic_load(&b.claimed), 2 * BUF + 16 * KiB);
	bufpool_release(pool, bufs[0]);
	bufs[3] = claim(pool); /* the free one, past the threshold too */
	assert_ptr_equal(bufs[3], bufs[0]);
	assert_int_equal(pool_total(pool), 2);
	bufpool_release(pool, bufs[1]);
	bufpool_release(pool, bufs[2]);
	assert_int_equal(atomic_load(&b.claimed), BUF);
	/* a pool that ends with a claimed buffer (a defect of its owner's)
	 * takes it out of the count too */
	assert_int_equal(bufpool_destroy(pool, NULL), 1);
	assert_int_equal(atomic_load(&b.claimed), 0);
	assert_int_equal(atomic_load(&b.pinned), 0);
	bufpool_budget_fini(&b);
	fake_reg_fini(&f);
}

/* Two link groups' pools under one budget: the idle one's free buffers
 * are deregistered to make room for the busy one, one per buffer needed;
 * only with none left free is a growth refused. */
static void test_idle_shrunk_before_refusal(void **state)
{
	struct bufpool_budget b;
	struct fake_reg f;
	struct bufpool *idle, *busy;
	struct bufpool_buf *a[2], *x[2], *none;

	(void)state;
	fake_init(&f);
	bufpool_budget_init(&b, 2 * BUF);
	idle = make_pool(&f, &b, BUFPOOL_SNDBUF);
	busy = make_pool(&f, &b, BUFPOOL_SNDBUF);
	a[0] = claim(idle);
	a[1] = claim(idle);
	bufpool_release(idle, a[0]); /* its connections closed: both free */
	bufpool_release(idle, a[1]);
	assert_int_equal(pool_total(idle), 2);
	x[0] = claim(busy);
	assert_int_equal(atomic_load(&b.shrinks), 1);
	assert_int_equal(pool_total(idle), 1);
	assert_int_equal(f.deregs, 1);
	x[1] = claim(busy);
	assert_int_equal(atomic_load(&b.shrinks), 2);
	assert_int_equal(pool_total(idle), 0);
	assert_int_equal(atomic_load(&b.pinned), 2 * BUF);
	assert_int_equal(atomic_load(&b.refused), 0);
	/* now everything registered is claimed: the idle pool may not grow */
	assert_int_equal(bufpool_claim(idle, BUF, &none), -ENOMEM);
	assert_true(atomic_load(&b.refused) > 0);
	/* the emptied slots are reused when the budget allows again */
	bufpool_release(busy, x[1]);
	a[0] = claim(idle);
	assert_int_equal(pool_total(idle), 1);
	assert_int_equal(pool_total(busy), 1);
	assert_int_equal(atomic_load(&b.pinned), 2 * BUF);
	assert_true(f.peak <= 2 * BUF); /* never more registered at once */
	bufpool_release(idle, a[0]);
	bufpool_release(busy, x[0]);
	assert_int_equal(bufpool_destroy(idle, NULL), 0);
	assert_int_equal(atomic_load(&b.pinned), BUF);
	assert_int_equal(bufpool_destroy(busy, NULL), 0);
	assert_int_equal(atomic_load(&b.pinned), 0);
	assert_int_equal(f.deregs, f.regs);
	bufpool_budget_fini(&b);
	assert_int_equal(f.errors, 0);
	fake_reg_fini(&f);
}

/* A free RMB whose rkey the peer holds is reported before a shrink drops
 * it (the link group sends DELETE_RKEY); one the peer never knew is not. */
static void test_shrunk_rmb_reported(void **state)
{
	struct bufpool_budget b;
	struct fake_reg f;
	struct bufpool *rmbs, *other;
	struct bufpool_buf *known, *unknown, *x[2];
	uint32_t known_rkey;

	(void)state;
	fake_init(&f);
	bufpool_budget_init(&b, 2 * BUF);
	rmbs = make_pool(&f, &b, BUFPOOL_RMB);
	other = make_pool(&f, &b, BUFPOOL_SNDBUF);
	unknown = claim(rmbs);
	known = claim(rmbs);
	known->rkey_confirmed = true;
	known_rkey = known->rkey;
	bufpool_release(rmbs, unknown);
	bufpool_release(rmbs, known); /* the top of the free list: shrunk first */
	x[0] = claim(other);
	assert_int_equal(ndropped, 1);
	assert_int_equal(dropped[0], known_rkey);
	x[1] = claim(other);
	assert_int_equal(ndropped, 1); /* the unknown one went unreported */
	assert_int_equal(pool_total(rmbs), 0);
	bufpool_release(other, x[0]);
	bufpool_release(other, x[1]);
	assert_int_equal(bufpool_destroy(rmbs, NULL), 0);
	assert_int_equal(bufpool_destroy(other, NULL), 0);
	assert_int_equal(f.deregs, f.regs);
	bufpool_budget_fini(&b);
	assert_int_equal(f.errors, 0);
	fake_reg_fini(&f);
}

/* No cap of ours (0), but the kernel's limit is met (the hook's -ENOMEM):
 * free buffers are shrunk and the registration tried once more. */
static void test_kernel_limit_shrinks(void **state)
{
	struct bufpool_budget b;
	struct fake_reg f;
	struct bufpool *idle, *busy;
	struct bufpool_buf *a, *x[2], *none;

	(void)state;
	fake_init(&f);
	f.limit = 2 * BUF;
	bufpool_budget_init(&b, 0);
	idle = make_pool(&f, &b, BUFPOOL_SNDBUF);
	busy = make_pool(&f, &b, BUFPOOL_SNDBUF);
	a = claim(idle);
	x[0] = claim(busy);
	bufpool_release(idle, a);
	x[1] = claim(busy); /* the hook refused once; the idle buffer made room */
	assert_int_equal(atomic_load(&b.shrinks), 1);
	assert_int_equal(atomic_load(&b.pinned), 2 * BUF);
	assert_int_equal(pool_total(idle), 0);
	/* nothing free left: refused, and the bytes it counted given back */
	assert_int_equal(bufpool_claim(idle, BUF, &none), -ENOMEM);
	assert_int_equal(atomic_load(&b.pinned), 2 * BUF);
	assert_true(atomic_load(&b.refused) > 0);
	bufpool_release(busy, x[0]);
	bufpool_release(busy, x[1]);
	assert_int_equal(bufpool_destroy(idle, NULL), 0);
	assert_int_equal(bufpool_destroy(busy, NULL), 0);
	assert_int_equal(atomic_load(&b.pinned), 0);
	bufpool_budget_fini(&b);
	assert_int_equal(f.errors, 0);
	fake_reg_fini(&f);
}

/* bufpool_budget_shrink() on its own (a budget lowered at run time): it
 * frees only free buffers, as many as asked, and the pools stay whole. */
static void test_shrink_on_demand(void **state)
{
	struct bufpool_budget b;
	struct fake_reg f;
	struct bufpool *pool;
	struct bufpool_buf *bufs[4];
	struct bufpool_teardown_report rep;

	(void)state;
	fake_init(&f);
	bufpool_budget_init(&b, 0);
	pool = make_pool(&f, &b, BUFPOOL_RMB);
	for (int i = 0; i < 4; i++)
		bufs[i] = claim(pool);
	bufpool_release(pool, bufs[0]);
	bufpool_release(pool, bufs[1]);
	assert_int_equal(bufpool_budget_shrink(&b, BUF + 1), 2 * BUF); /* whole buffers */
	assert_int_equal(bufpool_budget_shrink(&b, BUF), 0);	       /* the rest are claimed */
	assert_int_equal(pool_total(pool), 2);
	assert_int_equal(atomic_load(&b.pinned), 2 * BUF);
	bufpool_release(pool, bufs[2]);
	bufpool_release(pool, bufs[3]);
	assert_int_equal(bufpool_destroy(pool, &rep), 0);
	assert_int_equal(rep.busy, 0);
	assert_int_equal(f.deregs, 4);
	assert_int_equal(atomic_load(&b.pinned), 0);
	bufpool_budget_fini(&b);
	assert_int_equal(f.errors, 0);
	fake_reg_fini(&f);
}

/* Threads claim and release on two pools under a budget of a few
 * buffers, shrinking each other's free lists: the budget is never passed
 * (the hook's peak), nobody gets a buffer twice, the counts end at 0. */
struct stress {
	struct bufpool *pool;
	unsigned int got, refused, bad; /* cmocka asserts only in the main thread */
};

static void *stress_thread(void *arg)
{
	struct stress *s = arg;

	for (int i = 0; i < STRESS_ROUNDS; i++) {
		struct bufpool_buf *held[STRESS_HOLD];
		int n = 0;

		while (n < STRESS_HOLD) {
			int rc = bufpool_claim(s->pool, BUF, &held[n]);

			if (rc) {
				s->bad += rc != -ENOMEM;
				s->refused++;
				break;
			}
			/* ours alone: a tag survives until the release */
			atomic_store(&held[n]->owner, (uintptr_t)s);
			*(volatile uint8_t *)held[n]->addr = (uint8_t)i;
			n++;
		}
		while (n-- > 0) {
			s->bad += atomic_load(&held[n]->owner) != (uintptr_t)s;
			bufpool_release(s->pool, held[n]);
			s->got++;
		}
	}
	return NULL;
}

static void test_stress_shared_budget(void **state)
{
	struct bufpool_budget b;
	struct fake_reg f;
	struct bufpool *pools[2];
	struct stress st[STRESS_THREADS];
	pthread_t t[STRESS_THREADS];
	unsigned int got = 0;

	(void)state;
	fake_init(&f);
	bufpool_budget_init(&b, 3 * BUF);
	pools[0] = make_pool(&f, &b, BUFPOOL_SNDBUF);
	pools[1] = make_pool(&f, &b, BUFPOOL_SNDBUF);
	for (int i = 0; i < STRESS_THREADS; i++) {
		st[i] = (struct stress){.pool = pools[i % 2]};
		assert_int_equal(pthread_create(&t[i], NULL, stress_thread, &st[i]), 0);
	}
	for (int i = 0; i < STRESS_THREADS; i++) {
		pthread_join(t[i], NULL);
		got += st[i].got; /* no fairness promised: one thread may starve */
		assert_int_equal(st[i].bad, 0);
	}
	assert_true(got > 0);
	assert_true(f.peak <= 3 * BUF);
	assert_true(atomic_load(&b.pinned) <= 3 * BUF);
	print_message("shrinks %llu refused %llu\n", (unsigned long long)atomic_load(&b.shrinks),
		      (unsigned long long)atomic_load(&b.refused));
	assert_int_equal(bufpool_destroy(pools[0], NULL), 0);
	assert_int_equal(bufpool_destroy(pools[1], NULL), 0);
	assert_int_equal(atomic_load(&b.pinned), 0);
	assert_int_equal(f.deregs, f.regs);
	bufpool_budget_fini(&b);
	assert_int_equal(f.errors, 0);
	fake_reg_fini(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_budget_respected),
		cmocka_unit_test(test_small_past_threshold),
		cmocka_unit_test(test_idle_shrunk_before_refusal),
		cmocka_unit_test(test_shrunk_rmb_reported),
		cmocka_unit_test(test_kernel_limit_shrinks),
		cmocka_unit_test(test_shrink_on_demand),
		cmocka_unit_test(test_stress_shared_budget),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
