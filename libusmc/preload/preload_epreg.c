// SPDX-License-Identifier: MIT
/*
 * The epoll registrations of managed descriptors (docs/preload.md). The
 * preload remembers them: when a connect settles, a descriptor that
 * changes file is registered again (preload_connecting.c); when the
 * application closes one, its registrations are deleted, as the kernel
 * drops a registration only with the last descriptor of its file and the
 * library holds others (its own, a listener's shadows).
 */
#include <stdlib.h>

#include "preload.h"

/* Forget @o's epoll registrations, without touching the epoll sets. */
void regs_forget(struct pobj *o)
{
	while (o->regs) {
		struct epreg *r = o->regs;

		o->regs = r->next;
		free(r);
	}
}

/* Delete @fd's registrations from their epoll sets; takes o->lock. */
void regs_delete_fd(struct pobj *o, int fd)
{
	struct epreg **pp;

	pthread_mutex_lock(&o->lock);
	pp = &o->regs;
	while (*pp) {
		struct epreg *r = *pp;

		if (r->fd != fd) {
			pp = &r->next;
			continue;
		}
		if (r->live && o->kind == PO_LISTEN) {
			for (struct shadow *s = o->shadows; s; s = s->next)
				if (s->fd == fd)
					R.epoll_ctl(r->epfd, EPOLL_CTL_DEL, s->sfd, NULL);
		} else if (r->live) {
			R.epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL);
		}
		*pp = r->next;
		free(r);
	}
	pthread_mutex_unlock(&o->lock);
}

/* Remember a successful epoll_ctl(@epfd, @op, @fd, @ev); requires o->lock. */
void regs_record(struct pobj *o, int epfd, int op, int fd, const struct epoll_event *ev)
{
	struct epreg **pp, *reg;

	for (pp = &o->regs; *pp; pp = &(*pp)->next)
		if ((*pp)->epfd == epfd && (*pp)->fd == fd)
			break;
	reg = *pp;
	if (op == EPOLL_CTL_DEL && reg) {
		reg->live = false;
	} else if (op != EPOLL_CTL_DEL && ev) {
		if (!reg && (reg = calloc(1, sizeof(*reg)))) {
			reg->epfd = epfd;
			reg->fd = fd;
			reg->next = o->regs;
			o->regs = reg;
		}
		if (reg) {
			reg->ev = *ev;
			reg->live = true;
		}
	}
}
