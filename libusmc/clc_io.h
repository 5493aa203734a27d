/* SPDX-License-Identifier: MIT */
/*
 * CLC messages on the TCP socket: read exactly one message by its length
 * field (never a byte of the application's stream after it), and send one.
 */
#ifndef USMC_CLC_IO_H
#define USMC_CLC_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clc.h"

/*
 * clc_io_recv() - read one CLC message into @buf (@cap bytes) within
 * @timeout_ms. @waiting is 0, or the length of a whole message the caller
 * saw waiting (clc_io_ready(), clc_io_wait()): it is then taken at once,
 * with one recv(). Otherwise it polls first (the peer answers what we have
 * just sent) and peeks what came. Returns its length and fills @hdr, or
 * -ETIMEDOUT, -ECONNRESET (EOF), a WIRE_E_* code (malformed header, or
 * longer than @cap), or another -errno.
 */
int clc_io_recv(int fd, uint8_t *buf, size_t cap, int timeout_ms, size_t waiting,
		struct clc_hdr *hdr);

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
 * clc_io_peeked() - what a peek of the start of a socket's stream says
 * (pure): @n is what it returned (bytes in @buf, or -EAGAIN for nothing
 * yet, -ECONNRESET for EOF, another -errno). The length of the whole CLC
 * message @buf holds (@hdr filled); -EAGAIN while it is incomplete, with
 * *@need the byte count that completes what is known of it (any byte,
 * the header, then the message), for SO_RCVLOWAT; else @n's error or a
 * WIRE_E_* code (malformed header, longer than @cap).
 */
int clc_io_peeked(const uint8_t *buf, ssize_t n, size_t cap, struct clc_hdr *hdr, size_t *need);

/*
 * clc_io_ready() - without blocking or consuming anything (one peek): does
 * @fd hold a whole CLC message (at most @cap bytes)? Its length when it
 * does; 0 when the reader has something else to act on (EOF, an error, a
 * malformed header: its clc_io_recv() reports it); -EAGAIN while it is
 * incomplete, *@need as clc_io_peeked() says.
 */
int clc_io_ready(int fd, size_t cap, size_t *need);

/*
 * clc_io_wait() - wait up to @timeout_ms until clc_io_ready() would not
 * say -EAGAIN; poll first, as clc_io_recv(). Returns the whole message's
 * length (for clc_io_recv()'s @waiting), 0 (something else for the reader)
 * or -ETIMEDOUT.
 */
int clc_io_wait(int fd, size_t cap, int timeout_ms);

/*
 * clc_io_read() - without blocking or polling, go on reading the one CLC
 * message whose first *@have bytes are in @buf (a carry-over buffer of
 * @cap bytes, *@have 0 before its first byte): a recv() of what is still
 * missing, never a byte past the message. Until the header is known it
 * asks for @min bytes, the shortest message the peer may send at that
 * point (a header names a length of at least its type's minimum, so a
 * well-formed peer's next message is never overrun); then for the rest
 * the header names. Returns the whole message's length (@hdr filled; the
 * caller resets *@have before the next message), -EAGAIN while it is
 * incomplete (what came is kept in @buf), -ECONNRESET at EOF, a WIRE_E_*
 * code (malformed header, longer than @cap), or another -errno.
 */
int clc_io_read(int fd, uint8_t *buf, size_t cap, size_t *have, size_t min, struct clc_hdr *hdr);

/*
 * clc_io_await_decline() - wait up to @timeout_ms for a DECLINE at the
 * start of @fd's stream and take it, never a byte of anything else: the
 * first bytes that cannot begin a whole SMC-R DECLINE (at most @cap bytes)
 * end the wait at once and stay for the application. Returns the
 * DECLINE's length (@buf, @hdr filled), 0 when the stream starts with
 * something else or ended (EOF), -ETIMEDOUT, or another -errno.
 */
int clc_io_await_decline(int fd, uint8_t *buf, size_t cap, int timeout_ms, struct clc_hdr *hdr);

/* clc_io_send() - send @len bytes of one message, all or an error. */
int clc_io_send(int fd, const uint8_t *buf, size_t len);

/* clc_io_send_decline() - a DECLINE of @version carrying @reason. */
int clc_io_send_decline(int fd, uint8_t version, const uint8_t peer_id[CLC_PEER_ID_LEN],
			uint32_t reason);

#endif
