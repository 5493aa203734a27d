// SPDX-License-Identifier: MIT
/*
 * poll, ppoll, select and pselect (docs/preload.md). A connection's
 * descriptor is polled as it is (the kernel's readiness of the TCP socket,
 * or of the SMC-R readiness socketpair end that N is); a listener's is not
 * readable while libusmc's accept thread takes its connections, so these
 * calls put usmc_listener_fd() (a private duplicate per descriptor: an
 * eventfd, or in direct mode an epoll set) in its place. An SMC-R
 * connection polled here has its completions run by the library's thread
 * again (evloop_forgo(): these waits do not run them).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "preload.h"

#define POLL_LOCAL 32

/* The descriptor to poll for listener @o at @fd, activating it; -1 when
 * it became a plain socket. */
static int listener_pollfd(struct pobj *o, int fd)
{
	int rc, sfd;

	pthread_mutex_lock(&o->lock);
	rc = listener_activate(o, fd);
	sfd = rc ? -1 : shadow_fd(o, fd);
	pthread_mutex_unlock(&o->lock);
	if (rc > 0)
		listener_giveup(o, fd, rc);
	return sfd;
}

struct ptrans {
	struct pollfd *fds;
	struct pobj **objs;
	struct pollfd lfds[POLL_LOCAL];
	struct pobj *lobjs[POLL_LOCAL];
};

/* 1 with t->fds the array to poll when some descriptor is a listener,
 * 0 when @fds can be polled as it is, -1 on ENOMEM. */
static int trans_begin(struct ptrans *t, const struct pollfd *fds, nfds_t n)
{
	bool any = false;

	for (nfds_t i = 0; i < n; i++)
		if (tab_peek(fds[i].fd)) {
			any = true;
			break;
		}
	if (!any)
		return 0;
	if (n <= POLL_LOCAL) {
		t->fds = t->lfds;
		t->objs = t->lobjs;
	} else {
		t->fds = malloc(n * sizeof(*fds));
		t->objs = calloc(n, sizeof(*t->objs));
		if (!t->fds || !t->objs) {
			free(t->fds);
			free(t->objs);
			errno = ENOMEM;
			return -1;
		}
	}
	memcpy(t->fds, fds, n * sizeof(*fds));
	any = false;
	for (nfds_t i = 0; i < n; i++) {
		struct pobj *o = tab_peek(fds[i].fd) ? obj_get(fds[i].fd) : NULL;
		int sfd;

		t->objs[i] = NULL;
		if (!o)
			continue;
		evloop_forgo(o);
		if (o->kind != PO_LISTEN || (sfd = listener_pollfd(o, fds[i].fd)) < 0) {
			obj_put(o);
			continue;
		}
		t->fds[i].fd = sfd;
		t->objs[i] = o; /* keeps the shadow open during the poll */
		any = true;
	}
	return 1;
}

static void trans_end(struct ptrans *t, struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++) {
		fds[i].revents = t->fds[i].revents;
		if (t->objs[i])
			obj_put(t->objs[i]);
	}
	if (t->fds != t->lfds) {
		free(t->fds);
		free(t->objs);
	}
}

static int do_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
		    int timeout_ms, bool is_ppoll)
{
	struct ptrans t;
	int rc, tr;

	P_INIT();
	tr = trans_begin(&t, fds, n);
	if (tr < 0)
		return -1;
	if (!tr)
		return is_ppoll ? R.ppoll(fds, n, ts, mask) : R.poll(fds, n, timeout_ms);
	rc = is_ppoll ? R.ppoll(t.fds, n, ts, mask) : R.poll(t.fds, n, timeout_ms);
	if (rc >= 0)
		trans_end(&t, fds, n);
	else {
		int err = errno;

		for (nfds_t i = 0; i < n; i++)
			t.fds[i].revents = fds[i].revents;
		trans_end(&t, fds, n);
		errno = err;
	}
	return rc;
}

PRELOAD_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	return do_ppoll(fds, n, NULL, NULL, timeout, false);
}

PRELOAD_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		abort();
	return do_ppoll(fds, n, NULL, NULL, timeout, false);
}

PRELOAD_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
			 const sigset_t *mask)
{
	return do_ppoll(fds, n, ts, mask, 0, true);
}

PRELOAD_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts,
			       const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		abort();
	return do_ppoll(fds, n, ts, mask, 0, true);
}

/* ---- select through ppoll when a listener is in the sets ------------------------ */

/* A listener is among the sets; each SMC-R connection in them is told
 * that select() does not run its completions (evloop_forgo()). */
static bool sets_have_listener(int nfds, fd_set *r, fd_set *w, fd_set *e)
{
	bool any = false;

	for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++)
		if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) &&
		    tab_peek(fd)) {
			struct pobj *o = obj_get(fd);

			if (!o)
				continue;
			any |= o->kind == PO_LISTEN;
			evloop_forgo(o);
			obj_put(o);
		}
	return any;
}

#define SEL_IN	(POLLIN | POLLRDNORM | POLLRDBAND | POLLHUP | POLLERR)
#define SEL_OUT (POLLOUT | POLLWRNORM | POLLWRBAND | POLLERR)
#define SEL_EX	(POLLPRI)

static int select_via_poll(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts,
			   const sigset_t *mask)
{
	struct pollfd *p;
	int n = 0, rc, count = 0;

	if (nfds > FD_SETSIZE)
		nfds = FD_SETSIZE;
	p = malloc((size_t)(nfds ? nfds : 1) * sizeof(*p));
	if (!p)
		return (int)set_err(-ENOMEM);
	for (int fd = 0; fd < nfds; fd++) {
		short ev = (short)((r && FD_ISSET(fd, r) ? POLLIN : 0) |
				   (w && FD_ISSET(fd, w) ? POLLOUT : 0) |
				   (e && FD_ISSET(fd, e) ? POLLPRI : 0));

		if (ev)
			p[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	rc = do_ppoll(p, (nfds_t)n, ts, mask, 0, true);
	if (rc < 0) {
		free(p);
		return -1;
	}
	for (int i = 0; i < n; i++)
		if (p[i].revents & POLLNVAL) {
			free(p);
			return (int)set_err(-EBADF);
		}
	if (r)
		FD_ZERO(r);
	if (w)
		FD_ZERO(w);
	if (e)
		FD_ZERO(e);
	for (int i = 0; i < n; i++) {
		short re = p[i].revents;

		if (r && (p[i].events & POLLIN) && (re & SEL_IN)) {
			FD_SET(p[i].fd, r);
			count++;
		}
		if (w && (p[i].events & POLLOUT) && (re & SEL_OUT)) {
			FD_SET(p[i].fd, w);
			count++;
		}
		if (e && (p[i].events & POLLPRI) && (re & SEL_EX)) {
			FD_SET(p[i].fd, e);
			count++;
		}
	}
	free(p);
	return count;
}

PRELOAD_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	struct timespec ts, t0, t1;
	int rc;

	P_INIT();
	if (nfds < 0 || !sets_have_listener(nfds, r, w, e))
		return R.select(nfds, r, w, e, tv);
	if (tv) {
		ts.tv_sec = tv->tv_sec;
		ts.tv_nsec = tv->tv_usec * 1000;
		clock_gettime(CLOCK_MONOTONIC, &t0);
	}
	rc = select_via_poll(nfds, r, w, e, tv ? &ts : NULL, NULL);
	if (tv) { /* Linux's select() leaves the time not slept */
		long long left;

		clock_gettime(CLOCK_MONOTONIC, &t1);
		left = (ts.tv_sec - (t1.tv_sec - t0.tv_sec)) * 1000000LL +
		       (ts.tv_nsec - (t1.tv_nsec - t0.tv_nsec)) / 1000;
		if (left < 0 || rc == 0)
			left = 0;
		tv->tv_sec = left / 1000000;
		tv->tv_usec = left % 1000000;
	}
	return rc;
}

PRELOAD_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts,
			   const sigset_t *mask)
{
	P_INIT();
	if (nfds < 0 || !sets_have_listener(nfds, r, w, e))
		return R.pselect(nfds, r, w, e, ts, mask);
	return select_via_poll(nfds, r, w, e, ts, mask);
}
