// SPDX-License-Identifier: MIT
/*
 * Registration slots under concurrency; meant to run under ThreadSanitizer
 * (label tsan) but also meaningful without it. Claimers claim, check,
 * sometimes rekey, and release, while one thread adds and deletes slot 1
 * over and over (a second link coming and going), under a budget small
 * enough that growths and adds shrink each other's free buffers.
 *
 * A claimer that sees slot 1 active (bufpool_regs_active()) must read keys
 * that the slot's fake handed out for that very buffer: a slot published
 * before every buffer has its keys reads 0 here, or another buffer's. It
 * may read 0 only if a deletion was under way when it looked at @epoch or
 * started since: the adder makes @epoch odd before each bufpool_reg_del()
 * and even again after it, and a key load that reads the deletion's 0 (an
 * acquire, bufpool_buf_lkey()) orders the claimer's next look at @epoch
 * after the first bump.
 *
 * Usage: test_bufpool_reg_stress [claims-per-thread]
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "bufpool.h"
#include "common/bufpool_fake.h"
#include "common/check.h"

#define CLAIMERS      3
#define DEFAULT_ITERS 20000
#define MAX_HELD      2
#define POOL_MAX_BUFS 8
#define POOL_BUF      4096 /* buf_bytes: one page a registration */
#define TOP_CLASS     2
/* 6 buffers may be held, 8 exist: with two slots, more than the budget */
#define BUDGET_PAGES 12
/* one claim in this many rekeys its buffer */
#define REKEY_EVERY 16
/* claimers go on until slot 1 came and went this often, but for no more
 * than ITERS_CAP times their iterations (the fake's keys run out) */
#define MIN_ADDS  200
#define ITERS_CAP 10
/* one look at slot 1 in this many reads its keys after a yield, as a
 * connection reads them some time after it looked at the mask (to send):
 * time for a deletion to start in between */
#define LOOK_LATER_EVERY 4

struct shared {
	struct bufpool *pool;
	struct fake_reg fakes[2];    /* slot 0's, slot 1's */
	_Atomic unsigned long epoch; /* odd while a bufpool_reg_del() of slot 1 runs */
	atomic_int finished;	     /* claimers done */
	_Atomic long adds;	     /* slot 1 added (and deleted) */
};

struct claimer {
	pthread_t thread;
	struct shared *sh;
	uintptr_t id;
	unsigned int seed;
	long iters;
	long claims, refused, seen_active, seen_deleting, rekeys;
};

/* @key (an lkey or rkey) was handed out by @f for @buf. */
static void check_key(struct fake_reg *f, struct bufpool_buf *buf, uint32_t key, int slot)
{
	void *addr = fake_reg_key_addr(f, key, NULL);

	CHECK(addr == buf->addr, "slot %d key %#x of buffer %p is the fake's for %p", slot, key,
	      buf->addr, addr);
}

static void check_slots(struct claimer *c, struct bufpool_buf *buf)
{
	struct shared *sh = c->sh;
	unsigned long e = atomic_load_explicit(&sh->epoch, memory_order_acquire);
	uint32_t lkey, rkey;

	check_key(&sh->fakes[0], buf, buf->lkey, 0);
	check_key(&sh->fakes[0], buf, buf->rkey, 0);
	if (!(bufpool_regs_active(sh->pool) & 2u))
		return;
	c->seen_active++;
	if (rand_r(&c->seed) % LOOK_LATER_EVERY == 0)
		sched_yield();
	lkey = bufpool_buf_lkey(buf, 1);
	rkey = bufpool_buf_rkey(buf, 1);
	if (!lkey || !rkey) {
		/*
		 * Only a deletion zeroes them: one under way when @e was read
		 * (odd), or one begun since (@epoch moved on). An even @e that
		 * is still @epoch cannot meet a deletion's 0: the one before it
		 * unpublished the slot before @e's bump, so the active mask seen
		 * after is the next addition's, whose keys the 0 preceded.
		 */
		CHECK((e & 1) || atomic_load_explicit(&sh->epoch, memory_order_acquire) != e,
		      "slot 1 active, its keys of buffer %p 0 (lkey %#x rkey %#x), no deletion",
		      buf->addr, lkey, rkey);
		c->seen_deleting++;
		return;
	}
	check_key(&sh->fakes[1], buf, lkey, 1);
	check_key(&sh->fakes[1], buf, rkey, 1);
}

static void take(struct claimer *c, struct bufpool_buf *buf)
{
	uintptr_t expected = 0;

	CHECK(atomic_compare_exchange_strong(&buf->owner, &expected, c->id),
	      "buffer %p claimed twice", buf->addr);
	check_slots(c, buf);
	if (rand_r(&c->seed) % REKEY_EVERY == 0) {
		int rc = bufpool_rekey(c->sh->pool, buf);

		CHECK(rc == 0, "rekey: %d", rc);
		c->rekeys++;
		check_slots(c, buf);
	}
	c->claims++;
}

static void give_back(struct claimer *c, struct bufpool_buf *buf)
{
	check_slots(c, buf);
	CHECK(atomic_load(&buf->owner) == c->id, "buffer %p lost its owner", buf->addr);
	atomic_store(&buf->owner, 0);
	bufpool_release(c->sh->pool, buf);
}

static bool go_on(struct claimer *c, long i)
{
	if (i < c->iters)
		return true;
	return atomic_load(&c->sh->adds) < MIN_ADDS && i < c->iters * ITERS_CAP;
}

static void *claimer_main(void *arg)
{
	struct claimer *c = arg;
	struct bufpool_buf *held[MAX_HELD];
	int nheld = 0;

	for (long i = 0; go_on(c, i); i++) {
		bool claim = nheld == 0 || (nheld < MAX_HELD && rand_r(&c->seed) % 2);

		if (claim) {
			uint8_t class = (uint8_t)(rand_r(&c->seed) % (TOP_CLASS + 1));
			int rc = bufpool_claim_class(c->sh->pool, class, &held[nheld]);

			if (rc == -ENOBUFS || rc == -ENOMEM) {
				c->refused++;
				continue;
			}
			CHECK(rc == 0, "claim: %d", rc);
			take(c, held[nheld++]);
		} else {
			int pick = rand_r(&c->seed) % nheld;

			give_back(c, held[pick]);
			held[pick] = held[--nheld];
		}
	}
	while (nheld)
		give_back(c, held[--nheld]);
	atomic_fetch_add(&c->sh->finished, 1);
	return NULL;
}

int main(int argc, char **argv)
{
	static struct shared sh;
	struct bufpool_budget budget;
	struct claimer claimers[CLAIMERS] = {0};
	long iters = argc > 1 ? strtol(argv[1], NULL, 10) : DEFAULT_ITERS;
	long adds = 0, add_refused = 0, claims = 0, seen = 0, deleting = 0, rekeys = 0;
	struct bufpool_config cfg = {.kind = BUFPOOL_RMB,
				     .max_bufs = POOL_MAX_BUFS,
				     .buf_bytes = POOL_BUF,
				     .ops = &fake_reg_ops,
				     .ops_ctx = &sh.fakes[0],
				     .budget = &budget};

	CHECK(iters > 0, "iterations: %s", argv[1]);
	bufpool_budget_init(&budget, BUDGET_PAGES * (uint64_t)POOL_BUF);
	fake_reg_init(&sh.fakes[0], 1);
	fake_reg_init(&sh.fakes[1], 2);
	sh.pool = bufpool_create(&cfg);
	CHECK(sh.pool, "bufpool_create");
	for (int t = 0; t < CLAIMERS; t++) {
		claimers[t] = (struct claimer){.sh = &sh,
					       .id = (uintptr_t)t + 1,
					       .seed = (unsigned int)t * 7919u + 1,
					       .iters = iters};
		CHECK(pthread_create(&claimers[t].thread, NULL, claimer_main, &claimers[t]) == 0,
		      "pthread_create");
	}
	/* the link comes and goes until the claimers are done */
	while (atomic_load(&sh.finished) < CLAIMERS) {
		int rc = bufpool_reg_add(sh.pool, 1, &sh.fakes[1]);

		if (rc == -ENOMEM) { /* the claimers hold too much for a second link */
			add_refused++;
			sched_yield();
			continue;
		}
		CHECK(rc == 0, "reg_add: %d", rc);
		adds++;
		atomic_store(&sh.adds, adds);
		sched_yield();
		/*
		 * A deletion is under way (the link going down) from the first
		 * bump to the second. A claimer may read @epoch after the
		 * first, then the mask while slot 1 is still active, then 0
		 * keys that bufpool_reg_del() zeroed: @epoch has not moved
		 * since its read, so only its oddness tells that the deletion
		 * had begun. The yield lets claimers look in that window.
		 */
		atomic_fetch_add_explicit(&sh.epoch, 1, memory_order_release);
		sched_yield();
		bufpool_reg_del(sh.pool, 1);
		atomic_fetch_add_explicit(&sh.epoch, 1, memory_order_release);
	}
	for (int t = 0; t < CLAIMERS; t++)
		CHECK(pthread_join(claimers[t].thread, NULL) == 0, "pthread_join");
	for (int t = 0; t < CLAIMERS; t++) {
		claims += claimers[t].claims;
		seen += claimers[t].seen_active;
		deleting += claimers[t].seen_deleting;
		rekeys += claimers[t].rekeys;
	}
	CHECK(adds > 0 && claims > 0 && seen > 0,
	      "nothing raced: %ld adds, %ld claims, %ld saw slot 1", adds, claims, seen);
	CHECK(bufpool_destroy(sh.pool, NULL) == 0, "buffers still claimed");
	CHECK(atomic_load(&budget.pinned) == 0, "budget at %llu after destroy",
	      (unsigned long long)atomic_load(&budget.pinned));
	for (int s = 0; s < 2; s++) {
		CHECK(fake_reg_live(&sh.fakes[s]) == 0, "slot %d: %u registrations left", s,
		      fake_reg_live(&sh.fakes[s]));
		CHECK(sh.fakes[s].errors == 0, "slot %d: %u bad deregistrations", s,
		      sh.fakes[s].errors);
	}
	printf("%d claimers, %ld claims, %ld rekeys; slot 1 added %ld times (%ld refused), seen "
	       "active %ld times, being deleted %ld; %llu shrinks\n",
	       CLAIMERS, claims, rekeys, adds, add_refused, seen, deleting,
	       (unsigned long long)atomic_load(&budget.shrinks));
	bufpool_budget_fini(&budget);
	fake_reg_fini(&sh.fakes[0]);
	fake_reg_fini(&sh.fakes[1]);
	return 0;
}
