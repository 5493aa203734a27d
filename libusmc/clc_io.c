// SPDX-License-Identifier: MIT
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include "clc_io.h"
#include "clock.h"
#include "wire_err.h"

/* Wait until @fd is readable or @deadline passes. */
static int wait_readable(int fd, long deadline)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		long left = deadline - clock_now_ms();
		int rc;

		if (left <= 0)
			return -ETIMEDOUT;
		rc = poll(&p, 1, (int)left);
		if (rc > 0)
			return 0;
		if (rc == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

/* recv() exactly @len bytes (or peek them) before @deadline. */
static int recv_exact(int fd, uint8_t *buf, size_t len, int flags, long deadline)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n;
		int rc = wait_readable(fd, deadline);

		if (rc)
			return rc;
		if (flags & MSG_PEEK)
			got = 0; /* a peek sees the whole queue from its start */
		n = recv(fd, buf + got, len - got, flags | MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
		if ((flags & MSG_PEEK) && got < len) {
			/* wait for more without spinning on the same bytes */
			struct timespec ts = {0, 1000000};

			nanosleep(&ts, NULL);
		}
	}
	return 0;
}

int clc_io_recv(int fd, uint8_t *buf, size_t cap, int timeout_ms, struct clc_hdr *hdr)
{
	long deadline = clock_now_ms() + timeout_ms;
	int rc;

	if (cap < CLC_HDR_LEN)
		return -EINVAL;
	/* peek the header first: its length says how much is ours */
	rc = recv_exact(fd, buf, CLC_HDR_LEN, MSG_PEEK, deadline);
	if (rc)
		return rc;
	rc = clc_hdr_decode(buf, CLC_HDR_LEN, hdr);
	if (rc)
		return rc;
	if (hdr->length > cap)
		return WIRE_E_LENGTH;
	rc = recv_exact(fd, buf, hdr->length, 0, deadline);
	return rc ? rc : hdr->length;
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
