/* SPDX-License-Identifier: MIT */
/*
 * What the files of a link group share and nobody else calls: lgr.c (the
 * object, its links, its life cycle) and lgr_progress.c (its progress
 * thread: completions nobody waits for, events, timers).
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

/* ---- lgr_progress.c ---- */

/* The progress thread's wake-up and epoll set, and the engine, which
 * runs the first link from the start (always initialised: lgr_free()
 * finishes it). */
int lgr_progress_init(struct lgr *lgr);
/* Stop the progress thread and wait for it (no-op if not started). */
void lgr_stop_thread(struct lgr *lgr);

#endif
