// SPDX-License-Identifier: MIT
/*
 * A connect in progress (PO_CONNECTING, docs/preload.md) and how it
 * settles: into an SMC-R connection, whose descriptors then point at its
 * readiness socketpair; into a plain TCP socket; or into a failure
 * reported once. A non-blocking connect towards a peer that may answer
 * SMC-R shows the application a gate (a descriptor neither readable nor
 * writable) while a helper thread runs the handshake.
 */
#include <fcntl.h>

#include "preload.h"

/* Point each descriptor of @o at @final, keeping its epoll registrations
 * and FD_CLOEXEC; requires tab_lock and o->lock. */
static void switch_fds(struct pobj *o, int final)
{
	for (int i = 0; i < o->nfdv; i++) {
		int fd = o->fdv[i], fdfl = R.fcntl(fd, F_GETFD);
		struct epreg *r;

		for (r = o->regs; r; r = r->next)
			if (r->live && r->fd == fd)
				R.epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL);
		fd_point(fd, final, fdfl);
		for (r = o->regs; r; r = r->next)
			if (r->live && r->fd == fd)
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
		for (struct epreg *r = o->regs; r; r = r->next)
			if (r->live)
				evloop_register(o, r->epfd);
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

/* settle_locked() under the locks it requires, then the release. */
void conn_settle(struct pobj *o, int rc)
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

/*
 * Finish @o's connect if libusmc is done with it (@wait: until it is):
 * 0 once it settled, -EINPROGRESS, or -EINTR. A connect with a helper
 * thread is the helper's to finish: this only waits for it.
 */
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

#define HELPER_STACK (256 * 1024) /* a handshake's calls, no more */

/*
 * A helper thread finishes the handshake of @o, whose application
 * descriptor @fd is the gate meanwhile. Without one, @fd is the TCP
 * socket again and the connect is finished in place, blocking (rare).
 */
void conn_helper_start(struct pobj *o, int fd, int fdfl)
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
