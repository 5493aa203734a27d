// SPDX-License-Identifier: MIT
/*
 * sendfile() and splice() to or from an SMC-R connection (docs/preload.md):
 * the bytes go through a buffer of the preload, as there is no socket for
 * the kernel to move them to.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "preload.h"

#define SENDFILE_CHUNK (256 * 1024)
#define SPLICE_CHUNK   (64 * 1024)

/* sendfile() to an SMC-R connection: the file's bytes through a buffer,
 * from *@off (or the file position, which then advances by what was
 * sent), as much as fits when non-blocking, all of @count otherwise. */
static ssize_t sendfile_managed(struct pobj *o, int in_fd, off_t *off, size_t count)
{
	bool nb = o->nonblock;
	size_t total = 0, chunk_max = SENDFILE_CHUNK;
	off_t pos;
	char *buf;
	ssize_t r = po_enter(o, nb);

	if (r)
		return r;
	pos = off ? *off : lseek(in_fd, 0, SEEK_CUR);
	if (pos < 0)
		return -1;
	if (nb) { /* no more than the send buffer takes: no read in vain */
		socklen_t len = sizeof(int);
		int snd = 0;

		if (!usmc_conn_getsockopt(o->c, SOL_SOCKET, SO_SNDBUF, &snd, &len) && snd > 0 &&
		    (size_t)snd < chunk_max)
			chunk_max = (size_t)snd;
	}
	buf = malloc(count < chunk_max ? (count ? count : 1) : chunk_max);
	if (!buf)
		return set_err(-ENOMEM);
	while (total < count) {
		size_t chunk = count - total < chunk_max ? count - total : chunk_max;
		ssize_t n = pread(in_fd, buf, chunk, pos + (off_t)total), s;

		if (n <= 0) {
			if (n < 0 && !total)
				r = -1;
			break;
		}
		s = po_send(o, ONE_IOV(buf, (size_t)n), 1, MSG_NOSIGNAL);
		if (s < 0) {
			if (!total) {
				r = -1;
				if (errno == EPIPE)
					raise(SIGPIPE);
			}
			break;
		}
		total += (size_t)s;
		if (s < n)
			break; /* non-blocking and full */
	}
	free(buf);
	if (r < 0)
		return r;
	if (off)
		*off = pos + (off_t)total;
	else
		lseek(in_fd, pos + (off_t)total, SEEK_SET);
	return (ssize_t)total;
}

static ssize_t do_sendfile(int out_fd, int in_fd, off_t *off, size_t count, bool is64)
{
	struct pobj *in;

	P_INIT();
	in = tab_peek(in_fd) ? obj_get(in_fd) : NULL;
	if (in) { /* reading from an SMC-R connection: not a file, as the kernel says */
		bool smcr = in->kind == PO_SMCR;

		obj_put(in);
		if (smcr) {
			count_unsupported("sendfile from a connection");
			return set_err(-EINVAL);
		}
	}
	DISPATCH(out_fd, sendfile_managed(o, in_fd, off, count),
		 is64 ? R.sendfile64(out_fd, in_fd, off, count)
		      : R.sendfile(out_fd, in_fd, off, count));
}

PRELOAD_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *off, size_t count)
{
	return do_sendfile(out_fd, in_fd, off, count, false);
}

PRELOAD_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off_t *off, size_t count)
{
	return do_sendfile(out_fd, in_fd, off, count, true);
}

/* splice() to or from an SMC-R connection: through a buffer, with the
 * pipe on the other side (the kernel requires one). */
static ssize_t splice_managed(struct pobj *o, bool to_conn, int pipe_fd, size_t len,
			      unsigned int flags)
{
	bool nb = o->nonblock || (flags & SPLICE_F_NONBLOCK);
	size_t chunk = len < SPLICE_CHUNK ? len : SPLICE_CHUNK;
	ssize_t r = po_enter(o, nb), n;
	char *buf;

	if (r)
		return r;
	if (!chunk)
		return 0;
	buf = malloc(chunk);
	if (!buf)
		return set_err(-ENOMEM);
	if (to_conn) {
		n = R.read(pipe_fd, buf, chunk);
		/* bytes taken from the pipe must all go: blocking send */
		r = n > 0 ? po_send(o, ONE_IOV(buf, (size_t)n), 1, MSG_NOSIGNAL) : n;
	} else {
		int room = 0;

		/* no more than the pipe can take without blocking */
		if (R.ioctl(pipe_fd, FIONREAD, &room) == 0) {
			int cap = R.fcntl(pipe_fd, F_GETPIPE_SZ);

			if (cap > room && (size_t)(cap - room) < chunk)
				chunk = (size_t)(cap - room);
		}
		n = po_recv(o, ONE_IOV(buf, chunk), 1, nb ? MSG_DONTWAIT : 0);
		r = n > 0 ? R.write(pipe_fd, buf, (size_t)n) : n;
	}
	free(buf);
	return r;
}

PRELOAD_EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			      unsigned int flags)
{
	struct pobj *o;

	P_INIT();
	o = tab_peek(fd_in) ? obj_get(fd_in) : NULL;
	if (o) {
		ssize_t r =
			off_in ? set_err(-ESPIPE) : splice_managed(o, false, fd_out, len, flags);

		obj_put(o);
		if (r != PO_PASS && r != PO_RETRY)
			return r;
	}
	o = tab_peek(fd_out) ? obj_get(fd_out) : NULL;
	if (o) {
		ssize_t r = off_out ? set_err(-ESPIPE) : splice_managed(o, true, fd_in, len, flags);

		obj_put(o);
		if (r != PO_PASS && r != PO_RETRY)
			return r;
	}
	return R.splice(fd_in, off_in, fd_out, off_out, len, flags);
}
