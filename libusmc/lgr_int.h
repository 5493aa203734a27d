/* SPDX-License-Identifier: MIT */
/*
 * What the files of a link group share and nobody else calls: lgr.c (the
 * object, its first link, its life cycle), lgr_link.c (links beyond the
 * first, failover) and lgr_progress.c (its progress thread: completions
 * nobody waits for, events, timers).
 */
#ifndef USMC_LGR_INT_H
#define USMC_LGR_INT_H

#include <stdbool.h>

struct lgr;
struct smcr_link;

/* ---- lgr.c ---- */

/* A link of @lnk's link group failed with @err (@orderly: it still
 * works, so tell the peer): the links' error handler. */
void lgr_link_error(struct smcr_link *lnk, int err, bool orderly);
/* No reference left and idle past its time, or dead: unlink it from its
 * context and say true; the caller frees it. */
bool lgr_idle_unlink(struct lgr *lgr);

/* The links' handlers' context, for a link in @slot on @dev. */
void lgr_link_init_slot(struct lgr *lgr, int slot, const struct smcr_dev *dev);
/* Run @lnk's completions (its CQs drained) and give the references of its
 * sends that will not complete back. */
void lgr_flush_sends(struct lgr *lgr, struct smcr_link *lnk);

/* ---- lgr_link.c ---- */

/*
 * lgr_link_failover() - @lnk failed with @err (it is INACTIVE now): if
 * another link is ACTIVE, drop @lnk, move its connections to that one
 * and tell the peer (DELETE_LINK over the survivor), and say true; false
 * if no link is left (the link group ends).
 */
bool lgr_link_failover(struct lgr *lgr, struct smcr_link *lnk, int err);
/* Free the links lgr_link_drop() left (the progress thread, holding the
 * engine's token: nobody else polls them). */
void lgr_links_reap(struct lgr *lgr);
/* Wait for the add-link thread (lgr_free()). */
void lgr_links_join(struct lgr *lgr);

/* ---- lgr_progress.c ---- */

/* Take @lnk's channel and async events out of the epoll set (before
 * they are destroyed). */
void lgr_ep_link_del(struct lgr *lgr, int slot);

/* The progress thread's wake-up and epoll set, and the engine, which
 * runs the first link from the start (always initialised: lgr_free()
 * finishes it). */
int lgr_progress_init(struct lgr *lgr);
/* Stop the progress thread and wait for it (no-op if not started). */
void lgr_stop_thread(struct lgr *lgr);

#endif
