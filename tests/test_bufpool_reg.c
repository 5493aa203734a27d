// SPDX-License-Identifier: MIT
/*
 * Registration slots of the buffer pools (bufpool.h bufpool_reg_add(),
 * libusmc/bufpool_reg.c): every buffer registered once per link, each link's
 * protection domain a fake hook of its own (tests/common/bufpool_fake.h),
 * as Linux registers each buffer on every link of a link group
 * (net/smc/smc_core.c smcr_buf_map_lgr(), smcr_buf_unmap_link()). Adding a
 * slot registers free and claimed buffers, growth registers every slot, a
 * failed add leaves nothing, a deletion drops exactly what was registered,
 * a rekey renews every slot, and a budget counts every registration.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bufpool.h"
#include "common/bufpool_fake.h"

#define KiB   1024u
#define BUF   (64 * KiB) /* the budget tests' buffers: class 2 */
#define NBUFS 4

/* One fake per slot: fakes[s] is slot s's protection domain. */
struct fixture {
	struct fake_reg fakes[BUFPOOL_REGS_MAX];
};

static int setup(void **state)
{
	static struct fixture fx;

	for (int s = 0; s < BUFPOOL_REGS_MAX; s++)
		fake_reg_init(&fx.fakes[s], (uint32_t)s + 1);
	*state = &fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	for (int s = 0; s < BUFPOOL_REGS_MAX; s++)
		fake_reg_fini(&fx->fakes[s]);
	return 0;
}

static struct bufpool *make_pool(struct fixture *fx, enum bufpool_kind kind,
				 struct bufpool_budget *b)
{
	struct bufpool_config cfg = {
		.kind = kind, .ops = &fake_reg_ops, .ops_ctx = &fx->fakes[0], .budget = b};
	struct bufpool *pool = bufpool_create(&cfg);

	assert_non_null(pool);
	return pool;
}

/* Destroyed with nothing claimed, nothing left registered in any fake. */
static void destroy_clean(struct bufpool *pool, struct fixture *fx)
{
	struct bufpool_teardown_report rep;

	assert_int_equal(bufpool_destroy(pool, &rep), 0);
	assert_int_equal(rep.dereg_fails, 0);
	for (int s = 0; s < BUFPOOL_REGS_MAX; s++) {
		assert_int_equal(fake_reg_live(&fx->fakes[s]), 0);
		assert_int_equal(fx->fakes[s].errors, 0);
	}
}

/* @buf's keys of @slot are a live registration of slot @slot's fake, for
 * this buffer. */
static void assert_slot_keys(struct fixture *fx, const struct bufpool_buf *buf, int slot,
			     enum bufpool_kind kind)
{
	uint32_t lkey = bufpool_buf_lkey(buf, slot), rkey = bufpool_buf_rkey(buf, slot);
	bool live = false;

	assert_ptr_equal(fake_reg_key_addr(&fx->fakes[slot], lkey, &live), buf->addr);
	assert_true(live);
	if (kind == BUFPOOL_SNDBUF) {
		assert_int_equal(rkey, 0);
		return;
	}
	assert_int_equal(rkey, lkey + 1); /* the same registration's */
}

static void assert_no_slot_keys(const struct bufpool_buf *buf, int slot)
{
	assert_int_equal(bufpool_buf_lkey(buf, slot), 0);
	assert_int_equal(bufpool_buf_rkey(buf, slot), 0);
}

/* Every key of @bufs, over every slot in @slots, differs from every other
 * (a send buffer has no rkeys). */
static void assert_keys_distinct(struct bufpool_buf **bufs, int n, uint32_t slots)
{
	uint32_t keys[NBUFS * BUFPOOL_REGS_MAX * 2];
	int k = 0;

	for (int i = 0; i < n; i++)
		for (int s = 0; s < BUFPOOL_REGS_MAX; s++)
			if (slots & (1u << s)) {
				keys[k++] = bufpool_buf_lkey(bufs[i], s);
				if (bufpool_buf_rkey(bufs[i], s)) /* 0: a send buffer */
					keys[k++] = bufpool_buf_rkey(bufs[i], s);
			}
	for (int i = 0; i < k; i++)
		for (int j = 0; j < i; j++)
			assert_int_not_equal(keys[i], keys[j]);
}

/* A pool with NBUFS buffers of classes 0..NBUFS-1: the even ones claimed,
 * the odd ones released (free). */
static void fill(struct bufpool *pool, struct bufpool_buf **bufs)
{
	for (int i = 0; i < NBUFS; i++)
		assert_int_equal(bufpool_claim_class(pool, (uint8_t)i, &bufs[i]), 0);
	for (int i = 1; i < NBUFS; i += 2)
		bufpool_release(pool, bufs[i]);
}

/* Claims the free ones back (each class has one buffer: the same ones). */
static void reclaim(struct bufpool *pool, struct bufpool_buf **bufs)
{
	for (int i = 1; i < NBUFS; i += 2) {
		struct bufpool_buf *again;

		assert_int_equal(bufpool_claim_class(pool, (uint8_t)i, &again), 0);
		assert_ptr_equal(again, bufs[i]);
	}
}

static void release_all(struct bufpool *pool, struct bufpool_buf **bufs)
{
	for (int i = 0; i < NBUFS; i++)
		bufpool_release(pool, bufs[i]);
}

/* A slot added to a pool with free and claimed buffers registers them all
 * in its own domain; its keys are distinct per slot and per buffer, and slot
 * 0's stay what they were. */
static void test_add_registers_free_and_claimed(void **state)
{
	struct fixture *fx = *state;
	struct bufpool *pool = make_pool(fx, BUFPOOL_RMB, NULL);
	struct bufpool_buf *bufs[NBUFS];
	uint32_t lkey0[NBUFS];

	fill(pool, bufs);
	for (int i = 0; i < NBUFS; i++) {
		lkey0[i] = bufs[i]->lkey;
		assert_int_equal(bufpool_buf_lkey(bufs[i], 0), bufs[i]->lkey);
		assert_int_equal(bufpool_buf_rkey(bufs[i], 0), bufs[i]->rkey);
	}
	assert_int_equal(bufpool_regs_active(pool), 1);
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0);
	assert_int_equal(bufpool_regs_active(pool), 3);
	assert_int_equal(bufpool_reg_add(pool, 2, &fx->fakes[2]), 0);
	assert_int_equal(bufpool_regs_active(pool), 7);
	assert_int_equal(fx->fakes[1].regs, NBUFS);
	assert_int_equal(fx->fakes[2].regs, NBUFS);
	assert_int_equal(fx->fakes[1].last_access, BUFPOOL_ACCESS_RMB);
	assert_int_equal(fx->fakes[0].regs, NBUFS); /* slot 0 untouched */
	reclaim(pool, bufs);
	for (int i = 0; i < NBUFS; i++) {
		assert_int_equal(bufs[i]->lkey, lkey0[i]);
		for (int s = 0; s < BUFPOOL_REGS_MAX; s++)
			assert_slot_keys(fx, bufs[i], s, BUFPOOL_RMB);
	}
	assert_keys_distinct(bufs, NBUFS, 7);
	release_all(pool, bufs);
	destroy_clean(pool, fx);
}

/* Slot numbers: 0 is the pool's own, 3 does not exist, an active slot
 * cannot be added again; none of it reaches the hook. */
static void test_add_invalid(void **state)
{
	struct fixture *fx = *state;
	struct bufpool *pool = make_pool(fx, BUFPOOL_RMB, NULL);
	struct bufpool_buf *buf;

	assert_int_equal(bufpool_claim_class(pool, 0, &buf), 0);
	assert_int_equal(bufpool_reg_add(pool, 0, &fx->fakes[1]), -EINVAL);
	assert_int_equal(bufpool_reg_add(pool, -1, &fx->fakes[1]), -EINVAL);
	assert_int_equal(bufpool_reg_add(pool, BUFPOOL_REGS_MAX, &fx->fakes[1]), -EINVAL);
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0);
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[2]), -EINVAL);
	assert_int_equal(fx->fakes[1].calls, 1);
	assert_int_equal(fx->fakes[2].calls, 0);
	assert_int_equal(fx->fakes[0].calls, 1);
	bufpool_reg_del(pool, 0); /* not a slot one deletes: ignored */
	bufpool_reg_del(pool, 2); /* not added: ignored */
	bufpool_reg_del(pool, BUFPOOL_REGS_MAX);
	assert_int_equal(bufpool_regs_active(pool), 3);
	assert_int_equal(fx->fakes[0].deregs, 0);
	bufpool_release(pool, buf);
	destroy_clean(pool, fx);
}

/* After a slot is added, every buffer the pool grows is registered in both
 * domains, a send buffer for local access only. */
static void test_growth_registers_every_slot(void **state)
{
	struct fixture *fx = *state;
	struct bufpool *pool = make_pool(fx, BUFPOOL_SNDBUF, NULL);
	struct bufpool_buf *bufs[NBUFS];

	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0); /* no buffer yet */
	assert_int_equal(fx->fakes[1].calls, 0);
	for (int i = 0; i < NBUFS; i++) {
		assert_int_equal(bufpool_claim_class(pool, (uint8_t)i, &bufs[i]), 0);
		assert_slot_keys(fx, bufs[i], 0, BUFPOOL_SNDBUF);
		assert_slot_keys(fx, bufs[i], 1, BUFPOOL_SNDBUF);
		assert_no_slot_keys(bufs[i], 2);
	}
	assert_int_equal(fx->fakes[0].regs, NBUFS);
	assert_int_equal(fx->fakes[1].regs, NBUFS);
	assert_int_equal(fx->fakes[1].last_access, BUFPOOL_ACCESS_SNDBUF);
	assert_keys_distinct(bufs, NBUFS, 3);
	release_all(pool, bufs);
	destroy_clean(pool, fx);
}

/* A growth whose second registration fails leaves no first one behind and
 * falls back to a smaller class, as any failed growth does. */
static void test_growth_fails_in_one_slot(void **state)
{
	struct fixture *fx = *state;
	struct bufpool *pool = make_pool(fx, BUFPOOL_RMB, NULL);
	struct bufpool_buf *buf;

	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0);
	fx->fakes[1].fail_len_min = 32 * KiB;
	fx->fakes[1].fail_rc = -EACCES;
	assert_int_equal(bufpool_claim_class(pool, 2, &buf), 0);
	assert_int_equal(buf->class, 0);
	assert_int_equal(bufpool_class_count(pool, 2), 0);
	assert_int_equal(bufpool_class_count(pool, 1), 0);
	assert_int_equal(fake_reg_live(&fx->fakes[0]), 1); /* class 0's only */
	assert_int_equal(fake_reg_live(&fx->fakes[1]), 1);
	fx->fakes[1].fail_len_min = 0;
	bufpool_release(pool, buf);
	destroy_clean(pool, fx);
}

/* An add whose third registration fails leaves no buffer registered in
 * the slot, no key of it, the slot inactive and free to be added again. */
static void test_add_fails_midway(void **state)
{
	struct fixture *fx = *state;
	struct bufpool *pool = make_pool(fx, BUFPOOL_RMB, NULL);
	struct bufpool_buf *bufs[NBUFS];

	fill(pool, bufs);
	fx->fakes[1].fail_at = 3;
	fx->fakes[1].fail_rc = -EFAULT;
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), -EFAULT);
	assert_int_equal(fx->fakes[1].regs, 2);
	assert_int_equal(fx->fakes[1].deregs, 2);
	assert_int_equal(fx->fakes[1].errors, 0);
	assert_int_equal(bufpool_regs_active(pool), 1);
	reclaim(pool, bufs);
	for (int i = 0; i < NBUFS; i++)
		assert_no_slot_keys(bufs[i], 1);
	/* a growth now registers slot 0 only */
	release_all(pool, bufs);
	assert_int_equal(bufpool_claim_class(pool, 5, &bufs[0]), 0);
	assert_int_equal(fx->fakes[1].calls, 3);
	assert_no_slot_keys(bufs[0], 1);
	bufpool_release(pool, bufs[0]);
	/* the slot can be added again */
	fx->fakes[1].fail_at = 0;
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0);
	assert_int_equal(fake_reg_live(&fx->fakes[1]), NBUFS + 1);
	destroy_clean(pool, fx);
}

/* A deletion drops exactly the slot's registrations - those the add made
 * and those growth made since - in the slot's own domain, and zeroes their
 * keys; the slot is free again and growth no longer registers it. */
static void test_del_deregisters_what_was_registered(void **state)
{
	struct fixture *fx = *state;
	struct bufpool *pool = make_pool(fx, BUFPOOL_RMB, NULL);
	struct bufpool_buf *bufs[NBUFS], *more[2];

	fill(pool, bufs);
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0);
	assert_int_equal(bufpool_reg_add(pool, 2, &fx->fakes[2]), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(bufpool_claim_class(pool, 6, &more[i]), 0);
	assert_int_equal(fx->fakes[1].regs, NBUFS + 2);
	bufpool_reg_del(pool, 1);
	assert_int_equal(bufpool_regs_active(pool), 5);
	assert_int_equal(fx->fakes[1].deregs, NBUFS + 2);
	assert_int_equal(fake_reg_live(&fx->fakes[1]), 0);
	assert_int_equal(fx->fakes[1].errors, 0);
	assert_int_equal(fx->fakes[0].deregs, 0);
	assert_int_equal(fx->fakes[2].deregs, 0);
	reclaim(pool, bufs);
	for (int i = 0; i < NBUFS; i++) {
		assert_no_slot_keys(bufs[i], 1);
		assert_slot_keys(fx, bufs[i], 2, BUFPOOL_RMB);
	}
	assert_no_slot_keys(more[0], 1);
	bufpool_reg_del(pool, 1); /* twice: nothing more */
	assert_int_equal(fx->fakes[1].deregs, NBUFS + 2);
	bufpool_release(pool, more[1]);
	assert_int_equal(bufpool_claim_class(pool, 7, &more[1]), 0);
	assert_int_equal(fx->fakes[1].calls, NBUFS + 2);
	/* added again, in another domain */
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0);
	assert_int_equal(fake_reg_live(&fx->fakes[1]), NBUFS + 3);
	assert_slot_keys(fx, more[1], 1, BUFPOOL_RMB);
	release_all(pool, bufs);
	bufpool_release(pool, more[0]);
	bufpool_release(pool, more[1]);
	destroy_clean(pool, fx);
}

/* A rekey gives every slot a new registration (all keys change, each from
 * its own domain, the old ones dropped) and clears rkey_confirmed; one that
 * fails in any slot keeps every old key and drops the new ones it made. */
static void test_rekey_every_slot(void **state)
{
	struct fixture *fx = *state;
	struct bufpool *pool = make_pool(fx, BUFPOOL_RMB, NULL);
	struct bufpool_buf *buf;
	uint32_t old[BUFPOOL_REGS_MAX][2];

	assert_int_equal(bufpool_claim_class(pool, 1, &buf), 0);
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0);
	assert_int_equal(bufpool_reg_add(pool, 2, &fx->fakes[2]), 0);
	for (int s = 0; s < BUFPOOL_REGS_MAX; s++) {
		old[s][0] = bufpool_buf_lkey(buf, s);
		old[s][1] = bufpool_buf_rkey(buf, s);
	}
	buf->rkey_confirmed = true;
	assert_int_equal(bufpool_rekey(pool, buf), 0);
	assert_false(buf->rkey_confirmed);
	for (int s = 0; s < BUFPOOL_REGS_MAX; s++) {
		bool live = true;

		assert_int_not_equal(bufpool_buf_lkey(buf, s), old[s][0]);
		assert_int_not_equal(bufpool_buf_rkey(buf, s), old[s][1]);
		assert_slot_keys(fx, buf, s, BUFPOOL_RMB);
		fake_reg_key_addr(&fx->fakes[s], old[s][0], &live);
		assert_false(live); /* the old registration is gone */
		assert_int_equal(fake_reg_live(&fx->fakes[s]), 1);
		old[s][0] = bufpool_buf_lkey(buf, s);
		old[s][1] = bufpool_buf_rkey(buf, s);
	}
	/* the last slot's registration fails: nothing changes */
	buf->rkey_confirmed = true;
	fx->fakes[2].fail_at = fx->fakes[2].calls + 1;
	fx->fakes[2].fail_rc = -ENOMEM;
	assert_int_equal(bufpool_rekey(pool, buf), -ENOMEM);
	assert_true(buf->rkey_confirmed);
	for (int s = 0; s < BUFPOOL_REGS_MAX; s++) {
		assert_int_equal(bufpool_buf_lkey(buf, s), old[s][0]);
		assert_int_equal(bufpool_buf_rkey(buf, s), old[s][1]);
		assert_slot_keys(fx, buf, s, BUFPOOL_RMB);
		assert_int_equal(fake_reg_live(&fx->fakes[s]), 1);
	}
	bufpool_release(pool, buf);
	destroy_clean(pool, fx);
}

/* A budget counts each registration: a growth with two slots counts two,
 * an add counts one per buffer, a deletion gives them back, and so does
 * destroy. */
static void test_budget_counts_every_slot(void **state)
{
	struct fixture *fx = *state;
	struct bufpool_budget b;
	struct bufpool *pool;
	struct bufpool_buf *x[3];

	bufpool_budget_init(&b, 0);
	pool = make_pool(fx, BUFPOOL_RMB, &b);
	assert_int_equal(bufpool_claim(pool, BUF, &x[0]), 0);
	assert_int_equal(bufpool_claim(pool, BUF, &x[1]), 0);
	assert_int_equal(atomic_load(&b.pinned), 2 * BUF);
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0);
	assert_int_equal(atomic_load(&b.pinned), 4 * BUF);
	assert_int_equal(bufpool_claim(pool, BUF, &x[2]), 0);
	assert_int_equal(atomic_load(&b.pinned), 6 * BUF);
	/* an add that fails midway gives back all it counted */
	fx->fakes[2].fail_at = 2;
	fx->fakes[2].fail_rc = -EIO;
	assert_int_equal(bufpool_reg_add(pool, 2, &fx->fakes[2]), -EIO);
	assert_int_equal(atomic_load(&b.pinned), 6 * BUF);
	assert_int_equal(fake_reg_live(&fx->fakes[2]), 0);
	assert_int_equal(bufpool_reg_add(pool, 2, &fx->fakes[2]), 0);
	assert_int_equal(atomic_load(&b.pinned), 9 * BUF);
	bufpool_reg_del(pool, 1);
	assert_int_equal(atomic_load(&b.pinned), 6 * BUF);
	for (int i = 0; i < 3; i++)
		bufpool_release(pool, x[i]);
	destroy_clean(pool, fx);
	assert_int_equal(atomic_load(&b.pinned), 0);
	bufpool_budget_fini(&b);
}

/* Under a cap, a growth that needs two registrations' room is refused
 * in every class when only one fits, and so is an add with no room,
 * before the hook is asked, the count staying where it was. */
static void test_budget_refuses_two_slots(void **state)
{
	struct fixture *fx = *state;
	struct bufpool_budget b;
	struct bufpool *pool;
	struct bufpool_buf *x, *y, *none = NULL;

	bufpool_budget_init(&b, 2 * BUF + 16 * KiB);
	pool = make_pool(fx, BUFPOOL_RMB, &b);
	assert_int_equal(bufpool_claim(pool, BUF, &x), 0);
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0);
	assert_int_equal(atomic_load(&b.pinned), 2 * BUF);
	/* 16 KiB left: even class 0 needs two registrations of it */
	assert_int_equal(bufpool_claim_class(pool, 2, &none), -ENOMEM);
	assert_null(none);
	assert_int_equal(fx->fakes[0].calls, 1);
	assert_int_equal(atomic_load(&b.pinned), 2 * BUF);
	assert_int_equal(bufpool_reg_add(pool, 2, &fx->fakes[2]), -ENOMEM);
	assert_int_equal(fx->fakes[2].calls, 0);
	assert_int_equal(bufpool_regs_active(pool), 3);
	/* with one slot, a 16 KiB buffer fits, and no slot more */
	bufpool_reg_del(pool, 1);
	assert_int_equal(atomic_load(&b.pinned), BUF);
	assert_int_equal(bufpool_claim_class(pool, 0, &y), 0);
	assert_int_equal(atomic_load(&b.pinned), BUF + 16 * KiB);
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), -ENOMEM);
	assert_int_equal(fake_reg_live(&fx->fakes[1]), 0);
	assert_int_equal(bufpool_regs_active(pool), 1);
	assert_int_equal(atomic_load(&b.pinned), BUF + 16 * KiB);
	assert_true(atomic_load(&b.refused) >= 3);
	bufpool_release(pool, x);
	bufpool_release(pool, y);
	destroy_clean(pool, fx);
	assert_int_equal(atomic_load(&b.pinned), 0);
	bufpool_budget_fini(&b);
}

/* A shrink deregisters every slot of the free buffers it takes and gives
 * their room back, so the budget ends at 0; an add with no room first
 * shrinks free buffers (which then need no registration of the slot). */
static void test_shrink_deregisters_every_slot(void **state)
{
	struct fixture *fx = *state;
	struct bufpool_budget b;
	struct bufpool *idle, *busy;
	struct bufpool_buf *a[2], *x, *y;
	struct fake_reg other;
	struct bufpool_config cfg = {
		.kind = BUFPOOL_SNDBUF, .ops = &fake_reg_ops, .ops_ctx = &other, .budget = &b};

	fake_reg_init(&other, 9);
	bufpool_budget_init(&b, 4 * BUF);
	idle = make_pool(fx, BUFPOOL_RMB, &b);
	assert_int_equal(bufpool_reg_add(idle, 1, &fx->fakes[1]), 0);
	assert_int_equal(bufpool_claim(idle, BUF, &a[0]), 0);
	assert_int_equal(bufpool_claim(idle, BUF, &a[1]), 0);
	assert_int_equal(atomic_load(&b.pinned), 4 * BUF);
	bufpool_release(idle, a[0]);
	bufpool_release(idle, a[1]);
	busy = bufpool_create(&cfg);
	assert_non_null(busy);
	assert_int_equal(bufpool_claim(busy, BUF, &x), 0); /* shrinks one of idle's */
	assert_int_equal(fx->fakes[0].deregs, 1);
	assert_int_equal(fx->fakes[1].deregs, 1);
	assert_int_equal(fx->fakes[1].errors, 0);
	assert_int_equal(atomic_load(&b.pinned), 3 * BUF);
	assert_int_equal(atomic_load(&b.shrinks), 1);
	assert_int_equal(bufpool_class_count(idle, 2), 1);
	assert_int_equal(bufpool_claim(busy, BUF, &y), 0);
	assert_int_equal(atomic_load(&b.pinned), 4 * BUF);
	/* an add to busy with no room: the idle pool's last free buffer goes */
	assert_int_equal(bufpool_reg_add(busy, 1, &fx->fakes[2]), 0);
	assert_int_equal(bufpool_class_count(idle, 2), 0);
	assert_int_equal(fake_reg_live(&fx->fakes[0]), 0);
	assert_int_equal(fake_reg_live(&fx->fakes[1]), 0);
	assert_int_equal(fake_reg_live(&fx->fakes[2]), 2);
	assert_int_equal(atomic_load(&b.pinned), 4 * BUF);
	bufpool_release(busy, x);
	bufpool_release(busy, y);
	assert_int_equal(bufpool_budget_shrink(&b, UINT64_MAX), 4 * BUF);
	assert_int_equal(atomic_load(&b.pinned), 0);
	assert_int_equal(fake_reg_live(&fx->fakes[2]), 0);
	assert_int_equal(fake_reg_live(&other), 0);
	destroy_clean(idle, fx);
	assert_int_equal(bufpool_destroy(busy, NULL), 0);
	assert_int_equal(other.errors, 0);
	assert_int_equal(atomic_load(&b.pinned), 0);
	bufpool_budget_fini(&b);
	fake_reg_fini(&other);
}

/* The kernel's limit refuses an add (the hook's -ENOMEM): free buffers are
 * shrunk and the add tried once more, as a growth would be. */
static void test_add_kernel_limit_shrinks(void **state)
{
	struct fixture *fx = *state;
	struct bufpool_budget b;
	struct bufpool *pool;
	struct bufpool_buf *a[2];

	bufpool_budget_init(&b, 0);
	pool = make_pool(fx, BUFPOOL_RMB, &b);
	assert_int_equal(bufpool_claim(pool, BUF, &a[0]), 0);
	assert_int_equal(bufpool_claim(pool, BUF, &a[1]), 0);
	bufpool_release(pool, a[1]);
	fx->fakes[1].limit = BUF; /* room for one registration in this domain */
	assert_int_equal(bufpool_reg_add(pool, 1, &fx->fakes[1]), 0);
	assert_int_equal(atomic_load(&b.shrinks), 1);
	assert_int_equal(bufpool_class_count(pool, 2), 1);
	assert_int_equal(fake_reg_live(&fx->fakes[1]), 1);
	assert_slot_keys(fx, a[0], 1, BUFPOOL_RMB);
	assert_int_equal(atomic_load(&b.pinned), 2 * BUF);
	bufpool_release(pool, a[0]);
	destroy_clean(pool, fx);
	assert_int_equal(atomic_load(&b.pinned), 0);
	bufpool_budget_fini(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_add_registers_free_and_claimed, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_add_invalid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_growth_registers_every_slot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_growth_fails_in_one_slot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_add_fails_midway, setup, teardown),
		cmocka_unit_test_setup_teardown(test_del_deregisters_what_was_registered, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rekey_every_slot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_counts_every_slot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_refuses_two_slots, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shrink_deregisters_every_slot, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_add_kernel_limit_shrinks, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
