// SPDX-License-Identifier: MIT
/*
 * The peer's RMBs of a link group (lgr_rtoken.h), as net/smc/smc_core.c
 * keeps its rtokens: a fixed table, rows found by a linear scan of at most
 * 255 (only the peer's rkey messages and handshakes scan; the data path
 * reads its connection's copy).
 */
#include <errno.h>
#include <string.h>

#include "lgr_rtoken.h"

/* A handle: the row index below, the generation above (23 bits: a handle
 * stays a positive int). */
#define RTOK_IDX_BITS 8
#define RTOK_IDX_MASK ((1u << RTOK_IDX_BITS) - 1)
#define RTOK_GEN_MASK ((1u << (31 - RTOK_IDX_BITS)) - 1)

_Static_assert(LGR_RTOKEN_ROWS <= RTOK_IDX_MASK + 1, "a row index fits its bits");
_Static_assert(LGR_RTOKEN_LINKS <= 8, "a row's column mask fits a byte");

static bool slot_ok(int slot)
{
	return slot >= 0 && slot < LGR_RTOKEN_LINKS;
}

static int handle_of(const struct lgr_rtoken_row *r, int idx)
{
	return (int)(r->gen << RTOK_IDX_BITS | (uint32_t)idx);
}

/* The row @handle names, NULL if it is stale or never was; requires t->lock. */
static struct lgr_rtoken_row *row_locked(struct lgr_rtokens *t, int handle)
{
	uint32_t h = (uint32_t)handle;
	uint32_t idx = h & RTOK_IDX_MASK;
	struct lgr_rtoken_row *r;

	if (handle <= 0 || idx >= LGR_RTOKEN_ROWS)
		return NULL;
	r = &t->rows[idx];
	return r->gen && r->gen == h >> RTOK_IDX_BITS ? r : NULL;
}

/* The index of the row in use whose column @slot holds @rkey (and @addr
 * if @match_addr), -1 if none; requires t->lock. */
static int find_locked(const struct lgr_rtokens *t, int slot, uint32_t rkey, bool match_addr,
		       uint64_t addr)
{
	for (int i = 0; i < LGR_RTOKEN_ROWS; i++) {
		const struct lgr_rtoken_row *r = &t->rows[i];

		if (r->gen && (r->cols & 1u << slot) && r->col[slot].rkey == rkey &&
		    (!match_addr || r->col[slot].addr == addr))
			return i;
	}
	return -1;
}

static void col_set(struct lgr_rtoken_row *r, int slot, uint32_t rkey, uint64_t addr)
{
	r->col[slot] = (struct lgr_rtoken){.rkey = rkey, .addr = addr};
	r->cols |= (uint8_t)(1u << slot);
}

void lgr_rtoken_init(struct lgr_rtokens *t)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	t->next_gen = 1;
}

void lgr_rtoken_fini(struct lgr_rtokens *t)
{
	pthread_mutex_destroy(&t->lock);
}

int lgr_rtoken_add(struct lgr_rtokens *t, int slot, uint32_t rkey, uint64_t addr)
{
	struct lgr_rtoken_row *r;
	int i, rc = -ENOSPC;

	if (!slot_ok(slot))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	i = find_locked(t, slot, rkey, true, addr);
	if (i >= 0) {
		rc = handle_of(&t->rows[i], i);
		goto out;
	}
	for (i = 0; i < LGR_RTOKEN_ROWS; i++)
		if (!t->rows[i].gen)
			break;
	if (i == LGR_RTOKEN_ROWS)
		goto out;
	r = &t->rows[i];
	memset(r, 0, sizeof(*r));
	r->gen = t->next_gen;
	t->next_gen = (t->next_gen + 1) & RTOK_GEN_MASK;
	if (!t->next_gen)
		t->next_gen = 1; /* 0 marks an unused row */
	col_set(r, slot, rkey, addr);
	atomic_fetch_add_explicit(&t->used, 1, memory_order_relaxed);
	rc = handle_of(r, i);
out:
	pthread_mutex_unlock(&t->lock);
	return rc;
}

int lgr_rtoken_set(struct lgr_rtokens *t, int handle, int slot, uint32_t rkey, uint64_t addr)
{
	struct lgr_rtoken_row *r;

	if (!slot_ok(slot))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	r = row_locked(t, handle);
	if (r)
		col_set(r, slot, rkey, addr);
	pthread_mutex_unlock(&t->lock);
	return r ? 0 : -ENOENT;
}

int lgr_rtoken_set_known(struct lgr_rtokens *t, int known_slot, uint32_t known_rkey, int slot,
			 uint32_t rkey, uint64_t addr)
{
	int i, rc = -ENOENT;

	if (!slot_ok(known_slot) || !slot_ok(slot))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	i = find_locked(t, known_slot, known_rkey, false, 0);
	if (i >= 0) {
		col_set(&t->rows[i], slot, rkey, addr);
		rc = handle_of(&t->rows[i], i);
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

bool lgr_rtoken_del(struct lgr_rtokens *t, int slot, uint32_t rkey)
{
	int i;

	if (!slot_ok(slot))
		return false;
	pthread_mutex_lock(&t->lock);
	i = find_locked(t, slot, rkey, false, 0);
	if (i >= 0) {
		memset(&t->rows[i], 0, sizeof(t->rows[i]));
		atomic_fetch_sub_explicit(&t->used, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&t->lock);
	return i >= 0;
}

int lgr_rtoken_get(struct lgr_rtokens *t, int handle, int slot, struct lgr_rtoken *out)
{
	struct lgr_rtoken_row *r;
	int rc = -ENOENT;

	if (!slot_ok(slot))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	r = row_locked(t, handle);
	if (r && !(r->cols & 1u << slot))
		rc = -ENODATA;
	else if (r) {
		*out = r->col[slot];
		rc = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void lgr_rtoken_clear_link(struct lgr_rtokens *t, int slot)
{
	if (!slot_ok(slot))
		return;
	pthread_mutex_lock(&t->lock);
	for (int i = 0; i < LGR_RTOKEN_ROWS; i++) {
		t->rows[i].col[slot] = (struct lgr_rtoken){0};
		t->rows[i].cols &= (uint8_t) ~(1u << slot);
	}
	pthread_mutex_unlock(&t->lock);
}

int lgr_rtoken_list(struct lgr_rtokens *t, struct lgr_rtoken_entry *out, int max)
{
	int n = 0;

	pthread_mutex_lock(&t->lock);
	for (int i = 0; i < LGR_RTOKEN_ROWS; i++) {
		const struct lgr_rtoken_row *r = &t->rows[i];

		if (!r->gen)
			continue;
		if (n < max) {
			out[n].handle = handle_of(r, i);
			out[n].cols = r->cols;
			memcpy(out[n].col, r->col, sizeof(out[n].col));
		}
		n++;
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}
