// SPDX-License-Identifier: MIT
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#include "clc_io.h"
#include "clock.h"
#include "wire_err.h"

/*
 * Wait until @fd holds @need bytes, its peer has closed (*@closed set), or
 * @deadline passes (a deadline already past still looks once, so a message
 * that came just in time is taken). A peek sees the same bytes again until
 * more arrive, so "readable" alone would wake at once for a partial
 * message: SO_RCVLOWAT makes poll() wait for the count instead
 * (net/ipv4/tcp.c tcp_poll() honours it), and is put back afterwards
 * because the application gets this socket. With @need 1 (nothing seen
 * yet, the common case) it is one poll() and SO_RCVLOWAT is not touched.
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

		rc = poll(&p, 1, left > 0 ? (int)left : 0);
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

/* Peek what @fd holds (up to @cap) into @buf; -EAGAIN if nothing yet. */
static ssize_t peek(int fd, uint8_t *buf, size_t cap)
{
	ssize_t n = recv(fd, buf, cap, MSG_PEEK | MSG_DONTWAIT);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
	return n ? n : -ECONNRESET;
}

int clc_io_peeked(const uint8_t *buf, ssize_t n, size_t cap, struct clc_hdr *hdr, size_t *need)
{
	int rc;

	if (n == -EAGAIN) {
		*need = 1; /* nothing yet: any byte */
		return -EAGAIN;
	}
	if (n < 0)
		return (int)n;
	if ((size_t)n < CLC_HDR_LEN) {
		*need = CLC_HDR_LEN;
		return -EAGAIN;
	}
	rc = clc_hdr_decode(buf, (size_t)n, hdr);
	if (rc)
		return rc;
	if (hdr->length > cap)
		return WIRE_E_LENGTH;
	if ((size_t)n < hdr->length) {
		*need = hdr->length;
		return -EAGAIN;
	}
	return hdr->length;
}

/*
 * Consume the @len bytes of the one message that was peeked whole at the
 * start of @fd's stream (into @buf, again) and check its header. Nobody
 * else reads the socket meanwhile, so the bytes are still those.
 */
static int take(int fd, uint8_t *buf, size_t cap, size_t len, struct clc_hdr *hdr)
{
	int rc;

	if (len < CLC_HDR_LEN || len > cap)
		return -EINVAL;
	if (recv(fd, buf, len, MSG_DONTWAIT) != (ssize_t)len)
		return -EIO; /* cannot happen: the bytes were peeked */
	rc = clc_hdr_decode(buf, len, hdr);
	if (rc)
		return rc;
	return hdr->length == len ? (int)len : -EIO;
}

int clc_io_take_peeked(int fd, uint8_t *buf, size_t n, size_t cap, struct clc_hdr *hdr)
{
	size_t need;
	int len = clc_io_peeked(buf, (ssize_t)n, cap, hdr, &need);

	return len > 0 ? take(fd, buf, cap, (size_t)len, hdr) : len;
}

int clc_io_take(int fd, uint8_t *buf, size_t cap, struct clc_hdr *hdr)
{
	ssize_t n = peek(fd, buf, cap);

	return n < 0 ? (int)n : clc_io_take_peeked(fd, buf, (size_t)n, cap, hdr);
}

int clc_io_ready(int fd, size_t cap, size_t *need)
{
	uint8_t buf[CLC_MAX_LEN];
	struct clc_hdr hdr;
	int rc;

	if (cap > sizeof(buf))
		cap = sizeof(buf);
	rc = clc_io_peeked(buf, peek(fd, buf, cap), cap, &hdr, need);
	return rc > 0 || rc == -EAGAIN ? rc : 0;
}

/* What a peek of a stream's start says (clc_io_peeked() and the like):
 * a length, -EAGAIN with *@need, or what ends the wait. */
typedef int (*peek_judge)(const uint8_t *buf, ssize_t n, size_t cap, struct clc_hdr *hdr,
			  size_t *need);

/*
 * Wait until @judge says more than -EAGAIN of the start of @fd's stream
 * (peeked into @buf), or something ends the wait: EOF while it still says
 * -EAGAIN (-ECONNRESET), an error, -ETIMEDOUT at @deadline. It polls before
 * it peeks: a caller waits for the answer to what it has just sent, which
 * cannot be there yet, and poll() returns at once if it is. A message that
 * comes in pieces is waited for with SO_RCVLOWAT (wait_bytes()), so a
 * trickling peer costs no wake-up per byte.
 */
static int wait_judged(int fd, uint8_t *buf, size_t cap, long deadline, struct clc_hdr *hdr,
		       peek_judge judge)
{
	bool closed = false;
	size_t need = 1;

	for (;;) {
		int rc = wait_bytes(fd, need, deadline, &closed);

		if (rc)
			return rc;
		rc = judge(buf, peek(fd, buf, cap), cap, hdr, &need);
		if (rc != -EAGAIN)
			return rc;
		if (closed)
			return -ECONNRESET; /* EOF inside the message */
	}
}

/* A whole CLC message at the start of @fd's stream: its length, or what
 * ended the wait (a malformed header among them). */
static int wait_whole(int fd, uint8_t *buf, size_t cap, long deadline, struct clc_hdr *hdr)
{
	return wait_judged(fd, buf, cap, deadline, hdr, clc_io_peeked);
}

int clc_io_wait(int fd, size_t cap, int timeout_ms)
{
	uint8_t buf[CLC_MAX_LEN];
	struct clc_hdr hdr;
	int rc;

	if (cap > sizeof(buf))
		cap = sizeof(buf);
	rc = wait_whole(fd, buf, cap, clock_now_ms() + timeout_ms, &hdr);
	return rc > 0 || rc == -ETIMEDOUT ? rc : 0;
}

/*
 * Wait for the message, then take it: its header's length says how many
 * bytes are ours, so nothing after it is ever consumed.
 */
int clc_io_recv(int fd, uint8_t *buf, size_t cap, int timeout_ms, size_t waiting,
		struct clc_hdr *hdr)
{
	int len;

	if (cap < CLC_HDR_LEN)
		return -EINVAL;
	if (waiting)
		return take(fd, buf, cap, waiting, hdr);
	len = wait_whole(fd, buf, cap, clock_now_ms() + timeout_ms, hdr);
	return len > 0 ? take(fd, buf, cap, (size_t)len, hdr) : len;
}

/*
 * What the @n peeked bytes in @buf say about a DECLINE at the stream's
 * start: its whole length, -EAGAIN with *@need while they may still
 * become one, or 0 when they cannot (another message, or the peer's
 * data: it is on TCP already).
 */
static int peeked_decline(const uint8_t *buf, ssize_t n, size_t cap, struct clc_hdr *hdr,
			  size_t *need)
{
	int len;

	if (n > 0 && !clc_hdr_starts(buf, (size_t)n, CLC_DECLINE))
		return 0;
	len = clc_io_peeked(buf, n, cap, hdr, need);
	if (len < 0)
		return len == -EAGAIN || n < 0 ? len : 0; /* a malformed header: not ours */
	return hdr->type == CLC_DECLINE ? len : 0;
}

int clc_io_await_decline(int fd, uint8_t *buf, size_t cap, int timeout_ms, struct clc_hdr *hdr)
{
	int rc = wait_judged(fd, buf, cap, clock_now_ms() + timeout_ms, hdr, peeked_decline);

	if (rc > 0)
		return take(fd, buf, cap, (size_t)rc, hdr);
	return rc == -ECONNRESET ? 0 : rc; /* EOF: the application reads it */
}

int clc_io_read(int fd, uint8_t *buf, size_t cap, size_t *have, size_t min, struct clc_hdr *hdr)
{
	if (min < CLC_HDR_LEN || min > cap || *have > cap)
		return -EINVAL;
	for (;;) {
		size_t want = min;
		ssize_t n;

		if (*have >= CLC_HDR_LEN) {
			int rc = clc_hdr_decode(buf, *have, hdr);

			if (rc)
				return rc;
			if (hdr->length > cap)
				return WIRE_E_LENGTH;
			if (hdr->length < *have)
				return WIRE_E_LENGTH; /* shorter than what @min took */
			if (hdr->length == *have)
				return hdr->length;
			want = hdr->length;
		}
		n = recv(fd, buf + *have, want - *have, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
		}
		if (n == 0)
			return -ECONNRESET; /* EOF before the message's end */
		*have += (size_t)n;
		if (*have < want)
			return -EAGAIN; /* the rest is not here yet: poll for it */
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
