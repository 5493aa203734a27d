// SPDX-License-Identifier: MIT
/*
 * Socket calls of the preload (docs/preload.md): connect, listen, accept,
 * close, dup, options, names, fcntl, ioctl, shutdown.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "preload.h"

/* A libusmc return value as an errno: USMC_E* codes have none of their own. */
static int usmc_errno(int rc)
{
	if (rc >= -4095)
		return -rc;
	return rc == USMC_EPROTO_CLC ? EPROTO : ECONNABORTED;
}

static void copy_addr(const struct sockaddr_storage *ss, socklen_t sslen, struct sockaddr *addr,
		      socklen_t *alen)
{
	if (!addr || !alen)
		return;
	memcpy(addr, ss, *alen < sslen ? *alen : sslen);
	*alen = sslen;
}

static socklen_t ss_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* ---- object life ------------------------------------------------------------ */

/* Let go of @o's usmc listener: it is closed if it is this process's (a
 * child's copy of the parent's is only forgotten), its descriptors too. */
static void listener_drop(struct pobj *o)
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

void obj_destroy(struct pobj *o)
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

/* Forget @o's epoll registrations, without touching the epoll sets. */
void regs_forget(struct pobj *o)
{
	while (o->regs) {
		struct epreg *r = o->regs;

		o->regs = r->next;
		free(r);
	}
}

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
		if (o->kind == PO_LISTEN) {
			for (struct shadow *s = o->shadows; s; s = s->next)
				if (s->fd == fd)
					R.epoll_ctl(r->epfd, EPOLL_CTL_DEL, s->sfd, NULL);
		} else {
			R.epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL);
		}
		*pp = r->next;
		free(r);
	}
	pthread_mutex_unlock(&o->lock);
}

/* ---- listeners -------------------------------------------------------------- */

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

/* Give up on a listener: it becomes the plain socket it is. */
void listener_giveup(struct pobj *o, int fd, int reason)
{
	count_reason((uint32_t)reason, true);
	fd_set_nonblock(fd, o->nonblock);
	tab_release_all(o);
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

PRELOAD_EXPORT int listen(int fd, int backlog)
{
	struct pobj *o;
	int rc, v = 0;
	socklen_t len = sizeof(v);

	P_INIT();
	rc = R.listen(fd, backlog);
	if (rc || in_lib || preload_disabled)
		return rc;
	o = obj_get(fd);
	if (o) { /* listen() again: a new backlog for the next activation */
		pthread_mutex_lock(&o->lock);
		o->backlog = backlog;
		pthread_mutex_unlock(&o->lock);
		obj_put(o);
		return 0;
	}
	if (R.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) || (v != AF_INET && v != AF_INET6))
		return 0;
	len = sizeof(v);
	if (R.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &len) || v != IPPROTO_TCP)
		return 0;
	o = obj_new(PO_LISTEN);
	if (!o)
		return 0;
	o->backlog = backlog;
	o->nonblock = (R.fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
	tab_add(fd, o);
	obj_put(o);
	return 0;
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
	return fd;
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
		return in_lib ? preload_relocate(r) : r; /* libusmc's accept thread */
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
		return four ? R.accept4(fd, addr, alen, flags) : R.accept(fd, addr, alen);
	}
	for (;;) {
		struct pollfd p[2] = {{.fd = lfd, .events = POLLIN},
				      {.fd = wake, .events = POLLIN}};

		if (o->shut) {
			rc = -EINVAL;
			break;
		}
		rc = IN_LIB(usmc_accept(l, 0, &c));
		if (rc != -EAGAIN)
			break;
		if (o->nonblock)
			break;
		if (R.poll(p, wake >= 0 ? 2 : 1, -1) < 0) {
			rc = -errno;
			break;
		}
	}
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

/* ---- connect ---------------------------------------------------------------- */

/* Point each descriptor of @o at @final, keeping its epoll registrations
 * and FD_CLOEXEC; requires tab_lock and o->lock. */
static void switch_fds(struct pobj *o, int final)
{
	for (int i = 0; i < o->nfdv; i++) {
		int fd = o->fdv[i], fdfl = R.fcntl(fd, F_GETFD);
		struct epreg *r;

		for (r = o->regs; r; r = r->next)
			if (r->fd == fd)
				R.epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL);
		fd_point(fd, final, fdfl);
		for (r = o->regs; r; r = r->next)
			if (r->fd == fd)
				R.epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &r->ev);
	}
}

/*
 * The connect of @o ended with @rc (usmc_connect_finish()): the object
 * becomes PO_SMCR, PO_FAILED, or (TCP) nothing: returns true when its
 * descriptors are to be released (tab_release_all()) by the caller after
 * it unlocked. Requires tab_lock and o->lock.
 */
static bool settle_locked(struct pobj *o, int rc)
{
	struct usmc_conn_info info;
	bool release = false;
	int fd0 = o->nfdv ? o->fdv[0] : -1;

	if (rc == 0) {
		usmc_conn_info(o->c, &info);
		count_conn(false, &info, fd0);
	}
	if (rc == 0 && info.mode == USMC_MODE_SMCR) {
		switch_fds(o, usmc_conn_fd(o->c));
		o->kind = PO_SMCR;
		o->local = info.local;
		o->peer = info.peer;
		o->llen = ss_len(&info.local);
		o->plen = ss_len(&info.peer);
		o->tcpfd = -1;
	} else {
		if (o->bg)
			switch_fds(o, o->tcpfd);
		if (rc) {
			o->pending_err = usmc_errno(rc);
			count_connect_failed(o->pending_err);
			/* a handshake that failed after the TCP connect: no stream left */
			R.shutdown(o->tcpfd, SHUT_RDWR);
			o->kind = PO_FAILED;
		} else {
			release = true;
			o->kind = PO_PLAIN;
		}
		fd_set_nonblock(o->tcpfd, o->nonblock);
		IN_LIB(usmc_close(o->c)); /* closes the library's descriptor only */
		o->c = NULL;
		o->tcpfd = -1;
	}
	if (o->bg) {
		char buf[4096];

		/* wake whoever still polls the gate: it becomes writable */
		while (R.read(o->gate[1], buf, sizeof(buf)) > 0)
			;
		R.close(o->gate[0]);
		R.close(o->gate[1]);
		o->gate[0] = o->gate[1] = -1;
	}
	o->settled = true;
	pthread_cond_broadcast(&o->cond);
	return release;
}

int conn_finish(struct pobj *o, bool wait)
{
	bool release;
	int rc;

	if (o->bg) {
		pthread_mutex_lock(&o->lock);
		while (wait && !o->settled)
			pthread_cond_wait(&o->cond, &o->lock);
		rc = o->settled ? 0 : -EINPROGRESS;
		pthread_mutex_unlock(&o->lock);
		return rc;
	}
	for (;;) {
		tab_lock_acquire();
		pthread_mutex_lock(&o->lock);
		if (o->kind != PO_CONNECTING) {
			pthread_mutex_unlock(&o->lock);
			tab_lock_release();
			return 0;
		}
		rc = IN_LIB(usmc_connect_finish(o->c));
		if (rc != -EINPROGRESS) {
			release = settle_locked(o, rc);
			pthread_mutex_unlock(&o->lock);
			tab_lock_release();
			if (release)
				tab_release_all(o);
			return 0;
		}
		pthread_mutex_unlock(&o->lock);
		tab_lock_release();
		if (!wait)
			return -EINPROGRESS;
		{
			struct pollfd p = {.fd = o->tcpfd, .events = POLLOUT};

			if (R.poll(&p, 1, -1) < 0 && errno == EINTR)
				return -EINTR;
		}
	}
}

/* settle_locked() under the locks it requires, then the release. */
static void conn_settle(struct pobj *o, int rc)
{
	bool release;

	tab_lock_acquire();
	pthread_mutex_lock(&o->lock);
	release = settle_locked(o, rc);
	pthread_mutex_unlock(&o->lock);
	tab_lock_release();
	if (release)
		tab_release_all(o);
}

static void *connect_helper(void *arg)
{
	struct pobj *o = arg;
	int rc;

	in_lib_thread();
	for (;;) {
		struct pollfd p = {.fd = o->tcpfd, .events = POLLOUT};

		if (R.poll(&p, 1, -1) < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		rc = usmc_connect_finish(o->c);
		if (rc != -EINPROGRESS)
			break;
	}
	conn_settle(o, rc);
	obj_put(o);
	return NULL;
}

/* A socketpair end that is neither readable nor writable. */
static int make_gate(int gate[2])
{
	static const char fill[4096];
	int small = 1;

	if (R.socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, gate))
		return -errno;
	gate[1] = preload_relocate(gate[1]); /* gate[0] goes onto the application's */
	R.setsockopt(gate[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	while (R.write(gate[0], fill, sizeof(fill)) > 0)
		;
	return 0;
}

#define HELPER_STACK (256 * 1024)

/*
 * A helper thread finishes the handshake of @o, whose application
 * descriptor @fd is the gate meanwhile. Without one, @fd is the TCP
 * socket again and the connect is finished in place, blocking (rare).
 */
static void start_helper(struct pobj *o, int fd, int fdfl)
{
	int d = o->tcpfd; /* before bg is cleared: another thread may settle then */

	atomic_fetch_add(&o->refs, 1); /* the helper's */
	if (!preload_thread_start(connect_helper, o, "usmc-connect", HELPER_STACK))
		return;
	atomic_fetch_sub(&o->refs, 1);
	o->bg = false;
	tab_lock_acquire();
	pthread_mutex_lock(&o->lock);
	fd_point(fd, d, fdfl);
	pthread_mutex_unlock(&o->lock);
	tab_lock_release();
}

/*
 * libusmc's connect on @d, the library's duplicate of the socket. Returns
 * 0 with the connection in *@cp; a PR_* reason (> 0) when libusmc cannot
 * take the socket (@d closed: the real connect() is to follow); or the
 * connect's own error (< 0), @d closed with the connection. A peer the
 * preload proposes no SMC-R to needs no gate: no CLC, no wait.
 */
static int connect_start(struct usmc_ctx *ctx, int d, const struct sockaddr *addr, socklen_t alen,
			 bool nb, bool *gate, struct usmc_conn **cp)
{
	struct usmc_conn *c;
	bool taken;
	int rc = IN_LIB(usmc_conn_create(ctx, &c));

	if (rc) {
		R.close(d);
		return PR_CONNECT_ADOPT;
	}
	if (!preload_peer_allowed(addr)) {
		IN_LIB(usmc_conn_setopt(c, USMC_OPT_SMC, 0)); /* TCP, reason DISABLED */
		*gate = false;
	}
	rc = IN_LIB(usmc_conn_connect_fd(c, d, addr, alen, nb ? USMC_NONBLOCK : 0));
	if (!rc) {
		*cp = c;
		return 0;
	}
	taken = usmc_conn_fd(c) == d;
	IN_LIB(usmc_close(c)); /* closes @d if the connection took it */
	if (taken)
		return rc;
	R.close(d); /* refused before it took @d: not a socket libusmc can use */
	return PR_CONNECT_ADOPT;
}

/* A blocking connect is done already: settle it at once. */
static int connect_track_blocking(struct pobj *o, int fd)
{
	if (tab_add(fd, o))
		return -ENOMEM;
	conn_settle(o, 0);
	return 0;
}

/* A non-blocking connect in progress; with a gate, a helper thread
 * finishes it. */
static int connect_track_nonblock(struct pobj *o, int fd, bool gate, int fdfl)
{
	if (gate) {
		o->bg = true;
		if (make_gate(o->gate))
			return -ENOMEM;
		fd_point(fd, o->gate[0], fdfl);
	}
	if (tab_add(fd, o)) {
		if (gate)
			fd_point(fd, o->tcpfd, fdfl);
		return -ENOMEM;
	}
	if (gate)
		start_helper(o, fd, fdfl);
	return -EINPROGRESS;
}

/* Application descriptor @fd stands for connection @c on the library's
 * @d from now on: connect()'s result. */
static int connect_track(int fd, struct usmc_conn *c, int d, bool nb, bool gate, int fdfl)
{
	struct pobj *o = obj_new(PO_CONNECTING);
	int rc = -ENOMEM;

	if (o) {
		o->c = c;
		o->tcpfd = d;
		o->nonblock = nb;
		rc = nb ? connect_track_nonblock(o, fd, gate, fdfl) : connect_track_blocking(o, fd);
		if (rc == -ENOMEM)
			o->c = NULL;
		obj_put(o);
	}
	if (rc == -ENOMEM)
		IN_LIB(usmc_abort(c));
	return rc ? (int)set_err(rc) : 0;
}

/* connect() of a TCP socket the preload does not manage yet. */
static int usmc_connect_new(int fd, const struct sockaddr *addr, socklen_t alen)
{
	struct usmc_ctx *ctx = preload_ctx();
	struct usmc_conn *c;
	int fl, fdfl, d, rc;
	bool nb, gate;

	if (!ctx) {
		count_reason(PR_NO_CONTEXT, false);
		return R.connect(fd, addr, alen);
	}
	fl = R.fcntl(fd, F_GETFL);
	fdfl = R.fcntl(fd, F_GETFD);
	d = dup_high(fd);
	if (fl < 0 || fdfl < 0 || d < 0) {
		if (d >= 0)
			R.close(d);
		return R.connect(fd, addr, alen);
	}
	nb = fl & O_NONBLOCK;
	gate = nb && (preload_ctx_has_devices() || preload_force_gate());
	rc = connect_start(ctx, d, addr, alen, nb, &gate, &c);
	if (rc > 0) {
		count_reason((uint32_t)rc, false);
		return R.connect(fd, addr, alen);
	}
	if (rc < 0) { /* the connect itself failed: the socket's own error */
		fd_set_nonblock(fd, nb);
		count_connect_failed(usmc_errno(rc));
		return (int)set_err(-usmc_errno(rc));
	}
	return connect_track(fd, c, d, nb, gate, fdfl);
}

int failed_take(struct pobj *o)
{
	int err;

	pthread_mutex_lock(&o->lock);
	err = o->pending_err;
	o->pending_err = 0;
	pthread_mutex_unlock(&o->lock);
	tab_release_all(o);
	return err;
}

PRELOAD_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t alen)
{
	struct pobj *o;
	int v = 0, err;
	socklen_t len = sizeof(v);

	P_INIT();
	while ((o = obj_get(fd))) {
		enum pobj_kind k = o->kind;

		if (k == PO_CONNECTING) {
			int rc = conn_finish(o, false);

			obj_put(o);
			if (rc == -EINPROGRESS) {
				errno = EALREADY;
				return -1;
			}
			continue;
		}
		if (k == PO_SMCR) {
			pthread_mutex_lock(&o->lock);
			err = o->connect_state++ ? EISCONN : 0;
			pthread_mutex_unlock(&o->lock);
			obj_put(o);
			if (!err)
				return 0;
			errno = err;
			return -1;
		}
		if (k == PO_FAILED) {
			err = failed_take(o);
			obj_put(o);
			if (!err)
				continue;
			errno = err;
			return -1;
		}
		obj_put(o);
		break; /* a listener: the kernel's answer */
	}
	if (o || in_lib || preload_disabled || !addr || alen < sizeof(sa_family_t) ||
	    (addr->sa_family != AF_INET && addr->sa_family != AF_INET6))
		return R.connect(fd, addr, alen);
	if (R.getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) || v != SOCK_STREAM)
		return R.connect(fd, addr, alen);
	len = sizeof(v);
	if (R.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &len) || v != IPPROTO_TCP)
		return R.connect(fd, addr, alen);
	return usmc_connect_new(fd, addr, alen);
}

/* ---- close and dup ------------------------------------------------------------ */

PRELOAD_EXPORT int close(int fd)
{
	struct pobj *o;
	int rc;

	P_INIT();
	if (!tab_peek(fd)) /* a lock-free look: most descriptors are not ours */
		return R.close(fd);
	if (getpid() != my_pid) /* a vfork() child: the table is the parent's */
		return R.close(fd);
	o = tab_remove(fd);
	rc = R.close(fd);
	if (o)
		obj_put(o);
	return rc;
}

static int dup_managed(int oldfd, int newfd)
{
	struct pobj *o = obj_get(oldfd);

	if (o) {
		if (tab_add(newfd, o))
			count_unsupported("dup beyond the table");
		obj_put(o);
	}
	return newfd;
}

PRELOAD_EXPORT int dup(int fd)
{
	int r;

	P_INIT();
	r = R.dup(fd);
	return r >= 0 && tab_peek(fd) ? dup_managed(fd, r) : r;
}

static int do_dup3(int oldfd, int newfd, int flags, bool three)
{
	struct pobj *victim = NULL;
	int r;

	P_INIT();
	if (oldfd == newfd || (!tab_peek(oldfd) && !tab_peek(newfd)) || getpid() != my_pid)
		return three ? R.dup3(oldfd, newfd, flags) : R.dup2(oldfd, newfd);
	if (R.fcntl(oldfd, F_GETFD) < 0) {
		errno = EBADF;
		return -1;
	}
	if (tab_peek(newfd))
		victim = tab_remove(newfd);
	r = three ? R.dup3(oldfd, newfd, flags) : R.dup2(oldfd, newfd);
	if (r >= 0 && tab_peek(oldfd))
		dup_managed(oldfd, newfd);
	if (victim)
		obj_put(victim);
	return r;
}

PRELOAD_EXPORT int dup2(int oldfd, int newfd)
{
	return do_dup3(oldfd, newfd, 0, false);
}

PRELOAD_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	return do_dup3(oldfd, newfd, flags, true);
}

/* ---- fcntl, ioctl --------------------------------------------------------------- */

/* O_NONBLOCK as the application sets it; the real file keeps what the
 * library needs (non-blocking for a listener or a readiness socketpair). */
static int setfl(struct pobj *o, int fd, int fl, int (*f)(int, int, ...))
{
	int rc = 0;

	pthread_mutex_lock(&o->lock);
	o->nonblock = (fl & O_NONBLOCK) != 0;
	switch (o->kind) {
	case PO_SMCR:
	case PO_LISTEN:
		rc = f(fd, F_SETFL, fl | O_NONBLOCK);
		break;
	case PO_CONNECTING:
		if (!o->bg)
			rc = f(fd, F_SETFL, fl);
		break;
	case PO_FAILED:
	case PO_PLAIN:
		rc = f(fd, F_SETFL, fl);
		break;
	}
	pthread_mutex_unlock(&o->lock);
	return rc;
}

static int do_fcntl(int fd, int cmd, void *arg, bool is64)
{
	int (*f)(int, int, ...);
	struct pobj *o;
	int rc;

	P_INIT();
	f = is64 ? R.fcntl64 : R.fcntl;
	switch (cmd) {
	case F_DUPFD:
	case F_DUPFD_CLOEXEC:
		rc = f(fd, cmd, (int)(long)arg);
		return rc >= 0 && tab_peek(fd) ? dup_managed(fd, rc) : rc;
	case F_GETFL:
	case F_SETFL:
		o = tab_peek(fd) ? obj_get(fd) : NULL;
		if (!o)
			return f(fd, cmd, arg);
		if (cmd == F_SETFL) {
			rc = setfl(o, fd, (int)(long)arg, f);
		} else {
			rc = f(fd, F_GETFL);
			if (rc >= 0 && o->kind != PO_FAILED && o->kind != PO_PLAIN)
				rc = (rc & ~O_NONBLOCK) | (o->nonblock ? O_NONBLOCK : 0);
		}
		obj_put(o);
		return rc;
	}
	return f(fd, cmd, arg);
}

/* The third argument of fcntl() and ioctl(), whatever its type: a word. */
#define VA_WORD(last, word)                 \
	do {                                \
		va_list ap_;                \
		va_start(ap_, last);        \
		word = va_arg(ap_, void *); \
		va_end(ap_);                \
	} while (0)

PRELOAD_EXPORT int fcntl(int fd, int cmd, ...)
{
	void *arg;

	VA_WORD(cmd, arg);
	return do_fcntl(fd, cmd, arg, false);
}

PRELOAD_EXPORT int fcntl64(int fd, int cmd, ...)
{
	void *arg;

	VA_WORD(cmd, arg);
	return do_fcntl(fd, cmd, arg, true);
}

/* Bytes an SMC-R connection has to read (FIONREAD): a peek. */
static int smcr_inq(struct pobj *o)
{
	socklen_t len = sizeof(int);
	int rmb = 0;
	ssize_t n;
	void *buf;

	if (usmc_conn_getsockopt(o->c, SOL_SOCKET, SO_RCVBUF, &rmb, &len) || rmb <= 0)
		rmb = 1 << 20;
	buf = malloc((size_t)rmb);
	if (!buf)
		return -ENOMEM;
	n = usmc_recv(o->c, buf, (size_t)rmb, MSG_PEEK | MSG_DONTWAIT);
	free(buf);
	return n >= 0 ? (int)n : n == -EAGAIN ? 0 : (int)n;
}

PRELOAD_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	struct pobj *o;
	void *arg;
	int rc;

	VA_WORD(req, arg);
	P_INIT();
	o = tab_peek(fd) ? obj_get(fd) : NULL;
	if (!o)
		return R.ioctl(fd, req, arg);
	if (req == FIONBIO) {
		int fl = R.fcntl(fd, F_GETFL);

		rc = fl < 0 ? -1
			    : setfl(o, fd, *(int *)arg ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK),
				    R.fcntl);
	} else if (o->kind != PO_SMCR) {
		rc = R.ioctl(fd, req, arg);
	} else if (o->pid != my_pid) {
		count_forked();
		rc = (int)set_err(-ENOTCONN);
	} else if (req == FIONREAD) {
		rc = smcr_inq(o);
		if (rc >= 0) {
			*(int *)arg = rc;
			rc = 0;
		} else {
			rc = (int)set_err(rc);
		}
	} else if (req == SIOCOUTQ || req == SIOCATMARK) {
		*(int *)arg = 0;
		rc = 0;
	} else {
		count_unsupported("ioctl");
		rc = (int)set_err(-ENOTTY);
	}
	obj_put(o);
	return rc;
}

/* ---- options, names, shutdown ------------------------------------------------------ */

static int tv_ms(const void *val, socklen_t len)
{
	const struct timeval *tv = val;
	long ms;

	if (len < sizeof(*tv))
		return -1;
	ms = tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000;
	return ms <= 0 ? -1 : ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

PRELOAD_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct pobj *o;
	int rc;

	P_INIT();
	o = tab_peek(fd) ? obj_get(fd) : NULL;
	if (!o)
		return R.setsockopt(fd, level, name, val, len);
	if (o->kind == PO_LISTEN || o->kind == PO_FAILED || o->kind == PO_PLAIN ||
	    (o->kind == PO_CONNECTING && !o->bg)) {
		rc = R.setsockopt(fd, level, name, val, len);
	} else if (o->pid != my_pid) {
		count_forked();
		rc = (int)set_err(-ENOTCONN);
	} else if (level == SOL_SOCKET &&
		   (name == SO_RCVBUF || name == SO_SNDBUF || name == SO_RCVBUFFORCE ||
		    name == SO_SNDBUFFORCE) &&
		   o->kind == PO_SMCR) {
		rc = 0; /* the RMB and send buffer were sized by the handshake */
	} else {
		if (level == SOL_SOCKET && name == SO_LINGER && val &&
		    len >= sizeof(struct linger)) {
			const struct linger *lg = val;

			o->linger0 = lg->l_onoff && !lg->l_linger;
		} else if (level == SOL_SOCKET && name == SO_RCVTIMEO) {
			o->rcvtimeo_ms = tv_ms(val, len);
		} else if (level == SOL_SOCKET && name == SO_SNDTIMEO) {
			o->sndtimeo_ms = tv_ms(val, len);
		}
		rc = usmc_conn_setsockopt(o->c, level, name, val, len);
		rc = rc ? (int)set_err(rc) : 0;
	}
	obj_put(o);
	return rc;
}

PRELOAD_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct pobj *o;
	int rc, err;

	P_INIT();
	o = tab_peek(fd) ? obj_get(fd) : NULL;
	if (!o)
		return R.getsockopt(fd, level, name, val, len);
	if (o->kind == PO_CONNECTING && level == SOL_SOCKET && name == SO_ERROR &&
	    conn_finish(o, false) == 0) {
		obj_put(o); /* settled: ask again */
		return getsockopt(fd, level, name, val, len);
	}
	if (o->kind == PO_FAILED && level == SOL_SOCKET && name == SO_ERROR && val && len &&
	    *len >= sizeof(int)) {
		err = failed_take(o);
		if (err) {
			*(int *)val = err;
			*len = sizeof(int);
			obj_put(o);
			return 0;
		}
	}
	if (o->kind == PO_LISTEN || o->kind == PO_FAILED || o->kind == PO_PLAIN ||
	    (o->kind == PO_CONNECTING && !o->bg)) {
		rc = R.getsockopt(fd, level, name, val, len);
	} else if (o->kind == PO_CONNECTING && level == SOL_SOCKET && name == SO_ERROR && val &&
		   len && *len >= sizeof(int)) {
		*(int *)val = 0; /* in progress */
		*len = sizeof(int);
		rc = 0;
	} else if (o->pid != my_pid) {
		count_forked();
		rc = (int)set_err(-ENOTCONN);
	} else {
		rc = usmc_conn_getsockopt(o->c, level, name, val, len);
		rc = rc ? (int)set_err(rc) : 0;
	}
	obj_put(o);
	return rc;
}

static int names(int fd, struct sockaddr *addr, socklen_t *alen, bool peer)
{
	struct usmc_conn_info info;
	struct pobj *o;
	int rc = 0;

	P_INIT();
	o = tab_peek(fd) ? obj_get(fd) : NULL;
	if (!o || !(o->kind == PO_SMCR || (o->kind == PO_CONNECTING && o->bg))) {
		if (o)
			obj_put(o);
		return peer ? R.getpeername(fd, addr, alen) : R.getsockname(fd, addr, alen);
	}
	if (!addr || !alen) {
		rc = (int)set_err(-EFAULT);
	} else if (o->kind == PO_SMCR) {
		if (peer)
			copy_addr(&o->peer, o->plen, addr, alen);
		else
			copy_addr(&o->local, o->llen, addr, alen);
	} else if (peer) {
		rc = (int)set_err(-ENOTCONN);
	} else {
		pthread_mutex_lock(&o->lock);
		if (o->c && !usmc_conn_info(o->c, &info))
			copy_addr(&info.local, ss_len(&info.local), addr, alen);
		pthread_mutex_unlock(&o->lock);
	}
	obj_put(o);
	return rc;
}

PRELOAD_EXPORT int getsockname(int fd, struct sockaddr *addr, socklen_t *alen)
{
	return names(fd, addr, alen, false);
}

PRELOAD_EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *alen)
{
	return names(fd, addr, alen, true);
}

PRELOAD_EXPORT int shutdown(int fd, int how)
{
	struct pobj *o;
	int rc;

	P_INIT();
	o = tab_peek(fd) ? obj_get(fd) : NULL;
	if (!o)
		return R.shutdown(fd, how);
	switch (o->kind) {
	case PO_SMCR:
		if (o->pid != my_pid) {
			count_forked();
			rc = (int)set_err(-ENOTCONN);
			break;
		}
		rc = usmc_shutdown(o->c, how);
		rc = rc ? (int)set_err(rc) : 0;
		break;
	case PO_LISTEN:
		rc = R.shutdown(fd, how);
		if (!rc && how != SHUT_WR) {
			uint64_t one = 1;

			o->shut = true;
			if (o->wakefd >= 0)
				(void)!R.write(o->wakefd, &one, sizeof(one));
		}
		break;
	case PO_CONNECTING:
		if (o->bg) {
			rc = (int)set_err(-ENOTCONN);
			break;
		}
		/* fall through */
	default:
		rc = R.shutdown(fd, how);
	}
	obj_put(o);
	return rc;
}
