// SPDX-License-Identifier: MIT
/* Unit tests of the buffer pools (libusmc/bufpool.c) and treiber.h. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bufpool.h"
#include "common/bufpool_fake.h"
#include "treiber.h"

#define KiB	      1024u
#define FAKE_KEY_BASE (1u << FAKE_REG_KEY_SHIFT) /* fake 1's first lkey */
#define PATTERN	      0xa5

static struct bufpool *make_pool(struct fake_reg *f, enum bufpool_kind kind, uint32_t max_bufs)
{
	struct bufpool_config cfg = {
		.kind = kind, .max_bufs = max_bufs, .ops = &fake_reg_ops, .ops_ctx = f};
	struct bufpool *pool = bufpool_create(&cfg);

	assert_non_null(pool);
	return pool;
}

static void destroy_clean(struct bufpool *pool, struct fake_reg *f)
{
	struct bufpool_teardown_report rep;

	assert_int_equal(bufpool_destroy(pool, &rep), 0);
	assert_int_equal(rep.busy, 0);
	assert_int_equal(rep.dereg_fails, 0);
	assert_int_equal(f->deregs, f->regs);
	assert_int_equal(f->errors, 0);
	fake_reg_fini(f);
}

static bool all_zero(const struct bufpool_buf *buf)
{
	const uint8_t *p = buf->addr;

	for (size_t i = 0; i < buf->len; i++)
		if (p[i])
			return false;
	return true;
}

static void test_compress_table(void **state)
{
	static const struct {
		size_t size;
		uint8_t class;
	} table[] = {
		{0, 0},
		{1, 0},
		{16 * KiB - 1, 0},
		{16 * KiB, 0},
		{16 * KiB + 1, 1},
		{32 * KiB, 1},
		{32 * KiB + 1, 2},
		{64 * KiB, 2}, /* net.smc.rmem default / 2 ... */
		{100 * KiB, 3},
		{128 * KiB, 3},
		{512 * KiB, 5},
		{1024 * KiB, 6},
		{(size_t)256 << 20, 14},
		{((size_t)256 << 20) + 1, 15},
		{(size_t)512 << 20, 15},
		{((size_t)512 << 20) + 1, 15}, /* capped */
		{(size_t)1 << 40, 15},
		{SIZE_MAX, 15},
	};

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		assert_int_equal(smc_compress_bufsize(table[i].size), table[i].class);
	for (uint8_t c = 0; c <= SMC_BUF_CLASS_MAX; c++) {
		assert_int_equal(smc_uncompress_bufsize(c), (size_t)16 * KiB << c);
		assert_int_equal(smc_compress_bufsize(smc_uncompress_bufsize(c)), c);
		assert_int_equal(smc_compress_bufsize(smc_uncompress_bufsize(c) + 1),
				 c == SMC_BUF_CLASS_MAX ? c : c + 1);
	}
	assert_int_equal(smc_uncompress_bufsize(SMC_BUF_CLASS_MAX), (size_t)512 << 20);
}

static void test_treiber_lifo(void **state)
{
	_Atomic uint32_t links[3];
	struct treiber_stack s;
	uint32_t idx;

	treiber_init(&s, links, 3);
	assert_false(treiber_pop(&s, &idx));
	for (uint32_t i = 0; i < 3; i++)
		treiber_push(&s, i);
	for (uint32_t i = 3; i-- > 0;) {
		assert_true(treiber_pop(&s, &idx));
		assert_int_equal(idx, i);
	}
	assert_false(treiber_pop(&s, &idx));
	/* Six successful operations, six tag increments. */
	assert_int_equal(treiber_head_tag(atomic_load(&s.head)), 6);
}

/*
 * The ABA interleaving, replayed deterministically: a slow popper has read
 * head {A, t} and next[A] = B; others pop A, pop B and push A back. Its CAS
 * must fail although the head index is A again.
 */
static void test_treiber_aba_cas_fails(void **state)
{
	_Atomic uint32_t links[2];
	struct treiber_stack s;
	uint32_t a = 0, b = 0;

	treiber_init(&s, links, 2);
	treiber_push(&s, 1);
	treiber_push(&s, 0); /* stack: 0 (A) -> 1 (B) */
	uint64_t seen = atomic_load(&s.head);
	uint32_t seen_next = atomic_load(&links[treiber_head_top(seen) - 1]);
	uint64_t stale = treiber_head_make(seen_next, treiber_head_tag(seen) + 1);

	assert_true(treiber_pop(&s, &a));
	assert_true(treiber_pop(&s, &b));
	treiber_push(&s, a);
	assert_int_equal(treiber_head_top(atomic_load(&s.head)), treiber_head_top(seen));
	assert_false(atomic_compare_exchange_strong(&s.head, &seen, stale));
	/* The stack is intact: only A is on it, B stays claimed. */
	assert_true(treiber_pop(&s, &a));
	assert_int_equal(a, 0);
	assert_false(treiber_pop(&s, &b));
}

static void test_claim_release_rmb(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool *pool = make_pool(&f, BUFPOOL_RMB, 0);
	struct bufpool_buf *buf, *again;

	assert_int_equal(bufpool_claim(pool, 64 * KiB, &buf), 0);
	assert_int_equal(buf->class, 2);
	assert_int_equal(buf->len, 64 * KiB);
	assert_int_equal((uintptr_t)buf->addr % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
	assert_int_equal(buf->lkey, FAKE_KEY_BASE);
	assert_int_equal(buf->rkey, FAKE_KEY_BASE + 1);
	assert_int_equal(f.last_access, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_true(all_zero(buf));
	assert_int_equal(bufpool_class_count(pool, 2), 1);

	bufpool_release(pool, buf);
	assert_int_equal(bufpool_claim(pool, 40 * KiB, &again), 0);
	assert_ptr_equal(again, buf); /* reused, not re-registered */
	assert_int_equal(f.regs, 1);
	assert_int_equal(again->lkey, FAKE_KEY_BASE);
	bufpool_release(pool, again);
	destroy_clean(pool, &f);
}

static void test_sndbuf_local_access_only(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool *pool = make_pool(&f, BUFPOOL_SNDBUF, 0);
	struct bufpool_buf *buf;

	assert_int_equal(bufpool_claim(pool, 16 * KiB, &buf), 0);
	assert_int_equal(f.last_access, IBV_ACCESS_LOCAL_WRITE);
	assert_int_equal(buf->class, 0);
	assert_int_equal(buf->lkey, FAKE_KEY_BASE);
	assert_int_equal(buf->rkey, 0);
	bufpool_release(pool, buf);
	destroy_clean(pool, &f);
}

static void test_growth_then_reuse(void **state)
{
	enum { N = 5 };
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool *pool = make_pool(&f, BUFPOOL_RMB, 0);
	struct bufpool_buf *bufs[N];

	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++) {
			assert_int_equal(bufpool_claim_class(pool, 1, &bufs[i]), 0);
			for (int j = 0; j < i; j++)
				assert_ptr_not_equal(bufs[i], bufs[j]);
		}
		assert_int_equal(bufpool_class_count(pool, 1), N);
		assert_int_equal(f.regs, N); /* the second round reuses */
		for (int i = 0; i < N; i++)
			bufpool_release(pool, bufs[i]);
	}
	destroy_clean(pool, &f);
}

static void test_reused_buffer_is_zeroed(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool *pool = make_pool(&f, BUFPOOL_RMB, 0);
	struct bufpool_buf *buf, *again;

	assert_int_equal(bufpool_claim_class(pool, 0, &buf), 0);
	memset(buf->addr, PATTERN, buf->len);
	bufpool_release(pool, buf);
	assert_int_equal(bufpool_claim_class(pool, 0, &again), 0);
	assert_ptr_equal(again, buf);
	assert_true(all_zero(again));
	bufpool_release(pool, again);
	destroy_clean(pool, &f);
}

static void test_fallback_on_reg_failure(void **state)
{
	struct fake_reg f = {.lock = PTHREAD_MUTEX_INITIALIZER,
			     .id = 1,
			     .fail_len_min = 64 * KiB,
			     .fail_rc = -ENOMEM};
	struct bufpool *pool = make_pool(&f, BUFPOOL_RMB, 0);
	struct bufpool_buf *buf, *small;

	/* Class 3 and 2 cannot register: Linux-style fallback to class 1. */
	assert_int_equal(bufpool_claim(pool, 128 * KiB, &buf), 0);
	assert_int_equal(buf->class, 1);
	assert_int_equal(buf->len, 32 * KiB);
	assert_int_equal(bufpool_class_count(pool, 3), 0);
	assert_int_equal(bufpool_class_count(pool, 2), 0);

	/* Down to 16 KiB. */
	f.fail_len_min = 32 * KiB;
	assert_int_equal(bufpool_claim(pool, 128 * KiB, &small), 0);
	assert_int_equal(small->class, 0);
	bufpool_release(pool, small);
	bufpool_release(pool, buf);
	destroy_clean(pool, &f);
}

static void test_fallback_on_limit(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool *pool = make_pool(&f, BUFPOOL_RMB, 2);
	struct bufpool_buf *a, *b, *got, *none = NULL;

	assert_int_equal(bufpool_claim_class(pool, 1, &a), 0);
	assert_int_equal(bufpool_claim_class(pool, 0, &b), 0);
	bufpool_release(pool, b);
	/* Limit reached: classes 3..1 cannot grow, the free 16 KiB buffer serves. */
	assert_int_equal(bufpool_claim_class(pool, 3, &got), 0);
	assert_ptr_equal(got, b);
	assert_int_equal(bufpool_claim_class(pool, 3, &none), -ENOBUFS);
	assert_null(none);
	bufpool_release(pool, got);
	bufpool_release(pool, a);
	destroy_clean(pool, &f);
}

static void test_default_limit_255(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool *pool = make_pool(&f, BUFPOOL_RMB, 0);
	static struct bufpool_buf *bufs[SMC_RMBS_PER_LGR_MAX];
	struct bufpool_buf *extra;

	for (unsigned int i = 0; i < SMC_RMBS_PER_LGR_MAX; i++)
		assert_int_equal(bufpool_claim_class(pool, (uint8_t)(i % 2), &bufs[i]), 0);
	assert_int_equal(bufpool_claim_class(pool, 0, &extra), -ENOBUFS);
	assert_int_equal(bufpool_claim_class(pool, 1, &extra), -ENOBUFS);
	assert_int_equal(f.regs, SMC_RMBS_PER_LGR_MAX);

	bufpool_release(pool, bufs[1]); /* a class-1 buffer */
	assert_int_equal(bufpool_claim_class(pool, 1, &extra), 0);
	assert_ptr_equal(extra, bufs[1]);
	for (unsigned int i = 0; i < SMC_RMBS_PER_LGR_MAX; i++)
		bufpool_release(pool, bufs[i]);
	destroy_clean(pool, &f);
}

static void test_hook_error_propagates(void **state)
{
	struct fake_reg f = {
		.lock = PTHREAD_MUTEX_INITIALIZER, .id = 1, .fail_len_min = 1, .fail_rc = -EACCES};
	struct bufpool *pool = make_pool(&f, BUFPOOL_RMB, 0);
	struct bufpool_buf *buf = NULL;

	assert_int_equal(bufpool_claim(pool, 64 * KiB, &buf), -EACCES);
	assert_null(buf);
	for (uint8_t c = 0; c <= 2; c++)
		assert_int_equal(bufpool_class_count(pool, c), 0);

	/* A hook that breaks the negative-errno contract still fails cleanly. */
	f.fail_rc = 1;
	assert_int_equal(bufpool_claim(pool, 16 * KiB, &buf), -EIO);

	/* Once the hook recovers the pool works; failed slots were not used up. */
	f.fail_len_min = 0;
	assert_int_equal(bufpool_claim(pool, 64 * KiB, &buf), 0);
	assert_int_equal(buf->index, 0);
	bufpool_release(pool, buf);
	destroy_clean(pool, &f);
}

static void test_mmap_failure_is_enomem(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool_config cfg = {.kind = BUFPOOL_SNDBUF,
				     .buf_bytes = (size_t)1 << 60, /* no such mapping */
				     .ops = &fake_reg_ops,
				     .ops_ctx = &f};
	struct bufpool *pool = bufpool_create(&cfg);
	struct bufpool_buf *buf;

	assert_non_null(pool);
	assert_int_equal(bufpool_claim_class(pool, 2, &buf), -ENOMEM);
	assert_int_equal(f.regs, 0);
	destroy_clean(pool, &f);
}

static void test_buf_bytes_mode(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool_config cfg = {
		.kind = BUFPOOL_RMB, .buf_bytes = 64, .ops = &fake_reg_ops, .ops_ctx = &f};
	struct bufpool *pool = bufpool_create(&cfg);
	struct bufpool_buf *buf;

	assert_non_null(pool);
	assert_int_equal(bufpool_claim_class(pool, 5, &buf), 0);
	assert_int_equal(buf->class, 5);
	assert_int_equal(buf->len, 64);
	assert_int_equal((uintptr_t)buf->addr % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
	bufpool_release(pool, buf);
	destroy_clean(pool, &f);
}

static void collect_busy(struct bufpool_buf *buf, void *arg)
{
	struct bufpool_buf **seen = arg;

	*seen = buf;
}

static void test_teardown_reports_busy(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool *pool = make_pool(&f, BUFPOOL_RMB, 0);
	struct bufpool_buf *a, *b, *c, *seen = NULL;
	struct bufpool_teardown_report rep;

	assert_int_equal(bufpool_claim_class(pool, 0, &a), 0);
	assert_int_equal(bufpool_claim_class(pool, 0, &b), 0);
	assert_int_equal(bufpool_claim_class(pool, 4, &c), 0);
	bufpool_release(pool, a);
	bufpool_release(pool, c);
	bufpool_for_each_busy(pool, collect_busy, &seen);
	assert_ptr_equal(seen, b);

	f.dereg_rc = -EBUSY;
	assert_int_equal(bufpool_destroy(pool, &rep), 1);
	assert_int_equal(rep.busy, 1);
	assert_int_equal(rep.dereg_fails, 3);
	assert_int_equal(rep.first_dereg_err, -EBUSY);
	assert_int_equal(f.deregs, 3); /* everything deregistered and unmapped anyway */
	assert_int_equal(f.errors, 0);
	fake_reg_fini(&f);
}

static void test_invalid_arguments(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool_config cfg = {.kind = BUFPOOL_RMB, .ops = NULL};
	struct bufpool *pool;
	struct bufpool_buf *buf;

	errno = 0;
	assert_null(bufpool_create(&cfg));
	assert_int_equal(errno, EINVAL);
	assert_null(bufpool_create(NULL));
	cfg.ops = &fake_reg_ops;
	cfg.kind = 7;
	assert_null(bufpool_create(&cfg));

	pool = make_pool(&f, BUFPOOL_RMB, 0);
	assert_int_equal(bufpool_claim_class(pool, SMC_BUF_CLASS_MAX + 1, &buf), -EINVAL);
	assert_int_equal(bufpool_class_count(pool, SMC_BUF_CLASS_MAX + 1), 0);
	assert_int_equal(bufpool_destroy(NULL, NULL), 0);
	assert_int_equal(bufpool_destroy(pool, NULL), 0);
	fake_reg_fini(&f);
}

/* An RMB its old peer may still write gets a new registration before it is
 * reused: new keys, the old registration dropped, a failure keeps the old. */
static void test_rekey(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool *pool = make_pool(&f, BUFPOOL_RMB, 4);
	struct bufpool_buf *b, *again;
	uint32_t old_rkey;

	assert_int_equal(bufpool_claim(pool, 16 * KiB, &b), 0);
	assert_false(b->rkey_confirmed); /* a new RMB: unknown to the peer */
	b->rkey_confirmed = true;
	old_rkey = b->rkey;
	assert_int_equal(bufpool_rekey(pool, b), 0);
	assert_int_not_equal(b->rkey, old_rkey);
	assert_false(b->rkey_confirmed); /* the new rkey is unknown to the peer */
	assert_int_equal(f.regs, 2);
	assert_int_equal(f.deregs, 1);
	bufpool_release(pool, b);
	assert_int_equal(bufpool_claim(pool, 16 * KiB, &again), 0);
	assert_ptr_equal(again, b);
	assert_int_not_equal(again->rkey, old_rkey);
	f.fail_len_min = 1;
	f.fail_rc = -ENOMEM;
	old_rkey = again->rkey;
	assert_int_equal(bufpool_rekey(pool, again), -ENOMEM);
	assert_int_equal(again->rkey, old_rkey);
	f.fail_len_min = 0;
	bufpool_release(pool, again);
	destroy_clean(pool, &f);
}

/* A released RMB keeps its rkey and its "confirmed" mark for the next
 * holder (no LLC flow to reuse it); release_dirty() zeroes what
 * the holder says it wrote. */
static void test_keep_confirmed_and_dirty(void **state)
{
	struct fake_reg f = FAKE_REG_INIT(1);
	struct bufpool *pool = make_pool(&f, BUFPOOL_RMB, 4);
	struct bufpool_buf *b, *again;
	uint32_t rkey;
	uint8_t *p;

	assert_int_equal(bufpool_claim(pool, 64 * KiB, &b), 0);
	b->rkey_confirmed = true;
	rkey = b->rkey;
	p = b->addr;
	memset(p, 0x5a, 100);
	bufpool_release_dirty(pool, b, 100);
	assert_int_equal(bufpool_claim(pool, 64 * KiB, &again), 0);
	assert_ptr_equal(again, b);
	assert_true(again->rkey_confirmed);
	assert_int_equal(again->rkey, rkey);
	assert_int_equal(f.regs, 1); /* no new registration */
	for (int i = 0; i < 100; i++)
		assert_int_equal(p[i], 0);
	/* a dirty length past the buffer zeroes the buffer, no more */
	memset(p, 0x5a, again->len);
	bufpool_release_dirty(pool, again, SIZE_MAX);
	assert_int_equal(bufpool_claim(pool, 64 * KiB, &again), 0);
	for (size_t i = 0; i < again->len; i++)
		assert_int_equal(p[i], 0);
	bufpool_release(pool, again);
	destroy_clean(pool, &f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compress_table),
		cmocka_unit_test(test_treiber_lifo),
		cmocka_unit_test(test_treiber_aba_cas_fails),
		cmocka_unit_test(test_claim_release_rmb),
		cmocka_unit_test(test_sndbuf_local_access_only),
		cmocka_unit_test(test_growth_then_reuse),
		cmocka_unit_test(test_reused_buffer_is_zeroed),
		cmocka_unit_test(test_fallback_on_reg_failure),
		cmocka_unit_test(test_fallback_on_limit),
		cmocka_unit_test(test_default_limit_255),
		cmocka_unit_test(test_hook_error_propagates),
		cmocka_unit_test(test_mmap_failure_is_enomem),
		cmocka_unit_test(test_buf_bytes_mode),
		cmocka_unit_test(test_teardown_reports_busy),
		cmocka_unit_test(test_invalid_arguments),
		cmocka_unit_test(test_rekey),
		cmocka_unit_test(test_keep_confirmed_and_dirty),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
