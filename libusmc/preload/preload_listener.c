// SPDX-License-Identifier: MIT
/*
 * The usmc listener behind a listening socket (docs/preload.md): made
 * on first use (accept, poll, epoll_ctl) from a duplicate of the socket;
 * the private descriptors that stand for the socket in poll, select and
 * epoll; and its end.
 */
#include <stdlib.h>
#include <sys/eventfd.h>

#include "preload.h"

/* Let go of @o's usmc listener: it is closed if it is this process's (a
 * child's copy of the parent's is only forgotten), its descriptors too. */
void listener_drop(struct pobj *o)
{
	while (o->shadows) {
		struct shadow *s = o->shadows;

		o->shadows = s->next;
		R.close(s->sfd);
		free(s);
	}
	if (o->l && o->pid == my_pid)
		IN_LIB(usmc_listener_close(o->l));
	if (o->wakefd >= 0)
		R.close(o->wakefd);
	o->wakefd = -1;
	o->l = NULL;
}

/*
 * The usmc listener of this process for @o, created on first use from a
 * duplicate of @fd; requires o->lock. Returns 0, or a PR_* reason (> 0)
 * when the socket cannot be handed to libusmc: it then stays plain.
 */
int listener_activate(struct pobj *o, int fd)
{
	struct usmc_listener *l;
	struct usmc_ctx *ctx;
	int k, rc, backlog;

	if (o->l && o->pid == my_pid)
		return 0;
	if (o->l) /* the parent's (fork): its descriptors here are copies */
		listener_drop(o);
	ctx = preload_ctx();
	if (!ctx)
		return PR_NO_CONTEXT;
	k = dup_high(fd);
	if (k < 0)
		return PR_LISTEN_ADOPT;
	backlog = o->backlog > 0 && o->backlog <= 65535 ? o->backlog : 0;
	rc = IN_LIB(usmc_listen_fd(ctx, k, backlog, USMC_LISTEN_NONBLOCK, &l));
	if (rc) {
		R.close(k);
		preload_log(1, "fd %d: usmc_listen_fd: %s; the listener stays plain TCP", fd,
			    usmc_strerror(rc));
		return PR_LISTEN_ADOPT;
	}
	o->l = l;
	o->pid = my_pid;
	o->lfd = usmc_listener_fd(l);
	o->wakefd = preload_relocate(R.eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	return 0;
}

/* The private descriptor that stands for listener descriptor @fd in poll,
 * select and epoll; requires o->lock and an active listener. */
int shadow_fd(struct pobj *o, int fd)
{
	struct shadow *s;

	for (s = o->shadows; s; s = s->next)
		if (s->fd == fd)
			return s->sfd;
	s = malloc(sizeof(*s));
	if (!s)
		return -1;
	s->fd = fd;
	s->sfd = dup_high(o->lfd);
	if (s->sfd < 0) {
		free(s);
		return -1;
	}
	s->next = o->shadows;
	o->shadows = s;
	return s->sfd;
}
