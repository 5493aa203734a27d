// SPDX-License-Identifier: MIT
/*
 * connect() (docs/preload.md): a TCP socket's first connect goes through
 * libusmc, on a duplicate of the socket high in the range; the
 * application's descriptor stands for the connection from then on
 * (preload_connecting.c). A second connect() answers as the kernel's.
 */
#include <fcntl.h>

#include "preload.h"

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
	if (!preload_may_propose(ctx, addr)) {
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
		conn_helper_start(o, fd, fdfl);
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
