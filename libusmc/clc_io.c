// SPDX-License-Identifier: MIT
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "clc_io.h"
#include "clock.h"
#include "wire_err.h"

/*
 * Wait until @fd holds @need bytes, its peer has closed (*@closed set), or
 * @deadline passes. A peek sees the same bytes again until more arrive, so
 * "readable" alone would wake at once for a partial message: SO_RCVLOWAT
 * makes poll() wait for the count instead (tcp_poll() honours it), and is
 * put back afterwards because the application gets this socket.
 */
static int wait_bytes(int fd, size_t need, long deadline, bool *closed)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
	int old = 1, want = (int)need, rc;
	socklen_t len = sizeof(old);
	bool lowat = need > 1 && !getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &old, &len) &&
		     old < want && !setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want));

	do {
		long left = deadline - clock_now_ms();

		rc = left <= 0 ? 0 : poll(&p, 1, (int)left);
	} while (rc < 0 && errno == EINTR);
	if (rc < 0)
		rc = -errno;
	else
		rc = rc ? 0 : -ETIMEDOUT;
	if (lowat)
		setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &old, sizeof(old));
	*closed = p.revents & (POLLRDHUP | POLLHUP | POLLERR);
	return rc;
}

int clc_io_take_peeked(int fd, uint8_t *buf, size_t n, size_t cap, struct clc_hdr *hdr)
{
	int rc;

	if (n < CLC_HDR_LEN)
		return -EAGAIN;
	rc = clc_hdr_decode(buf, n, hdr);
	if (rc)
		return rc;
	if (hdr->length > cap)
		return WIRE_E_LENGTH;
	if (n < hdr->length)
		return -EAGAIN;
	if (recv(fd, buf, hdr->length, MSG_DONTWAIT) != (ssize_t)hdr->length)
		return -EIO; /* cannot happen: the bytes were peeked */
	return hdr->length;
}

/* Peek what @fd holds (up to @cap) into @buf; -EAGAIN if nothing yet. */
static ssize_t peek(int fd, uint8_t *buf, size_t cap)
{
	ssize_t n = recv(fd, buf, cap, MSG_PEEK | MSG_DONTWAIT);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
	return n ? n : -ECONNRESET;
}

int clc_io_take(int fd, uint8_t *buf, size_t cap, struct clc_hdr *hdr)
{
	ssize_t n = peek(fd, buf, cap);

	return n < 0 ? (int)n : clc_io_take_peeked(fd, buf, (size_t)n, cap, hdr);
}

int clc_io_ready(int fd, size_t cap, size_t *need)
{
	uint8_t hb[CLC_HDR_LEN];
	struct clc_hdr hdr;
	ssize_t n = peek(fd, hb, sizeof(hb));
	int avail;

	if (n == -EAGAIN || (n >= 0 && n < CLC_HDR_LEN)) {
		*need = CLC_HDR_LEN;
		return -EAGAIN;
	}
	if (n < 0 || clc_hdr_decode(hb, (size_t)n, &hdr) || hdr.length > cap)
		return 0;
	if (ioctl(fd, FIONREAD, &avail) || (size_t)avail >= hdr.length)
		return 0;
	*need = hdr.length;
	return -EAGAIN;
}

int clc_io_wait(int fd, size_t cap, int timeout_ms)
{
	long deadline = clock_now_ms() + timeout_ms;
	bool closed = false;
	size_t need;
	int rc;

	while ((rc = clc_io_ready(fd, cap, &need)) == -EAGAIN && !closed) {
		rc = wait_bytes(fd, need, deadline, &closed);
		if (rc)
			return rc;
	}
	return 0;
}

/*
 * Peek, and take the message once it is whole: its header's length says
 * how many bytes are ours, so nothing after it is ever consumed.
 */
int clc_io_recv(int fd, uint8_t *buf, size_t cap, int timeout_ms, struct clc_hdr *hdr)
{
	long deadline = clock_now_ms() + timeout_ms;
	bool closed = false;

	if (cap < CLC_HDR_LEN)
		return -EINVAL;
	for (;;) {
		ssize_t n = peek(fd, buf, cap);
		size_t need;
		int rc;

		if (n < 0 && n != -EAGAIN)
			return (int)n;
		rc = n < 0 ? -EAGAIN : clc_io_take_peeked(fd, buf, (size_t)n, cap, hdr);
		if (rc != -EAGAIN)
			return rc;
		if (closed)
			return -ECONNRESET; /* EOF inside the message */
		/* nothing yet: any byte wakes us; part of it: the rest does */
		need = n <= 0 ? 1 : n < CLC_HDR_LEN ? CLC_HDR_LEN : hdr->length;
		rc = wait_bytes(fd, need, deadline, &closed);
		if (rc)
			return rc;
	}
}

int clc_io_send(int fd, const uint8_t *buf, size_t len)
{
	size_t sent = 0;

	while (sent < len) {
		ssize_t n = send(fd, buf + sent, len - sent, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		sent += (size_t)n;
	}
	return 0;
}

int clc_io_send_decline(int fd, uint8_t version, const uint8_t peer_id[CLC_PEER_ID_LEN],
			uint32_t reason)
{
	uint8_t buf[CLC_DECLINE_V2_LEN];
	int len = clc_decline_build(buf, sizeof(buf), version, peer_id, reason, false);

	if (len < 0)
		return len;
	return clc_io_send(fd, buf, (size_t)len);
}
