// SPDX-License-Identifier: MIT
/*
 * The client's handshake after its TCP connect (connect_handshake.h):
 * waiting (usmc_connect_finish() of a blocking or plain non-blocking
 * connection), or as a state machine that never waits (USMC_CONNECT_ASYNC).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "connect_handshake.h"
#include "kcompat.h"
#include "lgr.h"
#include "reason.h"

/* How often a handshake asks again for a link group that a first contact
 * of ours (on another thread) is still setting up. */
#define CHS_LGR_RETRY_MS 2

struct conn_client_hs *connect_hs_new(void)
{
	return calloc(1, sizeof(struct conn_client_hs));
}

void connect_hs_free(struct conn_client_hs *h)
{
	if (!h)
		return;
	smcr_clc_client_abort(&h->cl); /* closed before the handshake ended */
	lgr_unhold_peer(h->held, h->nheld);
	free(h);
}

int connect_hs_wait_tcp(int fd)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLOUT};

		if (poll(&p, 1, -1) >= 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

/*
 * One getsockopt(TCP_INFO), where poll() and SO_ERROR took two, and the
 * order kernel-compat mode needs. The kernel's tcp_finish_connect()
 * (net/ipv4/tcp_input.c) sets ESTABLISHED and then runs the sock_ops
 * program's ACTIVE_ESTABLISHED callback, which records whether the SYN-ACK
 * carried the SMC option, both under the socket's lock. tcp_poll() takes no
 * lock and reports POLLOUT in between, so a poll() then the map lookup could
 * read "no option" for a SYN-ACK that had it, and skip the CLC a kernel
 * server waits for. tcp_get_info() (net/ipv4/tcp.c) reads the state and then
 * takes the lock: a connected state it returns comes with the record done.
 */
int connect_hs_tcp_done(int fd)
{
	uint8_t state; /* struct tcp_info's first byte: tcpi_state */
	socklen_t len = sizeof(state);
	int err = 0;

	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &state, &len))
		return -errno;
	if (state == TCP_SYN_SENT)
		return -EINPROGRESS;
	if (state != TCP_CLOSE)
		return 0; /* connected, perhaps closed by the peer since */
	len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len))
		return -errno;
	return err ? -err : -ENOTCONN;
}

_Static_assert(offsetof(struct tcp_info, tcpi_state) == 0, "tcpi_state leads struct tcp_info");

/* The handshake ends on TCP for @reason, decided by us before any CLC. */
static int chs_tcp(struct conn_client_hs *h, uint32_t reason)
{
	h->hs.reason = reason;
	h->hs.peer_declined = false;
	return SMCR_HS_TCP;
}

/*
 * What decides the mode of an established client connection before any
 * CLC: SMCR_HS_TCP when it is decided (SMC-R disabled, or a kernel-compat
 * server whose SYN-ACK had no SMC option), 0 when the CLC comes next.
 * Without an SMC-R device (or with SMC-R disabled) no CLC byte is ever
 * sent, so the server sees a plain TCP client.
 */
static int chs_precheck(struct conn_client_hs *h)
{
	if (!h->hs.opts->v[USMC_OPT_SMC])
		return chs_tcp(h, USMC_REASON_DISABLED);
	/* kernel-compat: no SMC option on the SYN-ACK, no CLC (kcompat.h) */
	h->kc_peer = kcompat_client_peer(h->kc, h->hs.fd, h->kc_ticket);
	if (h->kc_peer == KC_PEER_NOSMC)
		return chs_tcp(h, USMC_REASON_PEERNOSMC);
	return 0;
}

/*
 * The client socket before the CLC, whose I/O blocks (with its own
 * deadlines). A non-blocking user's calls pass MSG_DONTWAIT, so its socket
 * is made blocking only when a CLC comes next: one that falls back to TCP
 * before any CLC (a kernel-compat server that did not echo the option, as
 * in a storm) keeps O_NONBLOCK and saves the fcntl(). A blocking user's
 * socket was made blocking when the TCP connect ended. Our own socket: its
 * only file status flag is O_NONBLOCK, so one F_SETFL clears it.
 */
static int chs_clc_blocking(const struct conn_client_hs *h)
{
	if (!h->nonblock)
		return 0;
	return fcntl(h->hs.fd, F_SETFL, 0) ? -errno : 0;
}

/* The checks, then the socket made ready for the CLC: 0 when the CLC comes
 * next, else how the handshake ended. */
static int chs_before_clc(struct conn_client_hs *h)
{
	int rc = chs_precheck(h);

	return rc ? rc : chs_clc_blocking(h);
}

/*
 * Our link groups to the server answer its LLC at once while a client
 * handshake runs (lgr_hold_peer(): the server may run a CONFIRM_RKEY flow
 * on one before it answers). The peer's address goes to h->peer, and
 * hs.peer points at it, so the handshake need not ask again.
 */
static void chs_hold(struct conn_client_hs *h)
{
	socklen_t len = sizeof(h->peer);
	struct in_addr peer = {0};

	/* the address connect() was given is the peer's: no getpeername() */
	if (h->addr_len)
		memcpy(&h->peer, h->addr, h->addr_len);
	else if (getpeername(h->hs.fd, (struct sockaddr *)&h->peer, &len))
		return;
	h->hs.peer = &h->peer;
	smcr_addr_ipv4(&h->peer, &peer);
	if (peer.s_addr)
		h->nheld = lgr_hold_peer(h->hs.sctx, peer, h->held, LGR_HOLD_MAX);
}

/* No SMC-R device for the local address: TCP. A kernel-compat server that
 * expects CLC gets a DECLINE. */
static int chs_nodev(struct conn_client_hs *h)
{
	int rc = kcompat_client_decline(h->kc_peer, h->hs.fd, USMC_REASON_NOSMCRDEV);

	return rc ? rc : chs_tcp(h, USMC_REASON_NOSMCRDEV);
}

int connect_hs_decide(struct conn_client_hs *h)
{
	int rc = chs_before_clc(h);

	if (rc)
		return rc;
	chs_hold(h);
	rc = smcr_clc_connect(&h->hs);
	h->hs.peer = NULL; /* h->peer ends with the caller's @h */
	lgr_unhold_peer(h->held, h->nheld);
	h->nheld = 0;
	return rc == SMCR_HS_NODEV ? chs_nodev(h) : rc;
}

int connect_hs_propose(struct conn_client_hs *h)
{
	int rc = chs_before_clc(h);

	if (rc)
		return rc;
	chs_hold(h);
	rc = smcr_clc_propose(&h->hs, &h->cl);
	if (rc == SMCR_HS_NODEV)
		return chs_nodev(h);
	if (rc)
		return rc;
	h->deadline_ms = clock_now_ms() + h->hs.opts->v[USMC_OPT_CLC_TIMEOUT_MS];
	h->state = CHS_ANSWER;
	return SMCR_HS_AWAIT_ANSWER; /* the answer cannot be there yet */
}

int connect_hs_answer(struct conn_client_hs *h)
{
	int rc;

	/* no link group to that server at the PROPOSAL: one may have been set
	 * up since (many connects at once), on which the server runs its
	 * CONFIRM_RKEY before it answers us; hold it as chs_hold() would */
	if (!h->nheld && !h->cl.accepted && h->cl.server.s_addr)
		h->nheld = lgr_hold_peer(h->hs.sctx, h->cl.server, h->held, LGR_HOLD_MAX);
	rc = smcr_clc_answer(&h->hs, &h->cl, false);

	if (rc == SMCR_HS_AWAIT_LGR)
		return SMCR_HS_AWAIT_ANSWER;
	if (rc == SMCR_HS_AWAIT_ANSWER) {
		if (clock_now_ms() < h->deadline_ms)
			return rc;
		rc = -ETIMEDOUT; /* as the waiting handshake's CLC wait */
	}
	h->hs.peer = NULL;
	return rc;
}

int connect_hs_events(const struct conn_client_hs *h, int *timeout_ms)
{
	long left;

	if (!h || h->state == CHS_TCP) {
		*timeout_ms = -1; /* the TCP connect; its own timeout */
		return POLLOUT;
	}
	if (h->cl.accepted && h->cl.phase == CL_SERVER_DECLINE && !h->cl.setup_running) {
		/* the server's DECLINE comes on the socket */
		left = h->cl.due_ms - clock_now_ms();
		*timeout_ms = left > 0 ? (int)left : 0;
		return POLLIN;
	}
	if (h->cl.accepted) {
		/* a first contact of ours sets up the link group, or an LLC
		 * answer comes over RDMA, not on the socket: ask again soon */
		left = h->cl.due_ms - clock_now_ms();
		*timeout_ms =
			left < CHS_LGR_RETRY_MS ? (left > 0 ? (int)left : 0) : CHS_LGR_RETRY_MS;
		return 0;
	}
	left = h->deadline_ms - clock_now_ms();
	*timeout_ms = left > 0 ? (int)left : 0;
	return POLLIN;
}
