// SPDX-License-Identifier: MIT
/*
 * What usmc-stat's snapshot (stat.c stat_snapshot(), lgr_info.c) says of a
 * link group's links, without a device: the context's published link
 * group is a fake (calloc'd, its link built by lgr_link_init() and given a
 * fake QP; no verbs call is made), its snapshot parsed back with
 * usmc-stat's own reader. Each link that exists is in the link group's
 * "links" array with its slot, number, state, port, GIDs and QP numbers,
 * and the link group's flat device, GIDs and QP numbers are its main
 * link's; a slot without a link is not listed. The context's counters of
 * link events are 0 when fresh and count what smcr_ctx_count_link_event()
 * is told. A link that fails (its error handler, as a failed work request
 * calls it) goes INACTIVE, counts one link failure and says so in one
 * INFO line, however often its error is reported; a link an orderly end
 * took down, or one that was not up yet, counts none.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ctx.h"
#include "lgr.h"
#include "stat.h"
#include "usmc_stat_json.h"

struct env {
	struct usmc_ctx *ctx;
	struct smcr_ctx *s;
	struct lgr *lgr;
	struct ibv_qp qp; /* the fake QP: only its number is read */
	char log[8][256]; /* the context's log lines, INFO and DEBUG */
	int nlog;
};

static void log_line(void *arg, enum usmc_log_level level, const char *msg)
{
	struct env *e = arg;

	if (e->nlog < 8)
		snprintf(e->log[e->nlog++], sizeof(e->log[0]), "%s %s",
			 level == USMC_LOG_INFO ? "info" : "other", msg);
}

/* How many log lines contain @s. */
static int log_count(const struct env *e, const char *s)
{
	int n = 0;

	for (int i = 0; i < e->nlog; i++)
		n += strstr(e->log[i], s) != NULL;
	return n;
}

static void gid_v4(uint8_t gid[SMCR_GID_LEN], const char *v4)
{
	memset(gid, 0, SMCR_GID_LEN);
	gid[10] = gid[11] = 0xff;
	assert_int_equal(inet_pton(AF_INET, v4, gid + 12), 1);
}

/* A published server link group whose one link is ACTIVE on rxe7 port 1,
 * QP 17 toward the peer's QP 18. */
static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	struct smcr_dev dev = {.name = "rxe7", .port = 1, .gid_index = 1};
	struct lgr *l = calloc(1, sizeof(*l));
	struct smcr_link *lnk;

	assert_non_null(e);
	assert_non_null(l);
	assert_int_equal(usmc_ctx_create(&e->ctx), 0);
	assert_int_equal(usmc_ctx_set_log(e->ctx, USMC_LOG_DEBUG, log_line, e), 0);
	e->s = &e->ctx->rdma;
	l->sctx = e->s;
	l->id = 0x300;
	l->is_server = true;
	l->state = LGR_ACTIVE;
	l->max_conns = SMCR_MAX_CONNS;
	pthread_mutex_init(&l->lock, NULL);
	smcr_llc_init(&l->llc);
	gid_v4(dev.gid, "10.0.0.2");
	lgr_link_init(l, &dev);
	lnk = &l->lnk[LGR_FIRST_LINK];
	e->qp.qp_num = 17;
	lnk->qp = &e->qp;
	lnk->peer_qpn = 18;
	gid_v4(lnk->peer_gid, "10.0.0.1");
	lnk->link_num = 1;
	assert_true(smcr_link_activate(lnk));
	pthread_mutex_lock(&e->s->lock);
	l->next = e->s->lgrs;
	e->s->lgrs = l;
	pthread_mutex_unlock(&e->s->lock);
	e->lgr = l;
	*state = e;
	return 0;
}

/* The fake goes before the context frees its link groups. */
static int teardown(void **state)
{
	struct env *e = *state;

	pthread_mutex_lock(&e->s->lock);
	e->s->lgrs = NULL;
	pthread_mutex_unlock(&e->s->lock);
	pthread_mutex_destroy(&e->lgr->lnk[LGR_FIRST_LINK].sq.lock);
	pthread_mutex_destroy(&e->lgr->lock);
	smcr_llc_fini(&e->lgr->llc);
	free(e->lgr);
	assert_int_equal(usmc_ctx_destroy(e->ctx), 0);
	free(e);
	return 0;
}

/* The context's snapshot, parsed (the caller frees it). */
static struct jv *snapshot(struct env *e)
{
	enum jv_error err;
	size_t len = 0;
	char *buf = stat_snapshot(e->ctx, 0, &len);
	struct jv *v;

	assert_non_null(buf);
	v = jv_parse(buf, len, (size_t)-1, &err);
	if (!v)
		fail_msg("%s: %s", jv_error_text(err), buf);
	free(buf);
	return v;
}

/* The one link group of snapshot @v. */
static const struct jv *the_lgr(const struct jv *v)
{
	const struct jv *gs = jv_get(v, "link_groups");

	assert_non_null(gs);
	assert_int_equal(gs->t, J_ARR);
	assert_int_equal(gs->n, 1);
	return gs->items[0];
}

static const struct jv *links_of(const struct jv *g)
{
	const struct jv *ls = jv_get(g, "links");

	assert_non_null(ls);
	assert_int_equal(ls->t, J_ARR);
	return ls;
}

/* One ACTIVE link, listed with everything, and the flat fields are its. */
static void test_one_active_link(void **state)
{
	struct env *e = *state;
	struct jv *v = snapshot(e);
	const struct jv *g = the_lgr(v), *ls = links_of(g), *k;

	assert_int_equal(ls->n, 1);
	k = ls->items[0];
	assert_int_equal(jv_u64(k, "slot"), 0);
	assert_int_equal(jv_u64(k, "link_num"), 1);
	assert_string_equal(jv_str(k, "state"), "ACTIVE");
	assert_string_equal(jv_str(k, "device"), "rxe7");
	assert_int_equal(jv_u64(k, "port"), 1);
	assert_string_equal(jv_str(k, "local_gid"), "::ffff:10.0.0.2");
	assert_string_equal(jv_str(k, "peer_gid"), "::ffff:10.0.0.1");
	assert_int_equal(jv_u64(k, "qp_num"), 17);
	assert_int_equal(jv_u64(k, "peer_qp_num"), 18);
	assert_int_equal(jv_u64(k, "sq_used"), 0);
	assert_int_equal(jv_u64(k, "sq_size"), SMCR_MAX_SEND_WR);
	/* the link group's own keys, as before links were listed */
	assert_string_equal(jv_str(g, "device"), "rxe7");
	assert_int_equal(jv_u64(g, "port"), 1);
	assert_string_equal(jv_str(g, "local_gid"), "::ffff:10.0.0.2");
	assert_string_equal(jv_str(g, "peer_gid"), "::ffff:10.0.0.1");
	assert_int_equal(jv_u64(g, "qp_num"), 17);
	assert_int_equal(jv_u64(g, "peer_qp_num"), 18);
	jv_free(v);
}

/* A link that went down is still listed, INACTIVE, with its QP numbers. */
static void test_inactive_link(void **state)
{
	struct env *e = *state;
	struct jv *v;
	const struct jv *ls;

	smcr_link_deactivate(&e->lgr->lnk[LGR_FIRST_LINK]);
	v = snapshot(e);
	ls = links_of(the_lgr(v));
	assert_int_equal(ls->n, 1);
	assert_string_equal(jv_str(ls->items[0], "state"), "INACTIVE");
	assert_int_equal(jv_u64(ls->items[0], "qp_num"), 17);
	assert_int_equal(jv_u64(the_lgr(v), "qp_num"), 17);
	jv_free(v);
}

/* An ACTIVATING link shows its local port only: its handshake writes the rest. */
static void test_activating_link(void **state)
{
	struct env *e = *state;
	struct jv *v;
	const struct jv *ls, *k;

	atomic_store(&e->lgr->lnk[LGR_FIRST_LINK].state, SMCR_LNK_ACTIVATING);
	v = snapshot(e);
	ls = links_of(the_lgr(v));
	assert_int_equal(ls->n, 1);
	k = ls->items[0];
	assert_string_equal(jv_str(k, "state"), "ACTIVATING");
	assert_string_equal(jv_str(k, "device"), "rxe7");
	assert_string_equal(jv_str(k, "local_gid"), "::ffff:10.0.0.2");
	assert_int_equal(jv_u64(k, "qp_num"), 0);
	assert_int_equal(jv_u64(k, "peer_qp_num"), 0);
	assert_string_equal(jv_str(k, "peer_gid"), "::");
	jv_free(v);
}

/* A slot without a link is not listed; the flat fields are then empty. */
static void test_unused_slot(void **state)
{
	struct env *e = *state;
	struct jv *v;
	const struct jv *g;

	atomic_store(&e->lgr->lnk[LGR_FIRST_LINK].state, SMCR_LNK_UNUSED);
	v = snapshot(e);
	g = the_lgr(v);
	assert_int_equal(links_of(g)->n, 0);
	assert_string_equal(jv_str(g, "device"), "");
	assert_int_equal(jv_u64(g, "qp_num"), 0);
	jv_free(v);
}

/* The link counters: 0 on a fresh context, then what they are told. */
static void test_link_counters(void **state)
{
	static const char *const names[] = {"links_added", "link_failures", "failovers"};
	struct env *e = *state;
	struct usmc_ctx_stats st;
	const struct jv *c;
	struct jv *v = snapshot(e);

	c = jv_get(v, "counters");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		assert_non_null(jv_get(c, names[i]));
		assert_int_equal(jv_u64(c, names[i]), 0);
	}
	jv_free(v);
	smcr_ctx_count_link_event(e->s, SMCR_LINK_ADDED, 1);
	smcr_ctx_count_link_event(e->s, SMCR_LINK_FAILED, 2);
	smcr_ctx_count_link_event(e->s, SMCR_LINK_FAILOVER, 7);
	usmc_ctx_stats(e->ctx, &st);
	assert_int_equal(st.links_added, 1);
	assert_int_equal(st.link_failures, 2);
	assert_int_equal(st.failovers, 7);
	v = snapshot(e);
	c = jv_get(v, "counters");
	assert_int_equal(jv_u64(c, "links_added"), 1);
	assert_int_equal(jv_u64(c, "link_failures"), 2);
	assert_int_equal(jv_u64(c, "failovers"), 7);
	jv_free(v);
}

/* The link's error handler, as smcr_wr.c calls it on a failed completion.
 * No verbs: the fake QP is left out of the link group's end. */
static void link_error(struct env *e, int err)
{
	struct smcr_link *lnk = &e->lgr->lnk[LGR_FIRST_LINK];

	lnk->qp = NULL;
	lnk->up.h->error(lnk, err, false);
}

/* An ACTIVE link that fails: INACTIVE, one failure, one INFO line. */
static void test_link_failure(void **state)
{
	struct env *e = *state;
	struct usmc_ctx_stats st;

	link_error(e, -ECONNABORTED);
	link_error(e, -ETIMEDOUT); /* reported again (a flushed completion): once */
	assert_int_equal(atomic_load(&e->lgr->lnk[LGR_FIRST_LINK].state), SMCR_LNK_INACTIVE);
	assert_int_equal(atomic_load(&e->lgr->state), LGR_DEAD); /* its one link */
	usmc_ctx_stats(e->ctx, &st);
	assert_int_equal(st.link_failures, 1);
	assert_int_equal(st.links_added, 0);
	assert_int_equal(st.failovers, 0);
	for (int i = 0; i < e->nlog; i++)
		print_message("log: %s\n", e->log[i]);
	assert_int_equal(log_count(e, "info link group 300: link 1 (rxe7:1) down: ECONNABORTED"),
			 1);
	assert_int_equal(log_count(e, ": link 1"), 1);
}

/* An orderly end takes the link down first: no failure, no link line. */
static void test_orderly_end(void **state)
{
	struct env *e = *state;
	struct usmc_ctx_stats st;

	e->lgr->lnk[LGR_FIRST_LINK].qp = NULL;
	lgr_terminate(e->lgr, -ECONNABORTED, false); /* as lgr_free() of a healthy group */
	link_error(e, -ECONNABORTED);		     /* its flushed work requests */
	usmc_ctx_stats(e->ctx, &st);
	assert_int_equal(st.link_failures, 0);
	assert_int_equal(log_count(e, ": link 1"), 0);
}

/* A link that fails before it was up is no link failure (a DEBUG line). */
static void test_failure_before_up(void **state)
{
	struct env *e = *state;
	struct usmc_ctx_stats st;

	atomic_store(&e->lgr->state, LGR_INIT);
	atomic_store(&e->lgr->lnk[LGR_FIRST_LINK].state, SMCR_LNK_ACTIVATING);
	link_error(e, -ECONNABORTED);
	usmc_ctx_stats(e->ctx, &st);
	assert_int_equal(st.link_failures, 0);
	assert_int_equal(
		log_count(e, "other link group 300: link 1 (rxe7:1) down before it was up"), 1);
	assert_int_equal(log_count(e, "info "), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_one_active_link, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inactive_link, setup, teardown),
		cmocka_unit_test_setup_teardown(test_activating_link, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unused_slot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_link_counters, setup, teardown),
		cmocka_unit_test_setup_teardown(test_link_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_orderly_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failure_before_up, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
