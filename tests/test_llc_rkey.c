// SPDX-License-Identifier: MIT
/*
 * The peer's RMBs in the link group's rtokens (lgr_rtoken.h) as the LLC
 * and the CLC fill them: the peer's CONFIRM_RKEY stores a row (its
 * additional entries in the other links' columns) or is refused when the
 * table is full, its DELETE_RKEY removes rows and reports the unknown
 * rkeys, a connection's peer RMB from the CLC finds or adds its row
 * (smcr_conn_set_peer()), and our CONFIRM_RKEY names our RMB on every
 * other active link. No device: the fake link group of
 * tests/common/fake_lgr.h, whose QP records the LLC messages.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmocka.h>

#include "bufpool.h"
#include "lgr.h"
#include "lgr_rtoken.h"
#include "llc.h"
#include "smcr_clc.h"
#include "smcr_conn.h"
#include "smcr_llc.h"
#include "smcr_wr.h"

#include "common/fake_lgr.h"

#define RMB_BYTES 16384u

/* Link slot @slot holds a link numbered @num in @state (no verbs: only
 * what the rkey paths look at). */
static void fake_link(struct fake *f, int slot, uint8_t num, int state)
{
	f->lgr->lnk[slot].link_num = num;
	atomic_store(&f->lgr->lnk[slot].state, state);
}

/* The peer's request @m arrives on the first link; its answer, decoded. */
static struct llc_msg peer_asks(struct fake *f, const struct llc_msg *m)
{
	struct llc_msg a;
	int n = fake_nsent;

	fake_peer_sends(f, m);
	assert_int_equal(fake_nsent, n + 1);
	assert_int_equal(llc_decode(fake_sent[n], LLC_MSG_LEN, &a), 0);
	assert_int_equal(a.type, m->type);
	assert_true(a.flags & LLC_FLAG_RESP);
	return a;
}

static struct llc_msg confirm_rkey(uint32_t rkey, uint64_t vaddr)
{
	struct llc_msg m = {.version = LLC_V2, .type = LLC_CONFIRM_RKEY};

	m.confirm_rkey.rkey = rkey;
	m.confirm_rkey.vaddr = vaddr;
	return m;
}

static struct llc_msg delete_rkey(uint8_t version, const uint32_t *rkeys, uint8_t n)
{
	struct llc_msg m = {.version = version, .type = LLC_DELETE_RKEY};

	m.delete_rkey.num_rkeys = n;
	memcpy(m.delete_rkey.rkeys, rkeys, n * sizeof(*rkeys));
	return m;
}

/* The one row in use. */
static struct lgr_rtoken_entry only_row(struct fake *f)
{
	struct lgr_rtoken_entry e[2];

	assert_int_equal(lgr_rtoken_list(&f->lgr->rtok, e, 2), 1);
	return e[0];
}

/* CONFIRM_RKEY: the first entry for the link it came over, each additional
 * one in the column of the link it names; a link we do not know and the
 * receiving link named again are ignored. */
static void test_peer_confirm_rkey_stored(void **state)
{
	struct fake f;
	struct llc_msg m, a;
	struct lgr_rtoken_entry e;

	(void)state;
	fake_open(&f);
	fake_link(&f, 2, 3, SMCR_LNK_ACTIVE);
	m = confirm_rkey(0x1234, 0x7f0000100000ull);
	m.confirm_rkey.num_extra = 2;
	m.confirm_rkey.extra[0] =
		(struct llc_rtoken){.link_id = 3, .rkey = 0x3234, .vaddr = 0x3000};
	m.confirm_rkey.extra[1] =
		(struct llc_rtoken){.link_id = 9, .rkey = 0x9234, .vaddr = 0x9000};
	a = peer_asks(&f, &m);
	assert_int_equal(a.flags, LLC_FLAG_RESP);
	assert_int_equal(a.confirm_rkey.rkey, 0x1234); /* the echo */
	assert_int_equal(a.confirm_rkey.num_extra, 2);
	e = only_row(&f);
	assert_int_equal(e.cols, 1 | 4);
	assert_int_equal(e.col[0].rkey, 0x1234);
	assert_int_equal(e.col[0].addr, 0x7f0000100000ull);
	assert_int_equal(e.col[2].rkey, 0x3234);
	assert_int_equal(e.col[2].addr, 0x3000);
	/* the same again (a retry): the same row; an entry for link 1, the
	 * one it came over, does not overwrite the first entry */
	m.confirm_rkey.num_extra = 1;
	m.confirm_rkey.extra[0] = (struct llc_rtoken){.link_id = 1, .rkey = 0x1111, .vaddr = 0x1};
	a = peer_asks(&f, &m);
	assert_int_equal(a.flags, LLC_FLAG_RESP);
	assert_int_equal(only_row(&f).handle, e.handle);
	assert_int_equal(only_row(&f).col[0].rkey, 0x1234);
	/* a link that is down, and a link number none has, take nothing */
	fake_link(&f, 1, 2, SMCR_LNK_INACTIVE);
	m.confirm_rkey.extra[0] = (struct llc_rtoken){.link_id = 2, .rkey = 0x2222, .vaddr = 0x2};
	peer_asks(&f, &m);
	m.confirm_rkey.extra[0].link_id = 0;
	peer_asks(&f, &m);
	assert_int_equal(only_row(&f).cols, 1 | 4);
	assert_int_equal(atomic_load(&f.lgr->llc.rkey_confirmed), 4);
	fake_close(&f);
}

/* A full table: a new RMB is refused (NEG|RETRY: the peer declines its
 * connection), one the table knows is still confirmed. */
static void test_peer_confirm_rkey_full(void **state)
{
	struct fake f;
	struct llc_msg m;

	(void)state;
	fake_open(&f);
	for (uint32_t i = 0; i < LGR_RTOKEN_ROWS; i++)
		assert_true(lgr_rtoken_add(&f.lgr->rtok, 0, 0x100 + i, 0x1000 * i) > 0);
	m = confirm_rkey(0x99999, 0x5000);
	assert_int_equal(peer_asks(&f, &m).flags,
			 LLC_FLAG_RESP | LLC_FLAG_RKEY_NEG | LLC_FLAG_RKEY_RETRY);
	m = confirm_rkey(0x100 + 7, 0x1000 * 7);
	assert_int_equal(peer_asks(&f, &m).flags, LLC_FLAG_RESP);
	assert_int_equal(lgr_rtoken_count(&f.lgr->rtok), LGR_RTOKEN_ROWS);
	/* a DELETE_RKEY makes room */
	m = delete_rkey(LLC_V2, (uint32_t[]){0x100}, 1);
	assert_int_equal(peer_asks(&f, &m).flags, LLC_FLAG_RESP);
	m = confirm_rkey(0x99999, 0x5000);
	assert_int_equal(peer_asks(&f, &m).flags, LLC_FLAG_RESP);
	fake_close(&f);
}

/* DELETE_RKEY: the rows named go, the unknown rkeys are reported (v2: a
 * count, v1: a mask bit per position), NEG when any was unknown. */
static void test_peer_delete_rkey(void **state)
{
	struct fake f;
	struct llc_msg m, a;

	(void)state;
	fake_open(&f);
	assert_true(lgr_rtoken_add(&f.lgr->rtok, 0, 0x10, 0x1000) > 0);
	assert_true(lgr_rtoken_add(&f.lgr->rtok, 0, 0x20, 0x2000) > 0);
	assert_true(lgr_rtoken_add(&f.lgr->rtok, 0, 0x30, 0x3000) > 0);
	m = delete_rkey(LLC_V2, (uint32_t[]){0x10, 0x99, 0x20}, 3);
	a = peer_asks(&f, &m);
	assert_int_equal(a.flags, LLC_FLAG_RESP | LLC_FLAG_RKEY_NEG);
	assert_int_equal(a.delete_rkey.err, 1);
	assert_int_equal(lgr_rtoken_count(&f.lgr->rtok), 1);
	m = delete_rkey(LLC_V1, (uint32_t[]){0x10, 0x30}, 2);
	a = peer_asks(&f, &m);
	assert_int_equal(a.flags, LLC_FLAG_RESP | LLC_FLAG_RKEY_NEG);
	assert_int_equal(a.delete_rkey.err, 0x80); /* rkey 0 (0x10) is gone already */
	assert_int_equal(lgr_rtoken_count(&f.lgr->rtok), 0);
	m = delete_rkey(LLC_V2, (uint32_t[]){0x99}, 1);
	assert_int_equal(peer_asks(&f, &m).delete_rkey.err, 1);
	assert_int_equal(atomic_load(&f.lgr->llc.rkey_deleted), 3);
	fake_close(&f);
}

static struct smcr_conn *conn_new(struct fake *f)
{
	struct smcr_conn *sc;

	assert_int_equal(smcr_conn_new(f->lgr, RMB_BYTES, RMB_BYTES, &sc), 0);
	return sc;
}

/* The connection's peer RMB from the CLC: a row whose column is the
 * connection's link's (found again when the peer's CONFIRM_RKEY brought
 * it, with the other links' columns), the copy for the data path with the
 * RMBE's offset; once the peer deletes the rkey, the connection's handle
 * finds nothing, not the next RMB that takes the row. */
static void test_set_peer_row(void **state)
{
	struct smcr_peer_rmb p = {.token = 7, .rkey = 0xabc, .dma_addr = 0x40000, .rmbe_idx = 2};
	struct fake f;
	struct smcr_conn *a, *b, *c;
	struct lgr_rtoken r;
	struct llc_msg m;

	(void)state;
	fake_open(&f);
	fake_link(&f, 1, 2, SMCR_LNK_ACTIVE);
	a = conn_new(&f);
	b = conn_new(&f);
	/* both on the first link (the second would have b: links in turn) */
	smcr_conn_use_link(a, 0);
	smcr_conn_use_link(b, 0);
	assert_int_equal(a->peer_rtok, 0);
	assert_int_equal(smcr_conn_set_peer(a, &p), 0);
	assert_true(a->peer_rtok > 0);
	assert_int_equal(lgr_rtoken_get(&f.lgr->rtok, a->peer_rtok, 0, &r), 0);
	assert_int_equal(r.rkey, 0xabc);
	assert_int_equal(r.addr, 0x40000); /* the RMB's, not the RMBE's */
	assert_int_equal(a->peer_rkey, 0xabc);
	assert_int_equal(a->peer_rmb_addr, 0x40000 + a->rx.peer_len);
	/* the peer's CONFIRM_RKEY first (a reused link group), then the CLC */
	m = confirm_rkey(0xdef, 0x80000);
	m.confirm_rkey.num_extra = 1;
	m.confirm_rkey.extra[0] =
		(struct llc_rtoken){.link_id = 2, .rkey = 0x2def, .vaddr = 0x80000};
	peer_asks(&f, &m);
	p.rkey = 0xdef;
	p.dma_addr = 0x80000;
	p.rmbe_idx = 1;
	assert_int_equal(smcr_conn_set_peer(b, &p), 0);
	assert_int_equal(lgr_rtoken_count(&f.lgr->rtok), 2);
	assert_int_equal(lgr_rtoken_get(&f.lgr->rtok, b->peer_rtok, 1, &r), 0);
	assert_int_equal(r.rkey, 0x2def);
	assert_int_equal(b->peer_rmb_addr, 0x80000);
	/* the peer deletes a's rkey; another RMB takes the row */
	m = delete_rkey(LLC_V2, (uint32_t[]){0xabc}, 1);
	assert_int_equal(peer_asks(&f, &m).delete_rkey.err, 0);
	m = confirm_rkey(0x123, 0xc0000);
	peer_asks(&f, &m);
	assert_int_equal(lgr_rtoken_get(&f.lgr->rtok, a->peer_rtok, 0, &r), -ENOENT);
	assert_int_equal(lgr_rtoken_get(&f.lgr->rtok, b->peer_rtok, 0, &r), 0);
	/* a connection that sends on another link: the row's column is that link's */
	c = conn_new(&f);
	c->lnk_slot = 1;
	p.rkey = 0x555;
	p.dma_addr = 0x100000;
	assert_int_equal(smcr_conn_set_peer(c, &p), 0);
	assert_int_equal(lgr_rtoken_get(&f.lgr->rtok, c->peer_rtok, 1, &r), 0);
	assert_int_equal(r.rkey, 0x555);
	assert_int_equal(lgr_rtoken_get(&f.lgr->rtok, c->peer_rtok, 0, &r), -ENODATA);
	assert_int_equal(c->peer_rkey, 0x555);
	smcr_conn_discard(a);
	smcr_conn_discard(b);
	smcr_conn_discard(c);
	fake_close(&f);
}

/* No rtoken left for the connection's peer RMB: refused, nothing set (the
 * handshake declines); one the table knows is still taken. */
static void test_set_peer_full(void **state)
{
	struct smcr_peer_rmb p = {.token = 7, .rkey = 0xabc, .dma_addr = 0x40000, .rmbe_idx = 1};
	struct fake f;
	struct smcr_conn *sc;

	(void)state;
	fake_open(&f);
	for (uint32_t i = 0; i < LGR_RTOKEN_ROWS; i++)
		assert_true(lgr_rtoken_add(&f.lgr->rtok, 0, 0x100 + i, 0x1000 * i) > 0);
	sc = conn_new(&f);
	assert_int_equal(smcr_conn_set_peer(sc, &p), -ENOSPC);
	assert_int_equal(sc->peer_rtok, 0);
	assert_int_equal(sc->rx.peer_len, 0);
	assert_int_equal(sc->peer_rkey, 0);
	p.rkey = 0x100 + 3;
	p.dma_addr = 0x3000;
	assert_int_equal(smcr_conn_set_peer(sc, &p), 0);
	assert_int_equal(sc->peer_rkey, 0x103);
	smcr_conn_discard(sc);
	fake_close(&f);
}

/* Our CONFIRM_RKEY: the RMB on the link the flow goes over (its rkey in
 * that link's registration), and one additional entry per other active
 * link or one coming up with its registration (not one going down). */
static void test_our_confirm_rkey(void **state)
{
	struct fake f;
	struct smcr_conn *sc;
	struct llc_msg req, back;
	uint8_t buf[LLC_MSG_LEN];

	(void)state;
	fake_open(&f);
	sc = conn_new(&f);
	smcr_clc_rkey_request(sc, &req);
	assert_int_equal(req.type, LLC_CONFIRM_RKEY);
	assert_int_equal(req.flags, 0);
	assert_int_equal(req.confirm_rkey.rkey, sc->rmb->rkey);
	assert_int_equal(req.confirm_rkey.vaddr, (uintptr_t)sc->rmb->addr);
	assert_int_equal(req.confirm_rkey.num_extra, 0);
	/* links 2 and 3 in slots 1 and 2, each with its registration of the RMB */
	assert_int_equal(bufpool_reg_add(f.lgr->rmbs, 1, NULL), 0);
	assert_int_equal(bufpool_reg_add(f.lgr->rmbs, 2, NULL), 0);
	fake_link(&f, 1, 2, SMCR_LNK_INACTIVE);
	fake_link(&f, 2, 3, SMCR_LNK_ACTIVE);
	smcr_clc_rkey_request(sc, &req);
	assert_int_equal(req.confirm_rkey.rkey, sc->rmb->rkey);
	assert_int_equal(req.confirm_rkey.num_extra, 1);
	assert_int_equal(req.confirm_rkey.extra[0].link_id, 3);
	assert_int_equal(req.confirm_rkey.extra[0].rkey, bufpool_buf_rkey(sc->rmb, 2));
	assert_int_not_equal(req.confirm_rkey.extra[0].rkey, 0);
	assert_int_not_equal(req.confirm_rkey.extra[0].rkey, sc->rmb->rkey);
	assert_int_equal(req.confirm_rkey.extra[0].vaddr, (uintptr_t)sc->rmb->addr);
	/* coming up, its registration made: named too */
	fake_link(&f, 1, 2, SMCR_LNK_ACTIVATING);
	smcr_clc_rkey_request(sc, &req);
	assert_int_equal(req.confirm_rkey.num_extra, 2);
	assert_int_equal(req.confirm_rkey.extra[0].link_id, 2);
	fake_link(&f, 1, 2, SMCR_LNK_ACTIVE);
	smcr_clc_rkey_request(sc, &req);
	assert_int_equal(req.confirm_rkey.num_extra, 2);
	assert_int_equal(req.confirm_rkey.extra[0].link_id, 2);
	assert_int_equal(req.confirm_rkey.extra[0].rkey, bufpool_buf_rkey(sc->rmb, 1));
	assert_int_equal(req.confirm_rkey.extra[1].link_id, 3);
	/* the first link down: the flow goes over the next, which the first
	 * entry names, the last link the one additional entry */
	fake_link(&f, 0, 1, SMCR_LNK_INACTIVE);
	assert_int_equal(smcr_llc_link_slot(f.lgr), 1);
	smcr_clc_rkey_request(sc, &req);
	assert_int_equal(req.confirm_rkey.rkey, bufpool_buf_rkey(sc->rmb, 1));
	assert_int_equal(req.confirm_rkey.num_extra, 1);
	assert_int_equal(req.confirm_rkey.extra[0].link_id, 3);
	fake_link(&f, 0, 1, SMCR_LNK_ACTIVE);
	smcr_clc_rkey_request(sc, &req);
	/* it is what goes on the wire */
	assert_int_equal(llc_encode(&req, buf, sizeof(buf)), LLC_MSG_LEN);
	assert_int_equal(llc_decode(buf, sizeof(buf), &back), 0);
	assert_int_equal(back.confirm_rkey.num_extra, 2);
	assert_int_equal(back.confirm_rkey.extra[1].rkey, req.confirm_rkey.extra[1].rkey);
	smcr_conn_discard(sc);
	bufpool_reg_del(f.lgr->rmbs, 1);
	bufpool_reg_del(f.lgr->rmbs, 2);
	fake_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_peer_confirm_rkey_stored),
		cmocka_unit_test(test_peer_confirm_rkey_full),
		cmocka_unit_test(test_peer_delete_rkey),
		cmocka_unit_test(test_set_peer_row),
		cmocka_unit_test(test_set_peer_full),
		cmocka_unit_test(test_our_confirm_rkey),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
