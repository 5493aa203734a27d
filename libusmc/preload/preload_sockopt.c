// SPDX-License-Identifier: MIT
/*
 * setsockopt(), getsockopt(), getsockname(), getpeername() and
 * shutdown() (docs/preload.md): an SMC-R connection answers through
 * libusmc, everything else is the kernel's socket.
 */
#include "preload.h"

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
