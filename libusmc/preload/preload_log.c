// SPDX-License-Identifier: MIT
/*
 * What the preload tells (docs/preload.md, usmc_run -v): its counters of
 * connections, fallbacks and refused calls, their summary at exit, and
 * the log lines.
 */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "preload.h"

static int verbose;
static int log_fd = 2;

#define NREASONS 32
#define NUNSUP	 16

static atomic_ulong n_conns[2][3]; /* [server][enum usmc_mode] */
static atomic_ulong n_connect_failed, n_forked;
static struct {
	atomic_uint reason; /* 0 = free slot (USMC_REASON_NONE is never counted) */
	atomic_ulong n[2];
} reasons[NREASONS];
static struct {
	_Atomic(const char *) what;
	atomic_ulong n;
} unsup[NUNSUP];

static void vlog(const char *fmt, va_list ap)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "usmc_run[%d] %s: ", (int)my_pid,
			 program_invocation_short_name);

	if (n < 0 || n >= (int)sizeof(line))
		return;
	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	if (n >= (int)sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)!R.write(log_fd, line, (size_t)n); /* one write: lines of processes do not mix */
}

void preload_log(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > verbose || !R.write)
		return;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

void preload_log_level(int level)
{
	verbose = level;
}

void preload_log_to(int fd)
{
	log_fd = fd;
}

void count_reason(uint32_t reason, bool server)
{
	for (int i = 0; i < NREASONS; i++) {
		unsigned int cur = atomic_load(&reasons[i].reason);

		if (cur == 0 && atomic_compare_exchange_strong(&reasons[i].reason, &cur, reason))
			cur = reason;
		if (cur == reason) {
			atomic_fetch_add(&reasons[i].n[server], 1);
			return;
		}
	}
}

static const char *reason_name(uint32_t r)
{
	switch (r) {
	case PR_NO_CONTEXT:
		return "no-context";
	case PR_LISTEN_ADOPT:
		return "listen-adopt";
	case PR_CONNECT_ADOPT:
		return "connect-adopt";
	}
	return usmc_reason_name(r);
}

static void addr_str(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char a[64] = "?";

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)ss;

		inet_ntop(AF_INET, &s->sin_addr, a, sizeof(a));
		snprintf(buf, len, "%s:%u", a, ntohs(s->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)ss;

		inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(s->sin6_port));
	} else {
		snprintf(buf, len, "?");
	}
}

void count_conn(bool server, const struct usmc_conn_info *info, int fd)
{
	char l[80], p[80];

	atomic_fetch_add(&n_conns[server][info->mode <= 2 ? info->mode : 0], 1);
	if (info->mode == USMC_MODE_TCP)
		count_reason(info->reason, server);
	if (verbose < 2)
		return;
	addr_str(&info->local, l, sizeof(l));
	addr_str(&info->peer, p, sizeof(p));
	if (info->mode == USMC_MODE_SMCR)
		preload_log(2, "fd %d %s %s %s %s: SMC-R (link group %#x)", fd,
			    server ? "accepted" : "connected", l, server ? "<-" : "->", p,
			    info->lgr_id);
	else
		preload_log(2, "fd %d %s %s %s %s: TCP, fallback %s%s (%s)", fd,
			    server ? "accepted" : "connected", l, server ? "<-" : "->", p,
			    reason_name(info->reason), info->peer_declined ? " from the peer" : "",
			    usmc_reason_text(info->reason));
}

void count_connect_failed(int err)
{
	atomic_fetch_add(&n_connect_failed, 1);
	preload_log(2, "connect failed: %s", strerror(err));
}

void count_forked(void)
{
	atomic_fetch_add(&n_forked, 1);
}

void count_unsupported(const char *what)
{
	for (int i = 0; i < NUNSUP; i++) {
		const char *cur = atomic_load(&unsup[i].what);

		if (!cur && atomic_compare_exchange_strong(&unsup[i].what, &cur, what))
			cur = what;
		if (cur == what) {
			if (atomic_fetch_add(&unsup[i].n, 1) == 0)
				preload_log(1, "unsupported on an SMC-R connection: %s", what);
			return;
		}
	}
}

void preload_summary(void)
{
	unsigned long a_s = n_conns[1][USMC_MODE_SMCR], a_t = n_conns[1][USMC_MODE_TCP];
	unsigned long c_s = n_conns[0][USMC_MODE_SMCR], c_t = n_conns[0][USMC_MODE_TCP];
	unsigned long failed = n_connect_failed;

	/* a child of fork() that only touched inherited connections has a
	 * summary too: its refused calls */
	if (verbose < 1 || !(a_s + a_t + c_s + c_t + failed + n_forked))
		return;
	preload_log(
		1, "accepted %lu SMC-R, %lu TCP; connected %lu SMC-R, %lu TCP; %lu connects failed",
		a_s, a_t, c_s, c_t, failed);
	for (int i = 0; i < NREASONS; i++) {
		uint32_t r = atomic_load(&reasons[i].reason);

		if (r)
			preload_log(1, "fallback %s: %lu accepted, %lu connected (%s)",
				    reason_name(r), (unsigned long)reasons[i].n[1],
				    (unsigned long)reasons[i].n[0],
				    r >= PR_NO_CONTEXT && r <= PR_CONNECT_ADOPT
					    ? "the preload could not hand it to libusmc"
					    : usmc_reason_text(r));
	}
	for (int i = 0; i < NUNSUP; i++) {
		const char *w = atomic_load(&unsup[i].what);

		if (w)
			preload_log(1, "unsupported %s: %lu calls", w, (unsigned long)unsup[i].n);
	}
	if (n_forked)
		preload_log(1, "data calls on SMC-R connections inherited across fork: %lu",
			    (unsigned long)n_forked);
	if (reaper_overflows())
		preload_log(1, "closes made abortive, %d already in progress: %lu",
			    REAPER_MAX_PENDING, reaper_overflows());
}

/* A child of fork() counts its own connections and calls: the copies of
 * the parent's counters go (its summary at exit is the child's). */
void counters_reset(void)
{
	for (int s = 0; s < 2; s++)
		for (int m = 0; m < 3; m++)
			atomic_store(&n_conns[s][m], 0);
	atomic_store(&n_connect_failed, 0);
	atomic_store(&n_forked, 0);
	for (int i = 0; i < NREASONS; i++) {
		atomic_store(&reasons[i].reason, 0);
		atomic_store(&reasons[i].n[0], 0);
		atomic_store(&reasons[i].n[1], 0);
	}
	for (int i = 0; i < NUNSUP; i++) {
		atomic_store(&unsup[i].what, NULL);
		atomic_store(&unsup[i].n, 0);
	}
}
