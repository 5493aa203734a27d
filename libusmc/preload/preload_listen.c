// SPDX-License-Identifier: MIT
/*
 * listen(), accept() and accept4() (docs/preload.md): a listening TCP
 * socket is the preload's; its connections come from the usmc listener
 * (preload_listener.c), an SMC-R one as a descriptor of the table, a TCP
 * one as the plain socket it is.
 */
#include <fcntl.h>

#include "preload.h"

/* Give up on a listener: it becomes the plain socket it is. */
void listener_giveup(struct pobj *o, int fd, int reason)
{
	count_reason((uint32_t)reason, true);
	fd_set_nonblock(fd, o->nonblock);
	tab_release_all(o);
}

/*
 * Before the kernel's listen() of TCP socket @fd: in kernel-compatible
 * mode the socket is marked, so that its SYN-ACKs carry the SMC option
 * from the listen() on, before the usmc listener exists (it is made at the
 * first accept or poll, in a pre-fork server by each worker): a kernel SMC
 * client that connects in between waits in the accept queue and runs the
 * SMC handshake once it does. Not done, its SYN-ACK would go without the
 * option and the client stay TCP (PEERNOSMC). A no-op where the mode is
 * off; the context is made here even if the socket cannot be marked (its
 * workers may need the program).
 */
static void listen_mark(int fd)
{
	struct usmc_ctx *ctx = preload_ctx_at_listen();
	int rc;

	if (!ctx)
		return;
	rc = IN_LIB(usmc_listen_prepare(ctx, fd));
	if (rc)
		preload_log(2,
			    "fd %d: usmc_listen_prepare: %s; SYN-ACKs before the first accept "
			    "go without the SMC option",
			    fd, usmc_strerror(rc));
}

PRELOAD_EXPORT int listen(int fd, int backlog)
{
	struct pobj *o = NULL;
	bool tcp = false;
	int rc, err;

	P_INIT();
	if (!in_lib && !preload_disabled) {
		o = obj_get(fd);
		/* the first listen(): a socket the preload knows is one */
		tcp = !o && fd_is_inet_tcp(fd);
		if (tcp)
			listen_mark(fd);
	}
	rc = R.listen(fd, backlog);
	err = errno;
	if (o && !rc) { /* listen() again: a new backlog for the next activation */
		pthread_mutex_lock(&o->lock);
		o->backlog = backlog;
		pthread_mutex_unlock(&o->lock);
	}
	if (o)
		obj_put(o);
	if (tcp && !rc)
		tab_add_listen(fd, backlog); /* without memory: a plain socket */
	errno = err;
	return rc;
}

/* An accepted connection: a descriptor for the application. */
static int accepted_fd(struct usmc_conn *c, int flags, struct sockaddr *addr, socklen_t *alen)
{
	struct usmc_conn_info info;
	struct pobj *o;
	int fd;

	usmc_conn_info(c, &info);
	fd = R.fcntl(usmc_conn_fd(c), (flags & SOCK_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
	if (fd < 0) {
		int err = errno;

		IN_LIB(usmc_abort(c));
		errno = err;
		return -1;
	}
	count_conn(true, &info, fd);
	copy_addr(&info.peer, ss_len(&info.peer), addr, alen);
	if (info.mode == USMC_MODE_SMCR) {
		o = obj_new(PO_SMCR);
		if (o) {
			o->c = c;
			o->is_server = true;
			o->nonblock = (flags & SOCK_NONBLOCK) != 0;
			o->local = info.local;
			o->peer = info.peer;
			o->llen = ss_len(&info.local);
			o->plen = ss_len(&info.peer);
			if (tab_add(fd, o) == 0) {
				obj_put(o);
				return fd;
			}
			o->c = NULL;
			obj_put(o);
		}
		R.close(fd);
		IN_LIB(usmc_abort(c));
		errno = ENOMEM;
		return -1;
	}
	/* TCP: a plain socket from now on */
	fd_set_nonblock(fd, flags & SOCK_NONBLOCK);
	IN_LIB(usmc_close(c));
	return tab_fresh(fd);
}

/*
 * A connection from listener @l of @o, waiting for one as a blocking
 * socket does (a poll of its descriptor @lfd, and of @wake, which
 * shutdown() makes readable): 0 with *@cp, or a negative errno.
 */
static int accept_wait(struct pobj *o, struct usmc_listener *l, int lfd, int wake,
		       struct usmc_conn **cp)
{
	struct pollfd p[2] = {{.fd = lfd, .events = POLLIN}, {.fd = wake, .events = POLLIN}};
	int rc;

	for (;;) {
		if (o->shut)
			return -EINVAL;
		rc = IN_LIB(usmc_accept(l, 0, cp));
		if (rc != -EAGAIN || o->nonblock)
			return rc;
		if (R.poll(p, wake >= 0 ? 2 : 1, -1) < 0)
			return -errno;
	}
}

static int do_accept(int fd, struct sockaddr *addr, socklen_t *alen, int flags, bool four)
{
	struct usmc_listener *l;
	struct usmc_conn *c;
	struct pobj *o;
	int rc, lfd, wake;

	P_INIT();
	o = obj_get(fd);
	if (!o || o->kind != PO_LISTEN) {
		int r;

		if (o)
			obj_put(o);
		r = four ? R.accept4(fd, addr, alen, flags) : R.accept(fd, addr, alen);
		return fd_opened(r); /* in_lib: libusmc's accept thread */
	}
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) {
		obj_put(o);
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&o->lock);
	rc = listener_activate(o, fd);
	l = o->l;
	lfd = o->lfd;
	wake = o->wakefd;
	pthread_mutex_unlock(&o->lock);
	if (rc > 0) {
		listener_giveup(o, fd, rc);
		obj_put(o);
		return fd_opened(four ? R.accept4(fd, addr, alen, flags)
				      : R.accept(fd, addr, alen));
	}
	rc = accept_wait(o, l, lfd, wake, &c);
	obj_put(o);
	if (rc) {
		errno = usmc_errno(rc);
		return -1;
	}
	return accepted_fd(c, flags, addr, alen);
}

PRELOAD_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *alen)
{
	return do_accept(fd, addr, alen, 0, false);
}

PRELOAD_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	return do_accept(fd, addr, alen, flags, true);
}
