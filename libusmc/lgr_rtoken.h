/* SPDX-License-Identifier: MIT */
/*
 * The peer's RMBs as a link group knows them (net/smc/smc_core.h struct
 * smc_link_group rtokens[][] and rtokens_used_mask; smc_core.c
 * smc_rtoken_add(), smc_rtoken_set(), smc_rtoken_set2(),
 * smc_rtoken_delete()): one row per peer RMB, one column per link slot
 * of the group (lgr.lnk[]), each link's {rkey, address} of that RMB, since
 * every link has its own PD on the peer's side too. Rows come from the
 * peer's CONFIRM_RKEY (its additional entries fill the other links'
 * columns) and from the CLC ACCEPT/CONFIRM of a connection (first
 * contact: no CONFIRM_RKEY); the rkey list of an ADD_LINK fills the new
 * link's column of rows it names; the peer's DELETE_RKEY removes them; a
 * link that goes away clears its column.
 *
 * Pure logic: no verbs, no I/O, one lock of its own (a leaf).
 *
 * A row is named by a handle (int, > 0): its index in the low 8 bits, the
 * generation it was created with above. A row deleted and its index
 * reused by another RMB gets a new generation, so a stale handle (a
 * connection whose peer RMB was deleted) finds nothing instead of
 * another connection's RMB. 0 is never a handle: "no row".
 */
#ifndef USMC_LGR_RTOKEN_H
#define USMC_LGR_RTOKEN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define LGR_RTOKEN_ROWS	 255 /* SMC_RMBS_PER_LGR_MAX */
#define LGR_RTOKEN_LINKS 3   /* columns: SMCR_LINKS_MAX (lgr.h checks they agree) */

/* One link's view of a peer RMB. */
struct lgr_rtoken {
	uint32_t rkey;
	uint64_t addr; /* the RMB's address (not an RMBE's: the connection adds that) */
};

/* One peer RMB. */
struct lgr_rtoken_row {
	uint32_t gen; /* its handle's generation; 0 while unused */
	uint8_t cols; /* bit s: column s (link slot s) is set */
	struct lgr_rtoken col[LGR_RTOKEN_LINKS];
};

/* A copy of a row in use (lgr_rtoken_list()). */
struct lgr_rtoken_entry {
	int handle;
	uint8_t cols;
	struct lgr_rtoken col[LGR_RTOKEN_LINKS];
};

struct lgr_rtokens {
	pthread_mutex_t lock; /* protects rows, used, next_gen; a leaf */
	struct lgr_rtoken_row rows[LGR_RTOKEN_ROWS];
	uint32_t next_gen; /* the generation of the next row created */
	/* rows in use: written under lock, read without it (a hint: a full
	 * table, usmc-stat) */
	atomic_int used;
};

void lgr_rtoken_init(struct lgr_rtokens *t);
void lgr_rtoken_fini(struct lgr_rtokens *t);

/*
 * lgr_rtoken_add() - the row of the peer RMB that link slot @slot reaches
 * with @rkey at @addr: an existing row whose column @slot holds exactly
 * that (as smc_rtoken_add(), which compares both: the same rkey at another
 * address is another registration), else a new row with only that column
 * set. Returns its handle, -ENOSPC when all LGR_RTOKEN_ROWS are in use,
 * -EINVAL for a slot out of range.
 */
int lgr_rtoken_add(struct lgr_rtokens *t, int slot, uint32_t rkey, uint64_t addr);

/*
 * lgr_rtoken_set() - column @slot of row @handle becomes {@rkey, @addr}
 * (smc_rtoken_set2(): a CONFIRM_RKEY's additional entry for another
 * link). 0, -ENOENT for a stale or unknown handle, -EINVAL for a slot out
 * of range.
 */
int lgr_rtoken_set(struct lgr_rtokens *t, int handle, int slot, uint32_t rkey, uint64_t addr);

/*
 * lgr_rtoken_set_known() - the row whose column @known_slot holds
 * @known_rkey gets column @slot = {@rkey, @addr} (smc_rtoken_set(): an
 * ADD_LINK's rkey list, {rkey on the existing link, rkey and address on
 * the new one}). Returns the row's handle, -ENOENT if no row holds
 * @known_rkey there, -EINVAL for a slot out of range.
 */
int lgr_rtoken_set_known(struct lgr_rtokens *t, int known_slot, uint32_t known_rkey, int slot,
			 uint32_t rkey, uint64_t addr);

/*
 * lgr_rtoken_del() - delete the row whose column @slot holds @rkey, every
 * column of it (smc_rtoken_delete(): the peer's DELETE_RKEY, which names
 * the rkey on the link it came over). True if there was one; the first
 * one found goes, as in Linux.
 */
bool lgr_rtoken_del(struct lgr_rtokens *t, int slot, uint32_t rkey);

/*
 * lgr_rtoken_get() - row @handle's {rkey, address} on link slot @slot into
 * *@out: 0, -ENOENT if the handle is stale (the row was deleted, its index
 * maybe reused), -ENODATA if the row has no such column (the peer never
 * told us that link's rkey), -EINVAL for a slot out of range.
 *
 * Takes the lock: O(1), uncontended but for the peer's rkey messages and
 * handshakes. Nothing of the table is read without the lock but the
 * 'used' count; the data path does not come here per send: each
 * connection keeps a copy for the link it sends on (smcr_conn.h
 * peer_rkey, peer_rmb_addr, under its own lock) and re-reads the row only
 * when it changes links.
 */
int lgr_rtoken_get(struct lgr_rtokens *t, int handle, int slot, struct lgr_rtoken *out);

/* Clear column @slot of every row (the link in that slot is gone); rows
 * keep their other columns and their handles. */
void lgr_rtoken_clear_link(struct lgr_rtokens *t, int slot);

/*
 * lgr_rtoken_list() - copies of up to @max rows in use, by index, into
 * @out; returns how many are in use (may exceed @max).
 */
int lgr_rtoken_list(struct lgr_rtokens *t, struct lgr_rtoken_entry *out, int max);

/* Rows in use, without the lock: a snapshot that may be stale at once. */
static inline int lgr_rtoken_count(struct lgr_rtokens *t)
{
	return atomic_load_explicit(&t->used, memory_order_relaxed);
}

#endif
