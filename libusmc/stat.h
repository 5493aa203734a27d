/* SPDX-License-Identifier: MIT */
/*
 * Publication of a context's state for the usmc-stat tool
 * (docs/usmc-stat.md): an abstract UNIX socket "@usmc-stat/<pid>/<n>"
 * served by one thread per context (named "usmc-stat"). Per connection it
 * accepts, it checks the peer's uid (SO_PEERCRED: the same uid or root),
 * writes one JSON snapshot and closes. The snapshot is built in memory
 * with the locks taken in the documented order, and written with none
 * held.
 */
#ifndef USMC_STAT_H
#define USMC_STAT_H

#include <stddef.h>

struct usmc_ctx;
struct usmc_stat;

/* Publish @ctx: bind the socket, start the thread. NULL if that failed
 * (the context works the same, unpublished). */
struct usmc_stat *stat_start(struct usmc_ctx *ctx);

/* Stop the thread, close the socket, free (NULL: nothing). */
void stat_stop(struct usmc_stat *st);

/* The JSON snapshot of @ctx, malloc'ed, NUL-terminated, its length in
 * *@len; NULL if out of memory. @index is the context's <n>. */
char *stat_snapshot(struct usmc_ctx *ctx, unsigned int index, size_t *len);

#endif
