// SPDX-License-Identifier: MIT
/*
 * What kernel-compat mode (kcompat.c) needs without BPF: its pure helpers,
 * unit-tested (test_kcompat), and the client's and the listener's DECLINE,
 * which libusmc speaks whether or not the library was built with libbpf.
 */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "clc.h"
#include "clc_io.h"
#include "kcompat.h"

/* ---- pure helpers ------------------------------------------------------ */

int kcompat_mode_parse(const char *s, enum kc_mode *out)
{
	if (!s || !strcmp(s, "auto"))
		*out = KC_MODE_AUTO;
	else if (!strcmp(s, "1"))
		*out = KC_MODE_ON;
	else if (!strcmp(s, "0"))
		*out = KC_MODE_OFF;
	else
		return -EINVAL;
	return 0;
}

int kc_listen_key_make(uint64_t netns_cookie, const struct sockaddr *addr, struct kc_listen_key *k)
{
	memset(k, 0, sizeof(*k));
	k->netns_cookie = netns_cookie;
	if (addr->sa_family == AF_INET)
		k->port = ntohs(((const struct sockaddr_in *)addr)->sin_port);
	else if (addr->sa_family == AF_INET6)
		k->port = ntohs(((const struct sockaddr_in6 *)addr)->sin6_port);
	else
		return -EAFNOSUPPORT;
	return k->port ? 0 : -EINVAL; /* port 0: not bound yet */
}

int kc_estab_deduce(const uint64_t established[KC_ESTAB_KINDS],
		    const uint64_t taken[KC_ESTAB_KINDS])
{
	int kind = -1;

	for (int k = 0; k < KC_ESTAB_KINDS; k++) {
		if (established[k] <= taken[k])
			continue;
		if (kind >= 0)
			return -1; /* two kinds pending: which one is this? */
		kind = k;
	}
	return kind;
}

enum kc_peer kc_peer_from_flags(bool found, uint32_t flags)
{
	/* the program never ran for the socket: the old rule applies */
	if (!found || !(flags & KC_SOCK_SEEN))
		return KC_PEER_UNKNOWN;
	if (flags & KC_SOCK_PEER_SMC)
		return KC_PEER_SMC;
	return (flags & KC_SOCK_CONGESTED) ? KC_PEER_CONGESTED : KC_PEER_NOSMC;
}

/* ---- client decline (needs no BPF) ------------------------------------- */

int kcompat_client_decline(enum kc_peer peer, int fd, uint32_t reason)
{
	if (peer != KC_PEER_SMC)
		return 0;
	/* before an ACCEPT a Linux client without ISMv2 declines with v1 */
	return clc_io_send_decline(fd, CLC_V1, NULL, reason);
}

_Static_assert(KC_OPT_MAGIC == CLC_EYECATCHER_SMCR, "SMC option magic is \"SMCR\" in EBCDIC");

int kcompat_take_decline(enum kc_peer peer, int fd, uint8_t *buf, ssize_t n, uint32_t *reason)
{
	struct clc_decline d;
	struct clc_hdr hdr;
	int rc;

	if (peer != KC_PEER_SMC)
		return 0;
	if (n <= 0) /* nothing yet, EOF or an error: the probe decides */
		return 0;
	if (!clc_hdr_starts(buf, (size_t)n, CLC_DECLINE))
		return 0;
	/* the longest DECLINE is the most we may take */
	rc = clc_io_take_peeked(fd, buf, (size_t)n, CLC_DECLINE_V2_LEN, &hdr);
	if (rc < 0)
		return rc;
	rc = clc_decline_decode(buf, (size_t)rc, &d);
	if (rc)
		return rc;
	*reason = d.diagnosis;
	return 1;
}
