// SPDX-License-Identifier: MIT
/* SMC-R pieces that need no device: UEID rules, context defaults. */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "clock.h"
#include "ctx.h"
#include "lgr.h"
#include "smcr_conn.h"
#include "smcr_ctx.h"
#include "smcr_wr.h"

static void test_ueid_pad(void **state)
{
	uint8_t out[SMCR_UEID_LEN], want[SMCR_UEID_LEN];

	(void)state;
	assert_int_equal(smcr_ueid_pad("LIBUSMC", out), 0);
	memset(want, ' ', sizeof(want));
	memcpy(want, "LIBUSMC", 7);
	assert_memory_equal(out, want, sizeof(want));
	assert_int_equal(smcr_ueid_pad("A1.B-2", out), 0);
	assert_int_equal(smcr_ueid_pad("0123456789ABCDEF0123456789ABCDEF", out), 0);
	/* too long, empty, lower case, a non-alphanumeric first, blanks, NULL */
	assert_int_equal(smcr_ueid_pad("0123456789ABCDEF0123456789ABCDEF0", out), -EINVAL);
	assert_int_equal(smcr_ueid_pad("", out), -EINVAL);
	assert_int_equal(smcr_ueid_pad("libusmc", out), -EINVAL);
	assert_int_equal(smcr_ueid_pad(".ABC", out), -EINVAL);
	assert_int_equal(smcr_ueid_pad("A B", out), -EINVAL);
	assert_int_equal(smcr_ueid_pad(NULL, out), -EINVAL);
}

static void test_ctx_ueid_and_ids(void **state)
{
	struct usmc_ctx *a, *b;
	struct usmc_ctx_stats st;
	uint8_t want[SMCR_UEID_LEN];

	(void)state;
	unsetenv("USMC_UEID");
	assert_int_equal(usmc_ctx_create(&a), 0);
	assert_int_equal(usmc_ctx_create(&b), 0);
	smcr_ueid_pad(SMCR_DEFAULT_UEID, want);
	assert_memory_equal(a->rdma.ueid, want, SMCR_UEID_LEN);
	/* independent stacks: distinct system IDs */
	assert_memory_not_equal(a->rdma.system_id, b->rdma.system_id, SMCR_SYSTEM_ID_LEN);
	assert_int_equal(usmc_ctx_set_ueid(a, "bad ueid"), -EINVAL);
	assert_int_equal(usmc_ctx_set_ueid(a, "RXEVM-SMC-TEST"), 0);
	smcr_ueid_pad("RXEVM-SMC-TEST", want);
	assert_memory_equal(a->rdma.ueid, want, SMCR_UEID_LEN);
	usmc_ctx_stats(a, &st);
	assert_int_equal(st.lgrs_created, 0);
	assert_int_equal(st.lgrs_open, 0);
	assert_int_equal(usmc_ctx_destroy(a), 0);
	assert_int_equal(usmc_ctx_destroy(b), 0);
	/* an invalid environment value fails the context */
	setenv("USMC_UEID", "no good", 1);
	assert_int_equal(usmc_ctx_create(&a), -EINVAL);
	setenv("USMC_UEID", "FROM-ENV", 1);
	assert_int_equal(usmc_ctx_create(&a), 0);
	smcr_ueid_pad("FROM-ENV", want);
	assert_memory_equal(a->rdma.ueid, want, SMCR_UEID_LEN);
	assert_int_equal(usmc_ctx_destroy(a), 0);
	unsetenv("USMC_UEID");
}

/* Only a link group still in INIT becomes ACTIVE: one that died during its
 * handshake (DELETE_LINK, a completion error) must not be published. */
static void test_lgr_only_init_activates(void **state)
{
	static struct smcr_ctx sctx; /* no logger */
	struct lgr *lgr = calloc(1, sizeof(*lgr));

	assert_non_null(lgr);
	lgr->sctx = &sctx;
	lgr->state = LGR_DEAD;
	assert_int_equal(lgr_activate(lgr, 1, 255), -ECONNABORTED);
	assert_int_equal(lgr->state, LGR_DEAD);
	lgr->state = LGR_INIT;
	assert_int_equal(lgr_activate(lgr, 1, 255), 0);
	assert_int_equal(lgr->state, LGR_ACTIVE);
	assert_int_equal(lgr_activate(lgr, 1, 255), -ECONNABORTED); /* only once */
	free(lgr);
}

/* lgr_find_wait() waits for a link group only while a first contact with
 * that very peer is registered (lgr_reserve()), and asks without waiting
 * at a deadline of 0. */
struct unclaim_later {
	struct smcr_ctx *sctx;
	struct lgr_pending *p;
};

static void *unclaim_after_100ms(void *arg)
{
	struct unclaim_later *u = arg;

	usleep(100000);
	lgr_unclaim(u->sctx, u->p);
	return NULL;
}

static void test_lgr_find_wait_pending(void **state)
{
	uint8_t id[SMCR_SYSTEM_ID_LEN] = {1, 2, 3}, gid[SMCR_GID_LEN] = {4, 5, 6};
	struct lgr_config cfg = {.max_lgrs = 128, .max_per_peer = 8};
	struct lgr_key k = {.role = SMCR_ROLE_CLIENT, .peer_id = id, .peer_gid = gid}, other;
	struct lgr_pending p, q;
	struct unclaim_later u;
	struct usmc_ctx *ctx;
	pthread_t t;
	bool busy = true;
	long t0;

	(void)state;
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	k.peer_addr.s_addr = htonl(0x0a000002);
	other = k;
	other.peer_addr.s_addr = htonl(0x0a000003);
	/* nothing pending: no wait, however far the deadline */
	t0 = clock_now_ms();
	assert_null(lgr_find_wait(&ctx->rdma, &k, t0 + 5000, &busy));
	assert_false(busy);
	assert_true(clock_now_ms() - t0 < 1000);
	/* a first contact with that peer: asked without waiting, it says so */
	assert_int_equal(lgr_reserve(&ctx->rdma, &k, &cfg, &p), 0);
	assert_null(lgr_find_wait(&ctx->rdma, &k, 0, &busy));
	assert_true(busy);
	/* ... with a deadline, it waits for it until then */
	t0 = clock_now_ms();
	assert_null(lgr_find_wait(&ctx->rdma, &k, t0 + 200, &busy));
	assert_true(busy);
	assert_true(clock_now_ms() - t0 >= 190);
	/* another peer's first contact is none of its business */
	assert_int_equal(lgr_reserve(&ctx->rdma, &other, &cfg, &q), 0);
	lgr_unclaim(&ctx->rdma, &p);
	t0 = clock_now_ms();
	assert_null(lgr_find_wait(&ctx->rdma, &k, t0 + 5000, &busy));
	assert_false(busy);
	assert_true(clock_now_ms() - t0 < 1000);
	/* the first contact ends (unpublished) while it waits: it stops then */
	assert_int_equal(lgr_reserve(&ctx->rdma, &k, &cfg, &p), 0);
	u = (struct unclaim_later){.sctx = &ctx->rdma, .p = &p};
	assert_int_equal(pthread_create(&t, NULL, unclaim_after_100ms, &u), 0);
	t0 = clock_now_ms();
	assert_null(lgr_find_wait(&ctx->rdma, &k, t0 + 5000, &busy));
	assert_false(busy);
	assert_true(clock_now_ms() - t0 < 2000);
	pthread_join(t, NULL);
	lgr_unclaim(&ctx->rdma, &q);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* lgr_unclaim() is a handshake event: counted before each watcher is told,
 * and a watcher removed is told nothing more. */
struct claim_seen {
	struct smcr_hs_watch w;
	struct smcr_ctx *sctx;
	int calls;
	unsigned int count_then;
};

static void claim_seen_ended(struct smcr_hs_watch *w)
{
	struct claim_seen *s = (struct claim_seen *)w;

	s->calls++;
	s->count_then = smcr_ctx_hs_events(s->sctx);
}

static void test_lgr_claim_watch(void **state)
{
	uint8_t id[SMCR_SYSTEM_ID_LEN] = {1}, gid[SMCR_GID_LEN] = {2};
	struct lgr_config cfg = {.max_lgrs = 128, .max_per_peer = 8};
	struct lgr_key k = {.role = SMCR_ROLE_SERVER, .peer_id = id, .peer_gid = gid};
	struct claim_seen a = {.w.moved = claim_seen_ended}, b = {.w.moved = claim_seen_ended};
	struct lgr_pending p;
	struct usmc_ctx *ctx;
	unsigned int n0;

	(void)state;
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	a.sctx = b.sctx = &ctx->rdma;
	k.peer_addr.s_addr = htonl(0x0a000002);
	n0 = smcr_ctx_hs_events(&ctx->rdma);
	smcr_ctx_hs_watch(&ctx->rdma, &a.w);
	smcr_ctx_hs_watch(&ctx->rdma, &b.w);
	assert_int_equal(lgr_reserve(&ctx->rdma, &k, &cfg, &p), 0);
	assert_int_equal(a.calls, 0); /* a claim is no end */
	lgr_unclaim(&ctx->rdma, &p);
	assert_int_equal(smcr_ctx_hs_events(&ctx->rdma), n0 + 1);
	assert_int_equal(a.calls, 1);
	assert_int_equal(b.calls, 1);
	assert_int_equal(a.count_then, n0 + 1);
	smcr_ctx_hs_unwatch(&ctx->rdma, &a.w);
	assert_int_equal(lgr_reserve(&ctx->rdma, &k, &cfg, &p), 0);
	lgr_unclaim(&ctx->rdma, &p);
	assert_int_equal(a.calls, 1);
	assert_int_equal(b.calls, 2);
	smcr_ctx_hs_unwatch(&ctx->rdma, &b.w);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* lgr_claim(): a link group that shows up while the wait runs out is the
 * answer, with the reference it took (it was once reported as a timeout,
 * and the reference leaked: the link group was never freed). The test
 * links it in without the broadcast lgr_publish() sends, so the waiter
 * sees it only after its deadline. */
struct link_later {
	struct smcr_ctx *sctx;
	struct lgr *lgr;
};

static void *link_after_50ms(void *arg)
{
	struct link_later *u = arg;

	usleep(50000);
	pthread_mutex_lock(&u->sctx->lock);
	u->lgr->next = u->sctx->lgrs;
	u->sctx->lgrs = u->lgr;
	pthread_mutex_unlock(&u->sctx->lock);
	return NULL;
}

static void test_lgr_claim_found_at_deadline(void **state)
{
	uint8_t id[SMCR_SYSTEM_ID_LEN] = {1, 2, 3}, gid[SMCR_GID_LEN] = {4, 5, 6};
	struct lgr_config cfg = {.max_lgrs = 128, .max_per_peer = 8};
	struct lgr_key k = {.role = SMCR_ROLE_SERVER, .peer_id = id, .peer_gid = gid};
	struct lgr *lgr = calloc(1, sizeof(*lgr)), *reuse = NULL;
	struct lgr_pending first, mine;
	struct link_later u;
	struct usmc_ctx *ctx;
	pthread_t t;

	(void)state;
	assert_non_null(lgr);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	k.peer_addr.s_addr = htonl(0x0a000002);
	lgr->sctx = &ctx->rdma;
	lgr->is_server = true;
	lgr->state = LGR_ACTIVE;
	lgr->peer_addr = k.peer_addr;
	memcpy(lgr->peer_id, id, sizeof(id));
	memcpy(lgr_conn_link(lgr)->peer_gid, gid, sizeof(gid));
	lgr_conn_link(lgr)->state = SMCR_LNK_ACTIVE; /* only a link in use matches */
	lgr->max_conns = 255;
	pthread_mutex_init(&lgr->lock, NULL);
	/* another handshake's first contact with that peer is in progress */
	assert_int_equal(lgr_reserve(&ctx->rdma, &k, &cfg, &first), 0);
	u = (struct link_later){.sctx = &ctx->rdma, .lgr = lgr};
	assert_int_equal(pthread_create(&t, NULL, link_after_50ms, &u), 0);
	assert_int_equal(lgr_claim(&ctx->rdma, &k, &cfg, clock_now_ms() + 200, &mine, &reuse), 0);
	pthread_join(t, NULL);
	assert_ptr_equal(reuse, lgr);
	assert_int_equal(atomic_load(&lgr->refs), 1);
	lgr_put(reuse);
	lgr_unclaim(&ctx->rdma, &first);
	pthread_mutex_lock(&ctx->rdma.lock);
	ctx->rdma.lgrs = lgr->next; /* the fake goes before the context frees its link groups */
	pthread_mutex_unlock(&ctx->rdma.lock);
	pthread_mutex_destroy(&lgr->lock);
	free(lgr);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* A full ring of pending sends whose positions cross 2^32: every send
 * comes back in order with its own record (32-bit positions mixed up
 * slots there, as 2^32 % SMCR_MAX_SEND_WR is 256, not 0). */
static void test_sq_ring_across_32bit_wrap(void **state)
{
	static struct smcr_sq sq;
	struct smcr_tx_pend p;

	sq.head = sq.tail = (1ull << 32) - 100;
	for (uint64_t i = 0; i < SMCR_MAX_SEND_WR; i++) {
		p = (struct smcr_tx_pend){.mark = i};
		smcr_sq_push_locked(&sq, &p, 1);
	}
	assert_int_equal(sq.used, SMCR_MAX_SEND_WR);
	for (uint64_t i = 0; i < SMCR_MAX_SEND_WR; i++) {
		assert_true(smcr_sq_pop_locked(&sq, &p));
		assert_int_equal(p.mark, i);
		assert_int_equal(p.nwr, 1);
	}
	assert_false(smcr_sq_pop_locked(&sq, &p));
	assert_int_equal(sq.used, 0);
}

/* Work posted and no completion for SMCR_SQ_STALL_MS: the send queue is
 * stuck (a peer that stopped posting receives, RNR retried for ever). */
static void test_sq_stall(void **state)
{
	struct smcr_link *lnk = calloc(1, sizeof(*lnk));
	struct smcr_tx_pend p = {0};
	long t0;

	assert_non_null(lnk);
	pthread_mutex_init(&lnk->sq.lock, NULL);
	smcr_sq_push_locked(&lnk->sq, &p, 1);
	t0 = 1000;
	assert_false(smcr_wr_stalled(lnk, t0)); /* the tick sees the work */
	assert_false(smcr_wr_stalled(lnk, t0 + SMCR_SQ_STALL_MS));
	assert_true(smcr_wr_stalled(lnk, t0 + SMCR_SQ_STALL_MS + 1));
	assert_true(smcr_sq_pop_locked(&lnk->sq, &p));
	assert_false(smcr_wr_stalled(lnk, t0 + 10 * SMCR_SQ_STALL_MS)); /* idle, not stuck */
	pthread_mutex_destroy(&lnk->sq.lock);
	free(lnk);
}

/* A send refused for room marks the link as owed a kick before the
 * refusal returns: the completions that make room may all run before the
 * caller could mark it itself, and then nothing would send its data. */
static void test_sq_full_marks_pending(void **state)
{
	struct smcr_link *lnk = calloc(1, sizeof(*lnk));
	struct smcr_tx_pend p = {0};
	struct ibv_send_wr wr = {0};

	assert_non_null(lnk);
	lnk->state = SMCR_LNK_ACTIVE;
	pthread_mutex_init(&lnk->sq.lock, NULL);
	for (int i = 0; i < SMCR_TX_CDC_WRS; i++)
		smcr_sq_push_locked(&lnk->sq, &p, 1);
	assert_false(atomic_load(&lnk->any_pending));
	assert_int_equal(smcr_wr_post_send(lnk, &wr, 1, &p, SMCR_SQ_CDC), -EAGAIN);
	assert_true(atomic_load(&lnk->any_pending));
	assert_int_equal(lnk->sq.used, SMCR_TX_CDC_WRS); /* nothing posted */
	pthread_mutex_destroy(&lnk->sq.lock);
	free(lnk);
}

/* An LLC answer (TEST_LINK's, a barrier's behind a TCP hang-up) is awaited
 * SMCR_LLC_WAIT_MS from the peer's last word, not from the question: a peer
 * still sending is alive, and on a slow link its answer is seconds behind. */
static void test_llc_answer_waits_while_peer_speaks(void **state)
{
	long asked = 100000;

	/* a dead peer: silent since before the question */
	assert_true(smcr_llc_answer_waits(asked + SMCR_LLC_WAIT_MS, asked, asked - 5000));
	assert_false(smcr_llc_answer_waits(asked + SMCR_LLC_WAIT_MS + 1, asked, asked - 5000));
	/* a live one: each receive moves the bound */
	assert_true(smcr_llc_answer_waits(asked + 3 * SMCR_LLC_WAIT_MS, asked,
					  asked + 2 * SMCR_LLC_WAIT_MS + 1));
	assert_false(smcr_llc_answer_waits(asked + 3 * SMCR_LLC_WAIT_MS + 2, asked,
					   asked + 2 * SMCR_LLC_WAIT_MS + 1));
	/* a reader sleeps until the same moment the wait ends */
	assert_int_equal(smcr_llc_answer_due_ms(asked, asked + 2 * SMCR_LLC_WAIT_MS + 1),
			 asked + 3 * SMCR_LLC_WAIT_MS + 1);
	/* but never past the cap */
	assert_false(smcr_llc_answer_waits(asked + SMCR_LLC_ANSWER_MAX_MS + 1, asked,
					   asked + SMCR_LLC_ANSWER_MAX_MS));
	/* the hang-up's grace and a held EOF's bound are this rule */
	assert_int_equal(SMCR_TCP_EOF_GRACE_MS, SMCR_LLC_WAIT_MS);
	assert_int_equal(SMCR_EOF_HOLD_MS, SMCR_LLC_WAIT_MS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ueid_pad),
		cmocka_unit_test(test_ctx_ueid_and_ids),
		cmocka_unit_test(test_lgr_only_init_activates),
		cmocka_unit_test(test_sq_ring_across_32bit_wrap),
		cmocka_unit_test(test_sq_stall),
		cmocka_unit_test(test_sq_full_marks_pending),
		cmocka_unit_test(test_llc_answer_waits_while_peer_speaks),
		cmocka_unit_test(test_lgr_find_wait_pending),
		cmocka_unit_test(test_lgr_claim_found_at_deadline),
		cmocka_unit_test(test_lgr_claim_watch),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
