// SPDX-License-Identifier: MIT
/*
 * The link group caps through the real claims (lgr_claim(), lgr_reserve()
 * in lgr_find.c), on a context whose published link groups are fakes (no
 * device: calloc'd, their verbs never touched), counted in lgrs_open as
 * lgr_create() would; a first contact admitted holds its place by its
 * claim until lgr_unclaim(). Checks that a full cap reclaims the idle link group idle the
 * longest (of the peer's address where its cap is the full one) and
 * refuses only when none is idle, that incoming first contacts keep out
 * of the reserve and hold at most half of an address's cap, and that
 * concurrent claims reclaim each idle link group once.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "ctx.h"
#include "lgr.h"

#define MAX_FAKES 16
#define NET	  0x0a000000 /* 10.0.0.0: fake peers are 10.0.0.<n> */

struct env {
	struct usmc_ctx *ctx;
	struct smcr_ctx *s;
	struct lgr *fakes[MAX_FAKES];
	int nfakes;
};

static struct in_addr peer(int n)
{
	return (struct in_addr){.s_addr = htonl(NET + (uint32_t)n)};
}

/* A published server link group with 10.0.0.<@n>, idle for @idle_ms
 * (-1: one connection on it). */
static struct lgr *fake(struct env *e, int n, long idle_ms)
{
	struct lgr *l = calloc(1, sizeof(*l));

	assert_non_null(l);
	assert_true(e->nfakes < MAX_FAKES);
	l->sctx = e->s;
	l->id = (uint32_t)(e->nfakes + 1) << 8;
	l->is_server = true;
	l->state = LGR_ACTIVE;
	l->peer_addr = peer(n);
	l->peer_id[0] = (uint8_t)e->nfakes;
	l->max_conns = SMCR_MAX_CONNS;
	l->nconns = idle_ms < 0 ? 1 : 0;
	l->idle_since_ms = idle_ms < 0 ? 0 : clock_now_ms() - idle_ms;
	pthread_mutex_init(&l->lock, NULL);
	pthread_mutex_lock(&e->s->lock);
	l->next = e->s->lgrs;
	e->s->lgrs = l;
	pthread_mutex_unlock(&e->s->lock);
	atomic_fetch_add(&e->s->lgrs_open, 1);
	e->fakes[e->nfakes++] = l;
	return l;
}

static bool published(struct env *e, const struct lgr *l)
{
	bool found = false;

	pthread_mutex_lock(&e->s->lock);
	for (const struct lgr *x = e->s->lgrs; x; x = x->next)
		found |= x == l;
	pthread_mutex_unlock(&e->s->lock);
	return found;
}

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	assert_int_equal(usmc_ctx_create(&e->ctx), 0);
	e->s = &e->ctx->rdma;
	*state = e;
	return 0;
}

/* The fakes go before the context frees its link groups. */
static int teardown(void **state)
{
	struct env *e = *state;

	pthread_mutex_lock(&e->s->lock);
	e->s->lgrs = NULL;
	e->s->lgrs_leaving = 0;
	atomic_store(&e->s->lgrs_open, 0);
	pthread_mutex_unlock(&e->s->lock);
	for (int i = 0; i < e->nfakes; i++) {
		pthread_mutex_destroy(&e->fakes[i]->lock);
		free(e->fakes[i]);
	}
	assert_int_equal(usmc_ctx_destroy(e->ctx), 0);
	free(e);
	return 0;
}

/* The caps of the claims below (lgr_config of the handshake's options). */
static struct lgr_config caps_cfg = {.max_lgrs = 128, .max_per_peer = 8};

/* A first contact with 10.0.0.<@n> as @role, system ID @id, as a server
 * claims one (lgr_claim()) and a client told "first contact" reserves one
 * (lgr_reserve()). Its claim holds its place until lgr_unclaim(). */
static int claim_caps(struct env *e, enum smcr_role role, int n, uint8_t id, struct lgr_pending *p)
{
	uint8_t pid[SMCR_SYSTEM_ID_LEN] = {0xee, id}, gid[SMCR_GID_LEN] = {0};
	struct lgr_key k = {.role = role, .peer_id = pid, .peer_gid = gid, .peer_addr = peer(n)};
	struct lgr *reuse = NULL;
	int rc;

	if (role == SMCR_ROLE_CLIENT)
		return lgr_reserve(e->s, &k, &caps_cfg, p);
	rc = lgr_claim(e->s, &k, &caps_cfg, 0, p, &reuse);
	assert_null(reuse);
	return rc;
}

/* A full context takes the place of the link group idle the longest,
 * whoever's; one with a connection is never taken. */
static void test_full_reclaims_oldest_idle(void **state)
{
	struct env *e = *state;
	struct lgr *busy, *young, *oldest, *old;
	struct lgr_pending p, q;
	struct usmc_ctx_stats st;

	caps_cfg = (struct lgr_config){.max_lgrs = 4, .max_per_peer = 8};
	busy = fake(e, 2, -1);
	young = fake(e, 3, 1000);
	oldest = fake(e, 4, 5000);
	old = fake(e, 5, 3000);
	assert_int_equal(claim_caps(e, SMCR_ROLE_CLIENT, 9, 1, &p), 0);
	assert_false(published(e, oldest));
	assert_true(oldest->reclaimed);
	assert_true(published(e, busy) && published(e, young) && published(e, old));
	assert_int_equal(e->s->lgrs_leaving, 1);
	assert_int_equal(atomic_load(&e->s->lgrs_reclaimed), 1);
	usmc_ctx_stats(e->ctx, &st);
	assert_int_equal(st.lgrs_reclaimed, 1);
	/* then the next oldest, then none is idle: refused */
	assert_int_equal(claim_caps(e, SMCR_ROLE_CLIENT, 10, 2, &q), 0);
	assert_true(old->reclaimed && !young->reclaimed);
	young->nconns = 1;
	assert_int_equal(claim_caps(e, SMCR_ROLE_CLIENT, 11, 3, &(struct lgr_pending){0}), -EUSERS);
	/* a finder's reference keeps one too */
	young->nconns = 0;
	atomic_store(&young->refs, 1);
	assert_int_equal(claim_caps(e, SMCR_ROLE_CLIENT, 11, 3, &(struct lgr_pending){0}), -EUSERS);
	assert_int_equal(atomic_load(&e->s->lgrs_reclaimed), 2);
	/* a first contact that ends gives its place back */
	lgr_unclaim(e->s, &q);
	assert_int_equal(claim_caps(e, SMCR_ROLE_CLIENT, 11, 3, &q), 0);
	assert_int_equal(atomic_load(&e->s->lgrs_reclaimed), 2);
	lgr_unclaim(e->s, &q);
	lgr_unclaim(e->s, &p);
}

/* At an address's cap only that address's idle link groups make room,
 * the oldest of them first. */
static void test_peer_cap_reclaims_its_own(void **state)
{
	struct env *e = *state;
	struct lgr *other, *mine_old, *mine_young;
	struct lgr_pending p;

	caps_cfg = (struct lgr_config){.max_lgrs = 128, .max_per_peer = 2};
	other = fake(e, 3, 9000);
	mine_young = fake(e, 2, 1000);
	mine_old = fake(e, 2, 2000);
	assert_int_equal(claim_caps(e, SMCR_ROLE_CLIENT, 2, 1, &p), 0);
	assert_true(mine_old->reclaimed);
	assert_false(mine_young->reclaimed || other->reclaimed);
	lgr_unclaim(e->s, &p);
	/* its pending one and a busy one fill it: the other address's idle
	 * one does not help */
	mine_young->nconns = 1;
	assert_int_equal(claim_caps(e, SMCR_ROLE_CLIENT, 2, 2, &p), 0);
	assert_int_equal(claim_caps(e, SMCR_ROLE_CLIENT, 2, 3, &(struct lgr_pending){0}), -EUSERS);
	assert_false(other->reclaimed);
	lgr_unclaim(e->s, &p);
}

/* The last places of the context are our own connects'. */
static void test_incoming_leave_reserve(void **state)
{
	struct env *e = *state;
	struct lgr_pending p;

	caps_cfg = (struct lgr_config){.max_lgrs = 8, .max_per_peer = 8};
	for (int i = 0; i < 7; i++)
		fake(e, 2 + i, -1);
	assert_int_equal(claim_caps(e, SMCR_ROLE_SERVER, 20, 1, &p), -EUSERS);
	assert_int_equal(claim_caps(e, SMCR_ROLE_CLIENT, 20, 1, &p), 0);
	lgr_unclaim(e->s, &p);
}

/* One address's PROPOSALs hold half its cap: its fifth first contact in
 * progress is refused, our own connect to it is not. */
static void test_hs_share_per_address(void **state)
{
	struct env *e = *state;
	struct lgr_pending p[6];

	caps_cfg = (struct lgr_config){.max_lgrs = 128, .max_per_peer = 8};
	for (int i = 0; i < 4; i++)
		assert_int_equal(claim_caps(e, SMCR_ROLE_SERVER, 2, (uint8_t)i, &p[i]), 0);
	assert_int_equal(claim_caps(e, SMCR_ROLE_SERVER, 2, 4, &p[4]), -EUSERS);
	/* another address is not concerned */
	assert_int_equal(claim_caps(e, SMCR_ROLE_SERVER, 3, 4, &p[4]), 0);
	assert_int_equal(claim_caps(e, SMCR_ROLE_CLIENT, 2, 5, &p[5]), 0);
	/* one ends: room again */
	lgr_unclaim(e->s, &p[0]);
	assert_int_equal(claim_caps(e, SMCR_ROLE_SERVER, 2, 6, &p[0]), 0);
	for (int i = 0; i < 6; i++)
		lgr_unclaim(e->s, &p[i]);
}

/* Claims racing at a full context: each idle link group is reclaimed
 * once, each admitted claim has its own, and the count adds up. */
#define RACERS 8
struct racer {
	struct env *e;
	int n, rc;
	struct lgr_pending p;
};

static void *race(void *arg)
{
	struct racer *r = arg;

	r->rc = claim_caps(r->e, SMCR_ROLE_CLIENT, r->n, (uint8_t)r->n, &r->p);
	return NULL;
}

static void test_concurrent_reclaims(void **state)
{
	struct env *e = *state;
	struct racer r[RACERS];
	pthread_t t[RACERS];
	int admitted = 0, reclaimed = 0;

	caps_cfg = (struct lgr_config){.max_lgrs = 6, .max_per_peer = 8};
	for (int i = 0; i < 6; i++)
		fake(e, 2 + i, 1000 * (i + 1));
	for (int i = 0; i < RACERS; i++) {
		r[i] = (struct racer){.e = e, .n = 40 + i};
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < RACERS; i++) {
		pthread_join(t[i], NULL);
		admitted += !r[i].rc;
		assert_true(!r[i].rc || r[i].rc == -EUSERS);
	}
	for (int i = 0; i < e->nfakes; i++)
		reclaimed += e->fakes[i]->reclaimed;
	assert_int_equal(admitted, 6);
	assert_int_equal(reclaimed, 6);
	assert_int_equal(atomic_load(&e->s->lgrs_reclaimed), 6);
	assert_int_equal(e->s->lgrs_leaving, 6);
	for (int i = 0; i < RACERS; i++)
		if (!r[i].rc)
			lgr_unclaim(e->s, &r[i].p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_full_reclaims_oldest_idle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_cap_reclaims_its_own, setup, teardown),
		cmocka_unit_test_setup_teardown(test_incoming_leave_reserve, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hs_share_per_address, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_reclaims, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
