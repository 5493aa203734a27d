// SPDX-License-Identifier: MIT
/*
 * The preload's objects (docs/preload.md): type-stable, never returned to
 * malloc, so that a lookup may take a reference on a stale pointer
 * safely (preload_tab.c); and what ends with an object's last reference.
 */
#include <stdlib.h>
#include <string.h>

#include "preload.h"

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pobj *pool_free, *pool_all; /* pool_lock; all_next never changes once set */

static void obj_reset(struct pobj *o)
{
	o->kind = 0;
	o->pid = my_pid;
	o->nonblock = o->linger0 = false;
	o->rcvtimeo_ms = o->sndtimeo_ms = -1;
	o->nfdv = 0;
	o->regs = NULL;
	o->c = NULL;
	o->tcpfd = -1;
	o->gate[0] = o->gate[1] = -1;
	o->bg = o->settled = false;
	o->connect_state = 0;
	o->pending_err = 0;
	o->is_server = false;
	o->looped = o->noloop = false;
	memset(&o->local, 0, sizeof(o->local));
	memset(&o->peer, 0, sizeof(o->peer));
	o->llen = o->plen = 0;
	o->l = NULL;
	o->lfd = o->wakefd = -1;
	o->backlog = 0;
	o->shut = false;
	o->shadows = NULL;
}

struct pobj *obj_new(enum pobj_kind kind)
{
	struct pobj *o;

	pthread_mutex_lock(&pool_lock);
	o = pool_free;
	if (o)
		pool_free = o->free_next;
	pthread_mutex_unlock(&pool_lock);
	if (!o) {
		o = calloc(1, sizeof(*o));
		if (!o)
			return NULL;
		pthread_mutex_init(&o->lock, NULL);
		pthread_cond_init(&o->cond, NULL);
		pthread_mutex_lock(&pool_lock);
		o->all_next = pool_all;
		pool_all = o;
		pthread_mutex_unlock(&pool_lock);
	}
	obj_reset(o);
	o->kind = kind;
	atomic_store(&o->refs, 1);
	return o;
}

/* What ends with @o's last reference: its usmc objects (closed if they
 * are this process's) and its private descriptors. */
static void obj_destroy(struct pobj *o)
{
	bool mine = o->pid == my_pid;

	regs_forget(o);
	switch (o->kind) {
	case PO_LISTEN:
		listener_drop(o);
		break;
	case PO_SMCR:
	case PO_CONNECTING:
		if (o->c && mine && o->kind == PO_SMCR)
			reaper_close(o->c, o->linger0);
		else if (o->c)
			IN_LIB(usmc_close(o->c)); /* a child's copy: forgotten (usmc.h) */
		for (int i = 0; i < 2; i++)
			if (o->gate[i] >= 0)
				R.close(o->gate[i]);
		break;
	case PO_FAILED:
	case PO_PLAIN:
		break;
	}
	o->c = NULL;
	o->l = NULL;
	o->kind = 0;
}

void obj_put(struct pobj *o)
{
	if (atomic_fetch_sub(&o->refs, 1) != 1)
		return;
	obj_destroy(o);
	free(o->fdv);
	o->fdv = NULL;
	o->capfdv = 0;
	pthread_mutex_lock(&pool_lock);
	o->free_next = pool_free;
	pool_free = o;
	pthread_mutex_unlock(&pool_lock);
}

struct pobj *obj_pool_all(void)
{
	return pool_all;
}

void obj_fork_prepare(void)
{
	pthread_mutex_lock(&pool_lock);
}

void obj_fork_parent(void)
{
	pthread_mutex_unlock(&pool_lock);
}

void obj_fork_child(void)
{
	pthread_mutex_init(&pool_lock, NULL);
}
