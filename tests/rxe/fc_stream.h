/* SPDX-License-Identifier: MIT */
/*
 * Data both ways after a fallback, every byte checked: FC_BYTES from each
 * end to the other at once, each at its offset (tests/common/pattern.h).
 * An end is a usmc connection or a socket (the kernel's AF_SMC, the
 * hostile peer's); a hostile peer still in its handshake takes a whole
 * DECLINE that starts its stream, as an SMC stack would. For
 * test_fc_decline.c; every wait is bounded.
 */
#ifndef USMC_TEST_FC_STREAM_H
#define USMC_TEST_FC_STREAM_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <usmc/usmc.h>

#include "../common/pattern.h"
#include "clc.h"

#define FC_BYTES      (1u << 20)
#define FC_CHUNK      65536
#define FC_IO_WAIT_MS 20000 /* a socket end's read; usmc ends: SO_RCVTIMEO */

struct fc_end {
	const char *name;
	struct usmc_conn *c; /* or */
	int fd;
	struct usmc_ctx *ctx; /* a usmc client's own */
	bool smc_peer_fd;     /* a hostile peer's socket: it takes a leading DECLINE
			       * as an SMC stack in its handshake would */
	uint64_t seed_out;
	int rc;
	char err[160];	  /* what ended its sending */
	char rx_err[200]; /* what ended its receiving */
	bool rx_bad;	  /* it did not read every byte of its peer's */
};

static inline ssize_t fc_send(struct fc_end *e, const void *buf, size_t len)
{
	ssize_t n;

	if (e->c)
		return usmc_send(e->c, buf, len, 0);
	n = send(e->fd, buf, len, MSG_NOSIGNAL);
	return n < 0 ? -errno : n;
}

static inline ssize_t fc_recv(struct fc_end *e, void *buf, size_t len)
{
	struct pollfd p = {.fd = e->fd, .events = POLLIN};
	ssize_t n;

	if (e->c)
		return usmc_recv(e->c, buf, len, 0);
	if (poll(&p, 1, FC_IO_WAIT_MS) != 1)
		return -ETIMEDOUT;
	n = recv(e->fd, buf, len, 0);
	return n < 0 ? -errno : n;
}

static inline int fc_fd(const struct fc_end *e)
{
	return e->c ? usmc_conn_fd(e->c) : e->fd;
}

static inline void *fc_send_all(void *arg)
{
	struct fc_end *e = arg;
	static _Thread_local uint8_t buf[FC_CHUNK];

	for (uint64_t off = 0; off < FC_BYTES;) {
		size_t n = FC_BYTES - off < FC_CHUNK ? (size_t)(FC_BYTES - off) : FC_CHUNK;
		ssize_t r;

		pattern_fill(e->seed_out, off, buf, n);
		r = fc_send(e, buf, n);
		if (r <= 0) {
			e->rc = r ? (int)r : -EPIPE;
			snprintf(e->err, sizeof(e->err), "%s: send at %llu: %s", e->name,
				 (unsigned long long)off, strerror(-e->rc));
			return NULL;
		}
		off += (uint64_t)r;
	}
	return NULL;
}

/* A hostile peer in its handshake takes a whole DECLINE that starts the
 * stream, as an SMC stack would; true if one came. */
static inline bool fc_take_leading_decline(struct fc_end *e)
{
	uint8_t buf[CLC_DECLINE_V2_LEN];
	struct clc_hdr hdr;
	ssize_t n;

	n = recv(e->fd, buf, CLC_HDR_LEN, MSG_PEEK | MSG_WAITALL);
	if (n != CLC_HDR_LEN || clc_hdr_decode(buf, CLC_HDR_LEN, &hdr) || hdr.type != CLC_DECLINE ||
	    hdr.length > sizeof(buf))
		return false;
	return recv(e->fd, buf, hdr.length, MSG_WAITALL) == hdr.length;
}

/* Receive FC_BYTES from @from and check each at its offset; 0, or why not. */
static inline int fc_recv_check(struct fc_end *e, const struct fc_end *from)
{
	static uint8_t buf[FC_CHUNK];
	uint64_t off = 0;

	if (e->smc_peer_fd && fc_take_leading_decline(e))
		printf("  %s: took a DECLINE in its handshake\n", e->name);
	while (off < FC_BYTES) {
		ssize_t r = fc_recv(e, buf, sizeof(buf));
		long long bad;

		if (r <= 0) {
			snprintf(e->rx_err, sizeof(e->rx_err), "%s: %s after %llu of %u bytes",
				 e->name, r ? strerror((int)-r) : "EOF", (unsigned long long)off,
				 FC_BYTES);
			e->rx_bad = true;
			return -EIO;
		}
		bad = pattern_check(from->seed_out, off, buf, (size_t)r);
		if (bad >= 0) {
			snprintf(e->rx_err, sizeof(e->rx_err),
				 "%s: byte %llu is not %s's (it starts %02x %02x %02x %02x%s)",
				 e->name, (unsigned long long)(off + (uint64_t)bad), from->name,
				 buf[0], buf[1], buf[2], buf[3],
				 off == 0 && clc_hdr_starts(buf, 5, CLC_DECLINE)
					 ? ": a DECLINE read as data"
					 : "");
			e->rx_bad = true;
			return -EBADMSG;
		}
		off += (uint64_t)r;
	}
	return 0;
}

/* 1 MiB each way at once; 0 if both ends read every byte of the other's. */
static inline int fc_exchange(struct fc_end *cli, struct fc_end *srv, char *why, size_t whylen)
{
	pthread_t tc, ts;
	int rc, rc2;

	cli->seed_out = 0xc11e;
	srv->seed_out = 0x5e77;
	pthread_create(&tc, NULL, fc_send_all, cli);
	pthread_create(&ts, NULL, fc_send_all, srv);
	rc = fc_recv_check(srv, cli);
	rc2 = fc_recv_check(cli, srv);
	snprintf(why, whylen, "%s", rc ? srv->rx_err : cli->rx_err);
	rc = rc ? rc : rc2;
	if (rc) {
		/* a reader stopped: its sender must not wait for it forever */
		shutdown(fc_fd(cli), SHUT_RDWR);
		shutdown(fc_fd(srv), SHUT_RDWR);
	}
	pthread_join(tc, NULL);
	pthread_join(ts, NULL);
	if (!rc && (cli->rc || srv->rc)) {
		snprintf(why, whylen, "%s", cli->rc ? cli->err : srv->err);
		rc = -EIO;
	}
	return rc;
}

#endif
