/* SPDX-License-Identifier: MIT */
/*
 * CLC messages on the TCP socket: read exactly one message by its length
 * field (never a byte of the application's stream after it), and send one.
 */
#ifndef USMC_CLC_IO_H
#define USMC_CLC_IO_H

#include <stddef.h>
#include <stdint.h>

#include "clc.h"

/*
 * clc_io_recv() - read one CLC message into @buf (@cap bytes) within
 * @timeout_ms. Returns its length and fills @hdr, or -ETIMEDOUT,
 * -ECONNRESET (EOF), a WIRE_E_* code (malformed header, or longer than
 * @cap), or another -errno.
 */
int clc_io_recv(int fd, uint8_t *buf, size_t cap, int timeout_ms, struct clc_hdr *hdr);

/*
 * clc_io_take() - without blocking, read the one CLC message that starts
 * the bytes waiting on @fd, once it is complete. Returns its length (@hdr
 * filled), -EAGAIN while it is not complete (nothing consumed),
 * -ECONNRESET at EOF, a WIRE_E_* code, or another -errno.
 */
int clc_io_take(int fd, uint8_t *buf, size_t cap, struct clc_hdr *hdr);

/*
 * clc_io_take_peeked() - as clc_io_take(), for a caller that already
 * peeked @n bytes into @buf: consumes the message if those bytes hold all
 * of it, else -EAGAIN (or a WIRE_E_* code for a malformed header).
 */
int clc_io_take_peeked(int fd, uint8_t *buf, size_t n, size_t cap, struct clc_hdr *hdr);

/*
 * clc_io_ready() - without blocking or consuming anything: does @fd hold a
 * whole CLC message (at most @cap bytes)? 0 when the reader has something
 * to act on: the whole message, or EOF, an error or a malformed header,
 * which its clc_io_recv() will report. -EAGAIN while it is incomplete;
 * *@need is then the byte count that completes what is known of it (the
 * header first, then the message), for SO_RCVLOWAT.
 */
int clc_io_ready(int fd, size_t cap, size_t *need);

/*
 * clc_io_wait() - wait up to @timeout_ms until clc_io_ready() says 0.
 * Returns 0, -ETIMEDOUT, or another -errno of poll().
 */
int clc_io_wait(int fd, size_t cap, int timeout_ms);

/* clc_io_send() - send @len bytes of one message, all or an error. */
int clc_io_send(int fd, const uint8_t *buf, size_t len);

/* clc_io_send_decline() - a DECLINE of @version carrying @reason. */
int clc_io_send_decline(int fd, uint8_t version, const uint8_t peer_id[CLC_PEER_ID_LEN],
			uint32_t reason);

#endif
