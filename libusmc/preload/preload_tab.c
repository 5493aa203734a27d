// SPDX-License-Identifier: MIT
/*
 * The table of managed descriptors (docs/preload.md): for each of the
 * application's descriptors the preload manages, its object. Lookups are
 * lock-free (pages of atomic slots); changes take tab_lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "preload.h"

#define TAB_PAGE_SHIFT 10
#define TAB_PAGE       (1 << TAB_PAGE_SHIFT)
#define TAB_PAGES      1024 /* descriptors up to 2^20 */

static _Atomic(struct pobj *) *_Atomic tab[TAB_PAGES];	     /* slots stored under tab_lock */
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER; /* and each object's fdv */

void tab_lock_acquire(void)
{
	pthread_mutex_lock(&tab_lock);
}

void tab_lock_release(void)
{
	pthread_mutex_unlock(&tab_lock);
}

static _Atomic(struct pobj *) *slot_of(int fd, bool create)
{
	_Atomic(struct pobj *) *page;

	if (fd < 0 || fd >= TAB_PAGES * TAB_PAGE)
		return NULL;
	page = atomic_load_explicit(&tab[fd >> TAB_PAGE_SHIFT], memory_order_acquire);
	if (!page && create) {
		page = calloc(TAB_PAGE, sizeof(*page));
		if (!page)
			return NULL;
		atomic_store_explicit(&tab[fd >> TAB_PAGE_SHIFT], page, memory_order_release);
	}
	return page ? &page[fd & (TAB_PAGE - 1)] : NULL;
}

struct pobj *obj_get(int fd)
{
	_Atomic(struct pobj *) *slot = slot_of(fd, false);
	struct pobj *o;
	int r;

	if (!slot)
		return NULL;
	for (;;) {
		o = atomic_load_explicit(slot, memory_order_acquire);
		if (!o || in_lib) /* in_lib: see tab_peek() */
			return NULL;
		r = atomic_load(&o->refs);
		while (r > 0 && !atomic_compare_exchange_weak(&o->refs, &r, r + 1))
			;
		if (r > 0) {
			/* the object may have been freed and reused meanwhile */
			if (atomic_load_explicit(slot, memory_order_acquire) == o)
				return o;
			obj_put(o);
		}
	}
}

struct pobj *tab_peek(int fd)
{
	_Atomic(struct pobj *) *slot = slot_of(fd, false);
	struct pobj *o = slot ? atomic_load(slot) : NULL;

	/* libusmc's own calls never find an object: their descriptors are
	 * libusmc's, and a number the application closed behind the preload
	 * (tab_fresh()) may be one of them now. in_lib is read only for a
	 * number in the table: most calls pay nothing for it. */
	return o && !in_lib ? o : NULL;
}

static int fdv_add(struct pobj *o, int fd)
{
	if (o->nfdv == o->capfdv) {
		int cap = o->capfdv ? o->capfdv * 2 : 4;
		int *v = realloc(o->fdv, (size_t)cap * sizeof(int));

		if (!v)
			return -ENOMEM;
		o->fdv = v;
		o->capfdv = cap;
	}
	o->fdv[o->nfdv++] = fd;
	return 0;
}

static void fdv_del(struct pobj *o, int fd)
{
	for (int i = 0; i < o->nfdv; i++)
		if (o->fdv[i] == fd) {
			o->fdv[i] = o->fdv[--o->nfdv];
			return;
		}
}

int tab_add(int fd, struct pobj *o)
{
	_Atomic(struct pobj *) *slot;
	struct pobj *stale = NULL;
	int rc = 0;

	pthread_mutex_lock(&tab_lock);
	slot = slot_of(fd, true);
	if (!slot || fdv_add(o, fd)) {
		rc = -ENOMEM; /* a descriptor beyond the table: stays plain */
	} else {
		/* the kernel handed out @fd: an entry still there is stale (its
		 * descriptor was closed behind the preload's back, close_range) */
		stale = atomic_load(slot);
		if (stale)
			fdv_del(stale, fd);
		atomic_fetch_add(&o->refs, 1);
		atomic_store_explicit(slot, o, memory_order_release);
	}
	pthread_mutex_unlock(&tab_lock);
	if (stale)
		obj_put(stale);
	return rc;
}

int tab_add_listen(int fd, int backlog)
{
	struct pobj *o = obj_new(PO_LISTEN);

	if (!o)
		return -ENOMEM;
	o->backlog = backlog;
	o->nonblock = (R.fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
	tab_add(fd, o);
	obj_put(o);
	return 0;
}

struct pobj *tab_remove(int fd)
{
	_Atomic(struct pobj *) *slot;
	struct pobj *o = NULL;

	pthread_mutex_lock(&tab_lock);
	slot = slot_of(fd, false);
	if (slot && (o = atomic_load(slot))) {
		atomic_store(slot, NULL);
		fdv_del(o, fd);
	}
	pthread_mutex_unlock(&tab_lock);
	if (o)
		regs_delete_fd(o, fd);
	return o;
}

int tab_fresh(int fd)
{
	struct pobj *o;

	evloop_set_gone(fd); /* a new file: no epoll set of ours, if it is one */
	/* a vfork() child: the table is the parent's, whose descriptors
	 * this child may have closed and opened again in its own table */
	if (fd < 0 || !tab_peek(fd) || getpid() != my_pid)
		return fd;
	o = tab_remove(fd);
	if (o) {
		preload_log(2, "fd %d was closed behind the preload; it is another file now", fd);
		obj_put(o);
	}
	return fd;
}

int tab_next(unsigned int first, unsigned int last)
{
	const unsigned int top = TAB_PAGES * TAB_PAGE - 1;

	if (in_lib) /* as tab_peek() */
		return -1;
	if (last > top)
		last = top;
	for (unsigned int fd = first; fd <= last;) {
		_Atomic(struct pobj *) *page =
			atomic_load_explicit(&tab[fd >> TAB_PAGE_SHIFT], memory_order_acquire);

		if (!page)
			fd = (fd | (TAB_PAGE - 1)) + 1; /* the next page */
		else if (atomic_load(&page[fd & (TAB_PAGE - 1)]))
			return (int)fd;
		else
			fd++;
	}
	return -1;
}

void tab_release_all(struct pobj *o)
{
	int n = 0;

	pthread_mutex_lock(&tab_lock);
	for (int i = 0; i < o->nfdv; i++) {
		_Atomic(struct pobj *) *slot = slot_of(o->fdv[i], false);

		if (slot && atomic_load(slot) == o) {
			atomic_store(slot, NULL);
			n++;
		}
	}
	o->nfdv = 0;
	pthread_mutex_unlock(&tab_lock);
	/* the kernel keeps the registrations: the descriptors stay open */
	pthread_mutex_lock(&o->lock);
	regs_forget(o);
	pthread_mutex_unlock(&o->lock);
	while (n--)
		obj_put(o);
}

void tab_fork_child(void)
{
	pthread_mutex_init(&tab_lock, NULL);
}
