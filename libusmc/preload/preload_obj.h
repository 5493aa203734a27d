/* SPDX-License-Identifier: MIT */
/*
 * The preload's object: one per open file it manages (docs/preload.md),
 * and the table that maps the application's descriptors to objects.
 */
#ifndef USMC_PRELOAD_OBJ_H
#define USMC_PRELOAD_OBJ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <usmc/usmc.h>

/* What an application descriptor in the table is (docs/preload.md). */
enum pobj_kind {
	PO_LISTEN = 1, /* a listening TCP socket; the usmc listener comes on first use */
	PO_CONNECTING, /* usmc connect in progress */
	PO_SMCR,       /* an established connection running SMC-R */
	PO_FAILED,     /* a connect that failed: its error is reported once */
	PO_PLAIN,      /* a plain socket now, its descriptors about to be released */
};

/* An epoll_ctl() registration of a managed descriptor. A DEL leaves the
 * record, not live: an event loop that deletes and adds a descriptor at
 * every reply (redis's) allocates nothing for it. */
struct epreg {
	int epfd, fd;
	bool live; /* registered in epfd now */
	struct epoll_event ev;
	struct epreg *next;
};

/* A listener's private dup() of its eventfd for descriptor @fd. */
struct shadow {
	int fd, sfd;
	struct shadow *next;
};

/*
 * One object per open file the preload manages; each descriptor in the
 * table and each call in flight holds a reference. Objects are never
 * freed (a free list reuses them), so a lookup may take a reference on a
 * stale pointer safely and re-check the slot (preload_tab.c).
 */
struct pobj {
	atomic_int refs;
	pthread_mutex_t lock; /* guards everything below but fdv (tab_lock) */
	pthread_cond_t cond;  /* PO_CONNECTING settled */
	enum pobj_kind kind;
	pid_t pid;	 /* the process whose usmc objects these are */
	bool nonblock;	 /* O_NONBLOCK as the application sees it */
	bool linger0;	 /* SO_LINGER {1, 0}: abort at close */
	int rcvtimeo_ms; /* SO_RCVTIMEO, -1 = none */
	int sndtimeo_ms; /* SO_SNDTIMEO, -1 = none */
	/* the descriptors of the application that refer to it (tab_lock) */
	int *fdv;
	int nfdv, capfdv;
	struct epreg *regs;

	/* connections */
	struct usmc_conn *c;
	int tcpfd;	   /* PO_CONNECTING: the library's descriptor of the socket */
	int gate[2];	   /* PO_CONNECTING with a helper thread: N is gate[0] */
	bool bg;	   /* a helper thread runs the handshake */
	bool settled;	   /* PO_CONNECTING: the helper is done */
	int connect_state; /* second connect(): 0 once, then EISCONN */
	int pending_err;   /* PO_FAILED: the connect's errno, reported once */
	bool is_server;
	bool looped; /* PO_SMCR: the program's epoll waits run its completions */
	bool noloop; /* PO_SMCR: never again (a poll() of it, a set without the tag) */
	struct sockaddr_storage local, peer;
	socklen_t llen, plen;

	/* listeners */
	struct usmc_listener *l; /* in process pid */
	int lfd;		 /* usmc_listener_fd(l) */
	int wakefd;		 /* eventfd: shutdown() wakes a blocked accept */
	int backlog;
	bool shut;
	struct shadow *shadows;

	struct pobj *free_next, *all_next;
};

/* preload_obj.c: objects are type-stable, never returned to malloc */
struct pobj *obj_new(enum pobj_kind kind); /* one reference */
void obj_put(struct pobj *o);
/* Every object ever made, through all_next; only where no other thread
 * runs (a child of fork()). */
struct pobj *obj_pool_all(void);
void obj_fork_prepare(void);
void obj_fork_parent(void);
void obj_fork_child(void);

/* preload_tab.c: the table of the application's managed descriptors.
 * Lookups made inside libusmc (in_lib) find nothing. */
struct pobj *obj_get(int fd); /* a reference, or NULL: not managed */
struct pobj *tab_peek(int fd);
int tab_add(int fd, struct pobj *o); /* takes a new reference for @fd */
/* A new PO_LISTEN object for listening socket @fd: 0, or -ENOMEM. */
int tab_add_listen(int fd, int backlog);
/* Forget @fd (close or dup2 over it): epoll registrations of @fd are
 * deleted; returns the object it referred to (its reference, to be put
 * by the caller after the real close), or NULL. */
struct pobj *tab_remove(int fd);
/* The kernel has just handed out @fd (a wrapped call that makes a
 * descriptor): an entry the table still has for it is stale, its
 * descriptor closed where the preload did not see it (a raw system call,
 * libc's own close in fclose()), and goes as close() would have taken
 * it. Returns @fd. */
int tab_fresh(int fd);
/* The lowest managed descriptor from @first to @last, or -1. */
int tab_next(unsigned int first, unsigned int last);
/* Forget every descriptor of @o (it became a plain socket). */
void tab_release_all(struct pobj *o);
void tab_lock_acquire(void);
void tab_lock_release(void);
void tab_fork_child(void);

/* preload_epreg.c: the epoll registrations of an object's descriptors */
void regs_forget(struct pobj *o); /* requires o->lock or the object alone */
void regs_delete_fd(struct pobj *o, int fd);
void regs_record(struct pobj *o, int epfd, int op, int fd, const struct epoll_event *ev);

#endif
