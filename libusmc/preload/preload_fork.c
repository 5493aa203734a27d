// SPDX-License-Identifier: MIT
/*
 * fork() (docs/preload.md): the preload's locks are held across it, and
 * the child, one thread with a copy of the parent's memory, makes the
 * copies its own.
 */
#include <fcntl.h>
#include <unistd.h>

#include "preload.h"

/* The locks in their order: ctx_lock, tab_lock, pool_lock. */
static void atfork_prepare(void)
{
	ctx_fork_prepare();
	tab_lock_acquire();
	obj_fork_prepare();
}

static void atfork_parent(void)
{
	obj_fork_parent();
	tab_lock_release();
	ctx_fork_parent();
}

/*
 * In a child, each descriptor of an SMC-R connection (the parent's: its
 * readiness socketpair end) is pointed at a dead socket: an AF_UNIX end
 * shut down both ways, whose peer is closed. The table still knows it, so
 * the preload's calls fail with ENOTCONN; what bypasses the preload (a
 * program the child execs with it, inetd style; a raw system call) reads
 * EOF and gets EPIPE instead of taking the parent's readiness bytes or
 * filling its pair. Only system calls: this runs in the child of a fork
 * of a threaded process.
 */
static void fork_bury_smcr(void)
{
	int sv[2] = {-1, -1};

	for (struct pobj *o = obj_pool_all(); o; o = o->all_next) {
		if (!atomic_load(&o->refs) || o->kind != PO_SMCR)
			continue;
		if (sv[0] < 0) {
			if (R.socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
				return; /* no descriptor left: the copies stay */
			R.shutdown(sv[0], SHUT_RDWR);
			R.close(sv[1]);
		}
		for (int i = 0; i < o->nfdv; i++)
			fd_point(o->fdv[i], sv[0], R.fcntl(o->fdv[i], F_GETFD));
	}
	if (sv[0] >= 0)
		R.close(sv[0]);
}

/*
 * The child: one thread, a copy of the parent's memory. Locks other
 * threads held are reset; the parent's context, listeners and SMC-R
 * connections stay the parent's (usmc.h): a new context comes on first
 * use, a listener is activated again where the child accepts, and the
 * child's copies of epoll registrations are forgotten (an inherited epoll
 * set is shared with the parent: deleting from it would delete the
 * parent's).
 */
static void atfork_child(void)
{
	obj_fork_child();
	tab_fork_child();
	ctx_fork_child();
	reaper_fork_child();
	evloop_fork_child();
	my_pid = getpid();
	counters_reset();
	fork_bury_smcr();
	for (struct pobj *o = obj_pool_all(); o; o = o->all_next) {
		pthread_mutex_init(&o->lock, NULL);
		pthread_cond_init(&o->cond, NULL);
		if (atomic_load(&o->refs))
			regs_forget(o);
	}
}

void preload_fork_handlers(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}
