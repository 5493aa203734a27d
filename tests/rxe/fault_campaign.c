// SPDX-License-Identifier: MIT
/*
 * The fault campaign: faults on the wire and in the peers,
 * between the soft-RoCE guest's two hosts (tests/rxe/vm-run.sh --setup two
 * --smc, root), for usmc <-> usmc and usmc <-> the kernel's SMC-R in each
 * role. Every byte is checked at its offset (tests/common/pattern.h, through
 * fault_flow.h); every connection completes intact or fails with an error
 * within a stated bound; what usmc_conn_info, the counters and the kernel's
 * smc_diag say is asserted. docs/faults.md has the guarantees and bounds.
 *
 *   fault_campaign <smc_kctl> <scenario> [args]
 *
 *   lossy <fault> <pairing>       netem <fault> on both veths while
 *                                 FAULT_CONNS (100) connections move
 *                                 FAULT_BYTES (16 MiB) each way at once:
 *                                 every connection must complete intact;
 *                                 FAULT_AFTER_SETUP=1: netem only once the
 *                                 connections are up (the data path alone:
 *                                 a kernel end's REG_MR runs at setup)
 *   linkdown <pairing>            host A's netdev down for FAULT_DOWN_S (5)
 *                                 while streams run and idle connections
 *                                 wait; new connections during and after
 *   kill <pairing> <victim> <step>  the victim's process is SIGKILLed at
 *                                 <step>; the survivor ends within a bound,
 *                                 with the right error, and leaks nothing
 *   soak <pairing> <survivor>     FAULT_CYCLES (10000) connect / transfer /
 *                                 close cycles against short-lived peer
 *                                 processes, every FAULT_KILL_EVERY-th (25)
 *                                 peer SIGKILLed at a random point; fds, RSS,
 *                                 link groups, buffers and QPs back to baseline
 *
 * fault: none loss1 loss5 dup2 reorder corrupt1
 * pairing (client-server): u2u, k2u (kernel client, usmc server), u2k
 *   (usmc client, kernel server), k2k (the kernel on both ends: the
 *   reference throughput; lossy only)
 * victim / survivor: client | server
 * step: proposal accept confirm confirm_link (the handshake), data (in
 *   flight both ways), close (during a lingering close), closed (right
 *   after a clean close)
 *
 * Each run prints one line "RESULT key=value ..." that
 * tests/rxe/run-fault-campaign.sh gathers into the campaign's table.
 * Exit status 0 only if nothing was lost, corrupted, hung or leaked and
 * every assertion held.
 *
 * The handshake steps are found without a hook in the library: the program
 * is linked with -Wl,--wrap for the CLC send/receive and the LLC
 * CONFIRM_LINK calls of libusmc's static archive (see tests/CMakeLists.txt);
 * the wrappers kill this process (a usmc victim) or the kernel peer's
 * process (a usmc survivor facing a kernel victim) at the armed step.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"
#include "clc.h"
#include "clc_io.h"
#include "conn.h"
#include "ctx.h"
#include "fault_flow.h"
#include "fault_net.h"
#include "kernel_peer.h"
#include "rxe_regmr_watch.h"
#include "lgr.h"
#include "llc.h"
#include "log.h"
#include "lgr_dump.h"
#include "smcr_common.h"
#include "smcr_conn.h"
#include "smcr_llc.h"

#define UEID	      "USMC-FAULT-CAMPAIGN"
#define TESTLINK_PATH "/proc/sys/net/smc/smcr_testlink_time"
#define MAXLINKS_PATH "/proc/sys/net/smc/smcr_max_links_per_lgr"
#define MAX_CONNS     512

static const char *kctl, *host_a, *host_b;
static const char *self_exe;

/* ==== results ========================================================= */

/* One line for the table (run-fault-campaign.sh); the last word wins. */
static char result[1024];

static void __attribute__((format(printf, 1, 2))) res_add(const char *fmt, ...)
{
	size_t n = strlen(result);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(result + n, sizeof(result) - n, fmt, ap);
	va_end(ap);
}

static void res_print(void)
{
	printf("RESULT %s\n", result);
	fflush(stdout);
}

/* ==== pairings ======================================================== */

enum side { SIDE_USMC, SIDE_KERNEL };

struct pairing {
	const char *name;
	enum side client, server;
};

static const struct pairing pairings[] = {
	{"u2u", SIDE_USMC, SIDE_USMC},
	{"k2u", SIDE_KERNEL, SIDE_USMC},
	{"u2k", SIDE_USMC, SIDE_KERNEL},
	{"k2k", SIDE_KERNEL, SIDE_KERNEL},
};

static const struct pairing *pairing_of(const char *name)
{
	for (size_t i = 0; i < sizeof(pairings) / sizeof(pairings[0]); i++)
		if (!strcmp(pairings[i].name, name))
			return &pairings[i];
	die("unknown pairing '%s' (u2u k2u u2k k2k)", name);
}

/* A usmc context for the campaign: kernel-compat mode required (the SYN
 * option makes a lost PROPOSAL segment wait for TCP's retransmission
 * instead of the probe's 100 ms), one UEID with the kernel. */
static struct usmc_ctx *make_ctx(void)
{
	struct usmc_ctx *ctx;
	int rc;

	setenv("USMC_KERNEL_COMPAT", "1", 1);
	rc = usmc_ctx_create(&ctx);
	unsetenv("USMC_KERNEL_COMPAT");
	CHECK(!rc, "usmc_ctx_create (kernel-compat): %s", usmc_strerror(rc));
	CHECK(!usmc_ctx_set_ueid(ctx, UEID), "UEID");
	return ctx;
}

static void kernel_ueid(void)
{
	CHECK(!fnet_sh("'%s' ueid flush >/dev/null && '%s' ueid add %s >/dev/null", kctl, kctl,
		       UEID),
	      "kernel UEID");
}

static uint16_t port_of(const struct sockaddr_storage *ss)
{
	return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

/* The server of a pairing in this process. */
struct server {
	enum side side;
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	int lfd;
	int port;
};

static void server_open(struct server *s, enum side side, struct usmc_ctx *ctx)
{
	memset(s, 0, sizeof(*s));
	s->side = side;
	s->lfd = -1;
	if (side == SIDE_USMC) {
		struct sockaddr_in b = kpeer_addr(host_b, 0);
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int rc;

		s->ctx = ctx;
		rc = usmc_listen(ctx, (struct sockaddr *)&b, sizeof(b), 1024, USMC_LISTEN_NONBLOCK,
				 &s->l);
		CHECK(!rc, "usmc_listen: %s", usmc_strerror(rc));
		CHECK(!usmc_listener_addr(s->l, &ss, &len), "listener addr");
		s->port = port_of(&ss);
	} else {
		s->lfd = kpeer_listen(host_b, 0, 1024);
		CHECK(s->lfd >= 0, "kernel listen: %s", strerror(-s->lfd));
		fcntl(s->lfd, F_SETFL, fcntl(s->lfd, F_GETFL) | O_NONBLOCK);
		s->port = kpeer_local_port(s->lfd);
	}
}

static void server_close(struct server *s)
{
	if (s->l)
		CHECK(!usmc_listener_close(s->l), "listener close");
	if (s->lfd >= 0)
		close(s->lfd);
	s->l = NULL;
	s->lfd = -1;
}

/* One accepted connection within @timeout_s: 0 and the end's fd or conn,
 * or -ETIMEDOUT. @peer_port: the client's port. */
static int server_accept(struct server *s, double timeout_s, int *fd, struct usmc_conn **c,
			 int *peer_port)
{
	double deadline = mono_s() + timeout_s;

	*fd = -1;
	*c = NULL;
	for (;;) {
		struct pollfd p = {.events = POLLIN};
		double left = deadline - mono_s();

		if (s->side == SIDE_USMC) {
			struct usmc_conn_info info;
			int rc = usmc_accept(s->l, USMC_NONBLOCK, c);

			if (!rc) {
				CHECK(!usmc_conn_info(*c, &info), "conn info");
				*peer_port = port_of(&info.peer);
				return 0;
			}
			CHECK(rc == -EAGAIN, "usmc_accept: %s", usmc_strerror(rc));
			p.fd = usmc_listener_fd(s->l);
		} else {
			struct sockaddr_storage ss;
			socklen_t len = sizeof(ss);

			/* accept's address, not getpeername(): a client may have
			 * reset by now, and then only accept still names it */
			*fd = accept4(s->lfd, (struct sockaddr *)&ss, &len,
				      SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (*fd >= 0) {
				*peer_port = port_of(&ss);
				return 0;
			}
			CHECK(errno == EAGAIN || errno == ECONNABORTED, "accept: %s",
			      strerror(errno));
			p.fd = s->lfd;
		}
		if (left <= 0)
			return -ETIMEDOUT;
		poll(&p, 1, (int)(left * 1000) + 1);
	}
}

/*
 * Accepts and closes what a killed peer left in our listener (its
 * handshakes end within their bounds, some as connections queued for
 * accept): the application's to take, not the library's to drop (Linux
 * keeps such sockets in its accept queue too). Waits up to @bound_s for
 * nothing to be in handshake or queued; returns how many it closed, -1 if
 * the listener still held some then.
 */
static int server_drain(struct server *s, double bound_s)
{
	double until = mono_s() + bound_s;
	int n = 0;

	for (;;) {
		struct usmc_listener_stats ls;
		struct usmc_conn *c;

		while (!usmc_accept(s->l, USMC_NONBLOCK, &c))
			usmc_close(c), n++;
		usmc_listener_stats(s->l, &ls);
		if (!ls.in_handshake && !ls.queued)
			return n;
		if (mono_s() > until)
			return -1;
		usleep(50000);
	}
}

/* A client connection to @port: 0 and the fd or conn, else the error. */
static int client_connect(enum side side, struct usmc_ctx *ctx, int port, int *fd,
			  struct usmc_conn **c, int *local_port)
{
	*fd = -1;
	*c = NULL;
	if (side == SIDE_USMC) {
		struct sockaddr_in b = kpeer_addr(host_b, port);
		struct usmc_conn_info info;
		int rc = usmc_connect(ctx, (struct sockaddr *)&b, sizeof(b), USMC_NONBLOCK, c);

		if (rc)
			return rc;
		/* non-blocking for the flow loop; the handshake runs here, bounded */
		while ((rc = usmc_connect_finish(*c)) == -EINPROGRESS) {
			struct pollfd p = {.fd = usmc_conn_fd(*c), .events = POLLOUT};

			poll(&p, 1, 1000);
		}
		if (rc) {
			usmc_close(*c);
			*c = NULL;
			return rc;
		}
		CHECK(!usmc_conn_info(*c, &info), "conn info");
		*local_port = port_of(&info.local);
		return 0;
	}
	*fd = kpeer_connect(host_a, host_b, port);
	if (*fd < 0)
		return *fd;
	fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) | O_NONBLOCK);
	*local_port = kpeer_local_port(*fd);
	return 0;
}

/* ==== what the kernel says ============================================ */

#define KDIAG_MAX 4096

struct kdiag_line {
	int lport, pport;
	char local[24], peer[24];
	char mode[16], state[20], reason[24];
};

/* One smc_diag dump; returns the number of sockets. */
static int kdiag_dump(struct kdiag_line *out, int max)
{
	char cmd[512], line[1024];
	int n = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "'%s' diag", kctl);
	f = popen(cmd, "r");
	CHECK(f, "popen smc_kctl");
	while (fgets(line, sizeof(line), f)) {
		struct kdiag_line d = {0};
		char *s = strstr(line, "state="), *m = strstr(line, "mode="),
		     *lo = strstr(line, "local="), *pe = strstr(line, "peer="),
		     *fb = strstr(line, "fallback=");

		if (!s || !m || !lo || !pe)
			continue;
		sscanf(s, "state=%19s", d.state);
		sscanf(m, "mode=%15s", d.mode);
		sscanf(lo, "local=%23[^:]:%d", d.local, &d.lport);
		sscanf(pe, "peer=%23[^:]:%d", d.peer, &d.pport);
		if (fb) {
			char *p = strchr(fb, '(');

			if (p)
				sscanf(p + 1, "%23[^)]", d.reason);
		}
		if (n < max)
			out[n] = d;
		n++;
	}
	pclose(f);
	return n < max ? n : max;
}

/* flow_kernel_detail: the smc_diag cursors of kernel socket @fd, found by
 * its two ports, so that a hang report says what the kernel last heard
 * from its peer (rx_*) and what it will tell it next (tx_*). */
static void kdiag_cursors(int fd, char *out, size_t cap)
{
	struct sockaddr_in self, peer;
	socklen_t ls = sizeof(self), lp = sizeof(peer);
	char cmd[512], line[1024], lpat[32], ppat[32];
	FILE *f;

	if (getsockname(fd, (struct sockaddr *)&self, &ls) ||
	    getpeername(fd, (struct sockaddr *)&peer, &lp))
		return;
	snprintf(lpat, sizeof(lpat), ":%u peer=", ntohs(self.sin_port));
	snprintf(ppat, sizeof(ppat), ":%u fallback=", ntohs(peer.sin_port));
	snprintf(cmd, sizeof(cmd), "'%s' diag", kctl);
	f = popen(cmd, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *t = strstr(line, " token=");

		if (t && strstr(line, lpat) && strstr(line, ppat)) {
			t[strcspn(t, "\n")] = 0;
			snprintf(out, cap, ";%s", t);
			break;
		}
	}
	pclose(f);
}

/* The kernel socket with local port @lport (and peer port @pport, if > 0). */
static const struct kdiag_line *kdiag_find(const struct kdiag_line *d, int n, int lport, int pport)
{
	for (int i = 0; i < n; i++)
		if (d[i].lport == lport && (pport <= 0 || d[i].pport == pport))
			return &d[i];
	return NULL;
}

/* A kernel socket other than the listener on local port @port. */
static bool kernel_port_busy(int port)
{
	static struct kdiag_line d[KDIAG_MAX];
	int nd = kdiag_dump(d, KDIAG_MAX);

	for (int i = 0; i < nd; i++)
		if (d[i].lport == port && strcmp(d[i].state, "LISTEN"))
			return true;
	return false;
}

/* The kernel's sysctls a run changes, each restored at exit to the value
 * it had before the first change. */
enum ksysctl_id { KS_TESTLINK, KS_MAXLINKS, KS_COUNT };
static struct {
	const char *path;
	long saved; /* -1: not changed */
} ksysctl[KS_COUNT] = {[KS_TESTLINK] = {TESTLINK_PATH, -1}, [KS_MAXLINKS] = {MAXLINKS_PATH, -1}};

static void ksysctl_restore(void)
{
	for (int i = 0; i < KS_COUNT; i++)
		if (ksysctl[i].saved >= 0)
			kpeer_sysctl_set(ksysctl[i].path, ksysctl[i].saved);
}

/* Sets sysctl @i to @value for the rest of the run. */
static void ksysctl_set(enum ksysctl_id i, long value)
{
	static bool restore_at_exit;

	if (ksysctl[i].saved < 0) {
		CHECK(!kpeer_sysctl_get(ksysctl[i].path, &ksysctl[i].saved), "read %s",
		      ksysctl[i].path);
		if (!restore_at_exit)
			atexit(ksysctl_restore);
		restore_at_exit = true;
	}
	CHECK(!kpeer_sysctl_set(ksysctl[i].path, value), "set %s", ksysctl[i].path);
}

/* The kernel's TEST_LINK idle time (read when a link is made). */
static void kernel_testlink(long seconds)
{
	ksysctl_set(KS_TESTLINK, seconds);
}

/*
 * The kernel's links per link group (read when a link group is made; 2 by
 * default). Set to 1 only where the kernel survives a usmc peer that is
 * SIGKILLed, to keep clear of a deadlock of the kernel's (Linux 6.12
 * net/smc with rxe), not of usmc's: with two links, the kernel survivor's
 * close() waits in smc_conn_free() -> smc_cdc_wait_pend_tx_wr() for a CDC
 * send on a link to the dead peer, holding the socket lock; the kernel's
 * own smc_lgr_terminate_work waits for that lock; smc_link_down_work()
 * returns early once the link group is off the list, so that link is
 * never moved to error; and rxe takes retry_cnt 7 as "retry forever", so
 * the send never fails either. The guest's kernel hangs in D state
 * (docs/faults.md, docs/interop.md). With the kernel at one link the
 * same scenario passed 5 runs of 5 (2026-12-05, usmc at 2 links).
 */
static void kernel_max_links(long n)
{
	ksysctl_set(KS_MAXLINKS, n);
}

/* Kernel link groups made since @before (see kernel_peer.h). */
static int klgr_new(const struct klgr *before, int nb, struct klgr *fresh)
{
	struct klgr now[KPEER_MAX_LGRS];
	int nn = kpeer_lgrs(kctl, now, KPEER_MAX_LGRS);

	CHECK(nn >= 0, "smc_kctl lgr");
	if (nn > KPEER_MAX_LGRS)
		nn = KPEER_MAX_LGRS;
	return kpeer_new_lgrs(before, nb, now, nn, fresh);
}

/* ==== what usmc says ================================================== */

#define FD_SNAP_MAX 256

/* What each descriptor points to (for a leak report). */
static void fd_snapshot(char snap[FD_SNAP_MAX][64])
{
	for (int i = 0; i < FD_SNAP_MAX; i++) {
		char path[64];
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", i);
		n = readlink(path, snap[i], 63);
		snap[i][n > 0 ? n : 0] = 0;
	}
}

static void fd_diff(char base[FD_SNAP_MAX][64])
{
	static char now[FD_SNAP_MAX][64];

	fd_snapshot(now);
	for (int i = 0; i < FD_SNAP_MAX; i++)
		if (strcmp(base[i], now[i]))
			printf("  fd %d: was '%s', now '%s'\n", i, base[i], now[i]);
}

/*
 * Resident memory once the allocator has given back what it holds free:
 * with a thread per connection and handshake workers, glibc keeps up to
 * 8 arenas per CPU, and pages freed inside them stay resident until
 * trimmed. What a trim cannot give back is memory in use (a leak) or
 * pinned by fragmentation; heap_inuse_kib() tells the two apart.
 */
static long rss_kib(void)
{
	long pages = 0, rss = 0;
	FILE *f;

	malloc_trim(0);
	f = fopen("/proc/self/statm", "r");

	CHECK(f && fscanf(f, "%ld %ld", &pages, &rss) == 2, "statm");
	fclose(f);
	return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Bytes the program's malloc() calls hold now, all arenas. */
static long heap_inuse_kib(void)
{
	struct mallinfo2 mi = mallinfo2();

	return (long)((mi.uordblks + mi.hblkhd) / 1024);
}

/* A context's link groups: how many, how many connections and claimed
 * buffers they hold. */
struct lgr_census {
	int lgrs, dead, conns, bufs;
};

static struct lgr_census census(struct usmc_ctx *ctx)
{
	static struct lgr_info info[64];
	struct lgr_census c = {0};
	int n = lgr_info_all(&ctx->rdma, info, 64);

	c.lgrs = atomic_load(&ctx->rdma.lgrs_open); /* unpublished ones too */
	for (int i = 0; i < n && i < 64; i++) {
		c.dead += info[i].state == LGR_DEAD;
		c.conns += info[i].nconns;
		for (int k = 0; k < SMC_BUF_CLASSES; k++)
			c.bufs += (int)(info[i].rmbs[k].in_use + info[i].sndbufs[k].in_use);
	}
	return c;
}

/* Waits up to @bound_s for @ctx to hold at most @lgrs link groups, none
 * with a connection or a claimed buffer; returns the seconds it took or -1. */
static double await_census(struct usmc_ctx *ctx, int lgrs, double bound_s, struct lgr_census *out)
{
	double t0 = mono_s();

	for (;;) {
		*out = census(ctx);
		if (out->lgrs <= lgrs && !out->conns && !out->bufs)
			return mono_s() - t0;
		if (mono_s() - t0 > bound_s)
			return -1;
		usleep(100000);
	}
}

/* ==== handshake steps (the --wrap hooks) ============================== */

enum step {
	STEP_NONE,
	STEP_PROPOSAL,
	STEP_ACCEPT,
	STEP_CONFIRM,
	STEP_CONFIRM_LINK,
	STEP_DATA,
	STEP_CLOSE,
	STEP_CLOSED,
	STEP_COUNT_
};

static const char *step_names[] = {"none",	   "proposal", "accept", "confirm",
				   "confirm_link", "data",     "close",	 "closed"};

static enum step step_of(const char *s)
{
	for (int i = 0; i < STEP_COUNT_; i++)
		if (!strcmp(step_names[i], s))
			return (enum step)i;
	die("unknown step '%s'", s);
}

static _Atomic int hook_step;  /* armed step, STEP_NONE: off */
static atomic_bool hook_self;  /* kill this process (a usmc victim) */
static _Atomic pid_t hook_pid; /* else kill that one (a kernel victim) */
static atomic_bool hook_fired;
static _Atomic double hook_t; /* when the peer was killed */

static void hook(enum step s)
{
	pid_t pid;

	if (atomic_load(&hook_step) != (int)s || atomic_exchange(&hook_fired, true))
		return;
	if (atomic_load(&hook_self)) {
		raise(SIGKILL);
		for (;;)
			pause();
	}
	while (!(pid = atomic_load(&hook_pid))) /* set right after the fork */
		usleep(1000);
	kill(pid, SIGKILL);
	atomic_store(&hook_t, mono_s());
}

int __real_clc_io_send(int fd, const uint8_t *buf, size_t len);
int __wrap_clc_io_send(int fd, const uint8_t *buf, size_t len);
int __wrap_clc_io_send(int fd, const uint8_t *buf, size_t len)
{
	uint8_t type = len > 4 ? buf[4] : 0;
	int rc;

	if (type == CLC_ACCEPT)
		hook(STEP_PROPOSAL); /* server: the PROPOSAL came, no answer */
	rc = __real_clc_io_send(fd, buf, len);
	if (type == CLC_PROPOSAL)
		hook(STEP_PROPOSAL);
	else if (type == CLC_ACCEPT)
		hook(STEP_ACCEPT);
	else if (type == CLC_CONFIRM)
		hook(STEP_CONFIRM);
	return rc;
}

int __real_clc_io_recv(int fd, uint8_t *buf, size_t cap, int timeout_ms, size_t waiting,
		       struct clc_hdr *hdr);
int __wrap_clc_io_recv(int fd, uint8_t *buf, size_t cap, int timeout_ms, size_t waiting,
		       struct clc_hdr *hdr);
int __wrap_clc_io_recv(int fd, uint8_t *buf, size_t cap, int timeout_ms, size_t waiting,
		       struct clc_hdr *hdr)
{
	int rc = __real_clc_io_recv(fd, buf, cap, timeout_ms, waiting, hdr);

	if (rc > 0 && hdr->type == CLC_ACCEPT)
		hook(STEP_ACCEPT);
	else if (rc > 0 && hdr->type == CLC_CONFIRM)
		hook(STEP_CONFIRM);
	return rc;
}

/* client: the server's CONFIRM_LINK request came; the answer is not sent */
int __real_smcr_llc_wait_confirm_link(struct lgr *lgr, int timeout_ms, struct llc_msg *req);
int __wrap_smcr_llc_wait_confirm_link(struct lgr *lgr, int timeout_ms, struct llc_msg *req);
int __wrap_smcr_llc_wait_confirm_link(struct lgr *lgr, int timeout_ms, struct llc_msg *req)
{
	int rc = __real_smcr_llc_wait_confirm_link(lgr, timeout_ms, req);

	if (!rc)
		hook(STEP_CONFIRM_LINK);
	return rc;
}

/* server: the CONFIRM_LINK request is on the wire, the answer not in */
int __real_smcr_llc_flow_start(struct lgr *lgr, const struct llc_msg *req, uint32_t *ticket);
int __wrap_smcr_llc_flow_start(struct lgr *lgr, const struct llc_msg *req, uint32_t *ticket);
int __wrap_smcr_llc_flow_start(struct lgr *lgr, const struct llc_msg *req, uint32_t *ticket)
{
	if (req->type == LLC_CONFIRM_LINK && atomic_load(&hook_step) == STEP_CONFIRM_LINK) {
		if (atomic_load(&hook_self))
			smcr_llc_send(lgr, req);
		hook(STEP_CONFIRM_LINK);
	}
	return __real_smcr_llc_flow_start(lgr, req, ticket);
}

/* ==== peer processes ================================================== */

/*
 * A peer runs as a child: this program again (exec: a fresh process, no
 * verbs state shared), "peer <side> <role> <step> <port> <bytes> <cycles>
 * <seed>", talking to its parent on fd 3 (it writes) and fd 4 (it reads).
 */
struct child {
	pid_t pid;
	int rd, wr; /* the parent's ends */
	int status;
	double t_dead; /* mono_s() when it was reaped */
	pthread_t reaper;
	atomic_bool reaped;
	bool killed_by_us; /* child_kill() found it alive */
};

static void *reaper(void *arg)
{
	struct child *ch = arg;

	while (waitpid(ch->pid, &ch->status, 0) < 0 && errno == EINTR)
		;
	ch->t_dead = mono_s();
	atomic_store(&ch->reaped, true);
	return NULL;
}

static void child_spawn(struct child *ch, enum side side, bool server, enum step step, int port,
			uint64_t bytes, long cycles, uint64_t seed)
{
	int up[2], down[2];
	char a[8][32];

	memset(ch, 0, sizeof(*ch));
	CHECK(!pipe2(up, O_CLOEXEC) && !pipe2(down, O_CLOEXEC), "pipe");
	snprintf(a[0], 32, "%s", side == SIDE_USMC ? "u" : "k");
	snprintf(a[1], 32, "%s", server ? "server" : "client");
	snprintf(a[2], 32, "%s", step_names[step]);
	snprintf(a[3], 32, "%d", port);
	snprintf(a[4], 32, "%llu", (unsigned long long)bytes);
	snprintf(a[5], 32, "%ld", cycles);
	snprintf(a[6], 32, "%llu", (unsigned long long)seed);
	fflush(stdout);
	ch->pid = fork();
	CHECK(ch->pid >= 0, "fork");
	if (!ch->pid) {
		dup2(up[1], 3);
		dup2(down[0], 4);
		execl(self_exe, self_exe, kctl, "peer", a[0], a[1], a[2], a[3], a[4], a[5], a[6],
		      (char *)NULL);
		_exit(127);
	}
	close(up[1]);
	close(down[0]);
	ch->rd = up[0];
	ch->wr = down[1];
	pthread_create(&ch->reaper, NULL, reaper, ch);
}

/* Reads one int from the child within @timeout_s; false on EOF/timeout. */
static bool child_read(struct child *ch, int *v, double timeout_s)
{
	struct pollfd p = {.fd = ch->rd, .events = POLLIN};

	if (poll(&p, 1, (int)(timeout_s * 1000)) != 1)
		return false;
	return read(ch->rd, v, sizeof(*v)) == (ssize_t)sizeof(*v);
}

static void child_kill(struct child *ch)
{
	if (!atomic_load(&ch->reaped)) {
		ch->killed_by_us = true;
		kill(ch->pid, SIGKILL);
	}
}

/* Waits for the child to be gone; its status. */
static int child_join(struct child *ch)
{
	pthread_join(ch->reaper, NULL);
	close(ch->rd);
	close(ch->wr);
	return ch->status;
}

static bool killed_by_sigkill(int status)
{
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

/* ---- the peer side (runs in the child) ---- */

static void peer_tell(int v)
{
	if (write(3, &v, sizeof(v)) != sizeof(v))
		_exit(5);
}

/* Blocking I/O of one cycle on an end (fd or conn) in the child. */
static ssize_t peer_io(int fd, struct usmc_conn *c, void *buf, size_t n, bool send_it)
{
	ssize_t r;

	if (c)
		return send_it ? usmc_send(c, buf, n, 0) : usmc_recv(c, buf, n, 0);
	r = send_it ? send(fd, buf, n, MSG_NOSIGNAL) : recv(fd, buf, n, 0);
	return r < 0 ? -errno : r;
}

static void peer_close(int fd, struct usmc_conn *c)
{
	if (c)
		usmc_close(c);
	else
		close(fd);
}

static int peer_send_all(int fd, struct usmc_conn *c, uint64_t seed, uint64_t bytes)
{
	static uint8_t buf[FLOW_CHUNK];

	for (uint64_t off = 0; off < bytes;) {
		size_t n = bytes - off < FLOW_CHUNK ? (size_t)(bytes - off) : FLOW_CHUNK;
		ssize_t r;

		pattern_fill(seed, off, buf, n);
		r = peer_io(fd, c, buf, n, true);
		if (r <= 0)
			return -1;
		off += (uint64_t)r;
	}
	return 0;
}

static int peer_recv_all(int fd, struct usmc_conn *c, uint64_t seed, uint64_t bytes)
{
	static uint8_t buf[FLOW_CHUNK];

	for (uint64_t off = 0; off < bytes;) {
		size_t n = bytes - off < FLOW_CHUNK ? (size_t)(bytes - off) : FLOW_CHUNK;
		ssize_t r = peer_io(fd, c, buf, n, false);

		if (r <= 0 || pattern_check(seed, off, buf, (size_t)r) >= 0)
			return -1;
		off += (uint64_t)r;
	}
	return 0;
}

/*
 * One soak cycle's protocol, either role: the client sends @bytes of
 * seed s, shuts down; the server reads them and EOF, sends @bytes of s+1,
 * closes; the client reads them and EOF, closes. Seeds come from the
 * client's port, so both ends know them.
 */
static uint64_t cycle_seed(int client_port, uint64_t base)
{
	return base * 131071u + (uint64_t)client_port * 2;
}

/* A child's part of a step scenario or of soak cycles; never returns. */
static void __attribute__((noreturn)) run_peer(int argc, char **argv)
{
	enum side side;
	bool server;
	enum step step;
	int port, fd = -1;
	uint64_t bytes, seed;
	long cycles;
	struct usmc_ctx *ctx = NULL;
	struct server srv = {.lfd = -1};
	struct usmc_conn *c = NULL;
	static uint8_t buf[FLOW_CHUNK];

	CHECK(argc == 9, "peer: bad arguments");
	side = !strcmp(argv[2], "u") ? SIDE_USMC : SIDE_KERNEL;
	server = !strcmp(argv[3], "server");
	step = step_of(argv[4]);
	port = atoi(argv[5]);
	bytes = strtoull(argv[6], NULL, 0);
	cycles = atol(argv[7]);
	seed = strtoull(argv[8], NULL, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGPIPE, SIG_IGN);
	if (side == SIDE_USMC) {
		ctx = make_ctx();
		/* a victim that lives on would show a leak in its own process,
		 * not the survivor's; it is killed or exits at once anyway */
	}
	if (step >= STEP_PROPOSAL && step <= STEP_CONFIRM_LINK && side == SIDE_USMC) {
		atomic_store(&hook_self, true); /* we are the victim */
		atomic_store(&hook_step, step);
	}
	if (server) {
		server_open(&srv, side, ctx);
		peer_tell(srv.port);
	}
	for (long i = 0; i < cycles || !cycles; i++) {
		int pp = 0, rc;

		if (server)
			rc = server_accept(&srv, 3600, &fd, &c, &pp);
		else
			rc = client_connect(side, ctx, port, &fd, &c, &pp);
		if (rc) {
			fprintf(stderr, "peer: %s: %s\n", server ? "accept" : "connect",
				usmc_strerror(rc));
			_exit(3);
		}
		/* blocking I/O from here */
		if (fd >= 0)
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		if (c && c->nonblock)
			c->nonblock = false;
		if (step >= STEP_PROPOSAL && step <= STEP_CONFIRM_LINK) {
			/* the handshake outlived its step (a kernel victim, whose
			 * killer is the parent): wait to be killed */
			peer_tell(1);
			for (;;)
				pause();
		}
		if (step == STEP_DATA) {
			struct flow_end e;
			struct flow_end *ep = &e;

			if (fd >= 0)
				fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
			if (c)
				c->nonblock = true;
			flow_end_init(&e, fd, c, seed + !server, seed + server, UINT64_MAX,
				      UINT64_MAX, "victim");
			peer_tell(1);
			flow_run(&ep, 1, 3600, 0, NULL, false);
			_exit(4); /* the stream ended before the kill */
		}
		if (step == STEP_CLOSE) {
			/* fill what the survivor does not read, then close:
			 * the close lingers with data unsent, and is killed */
			if (fd >= 0)
				fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
			uint64_t off = 0;

			while (off < bytes) {
				struct pollfd pf = {.fd = c ? usmc_conn_fd(c) : fd,
						    .events = POLLOUT};
				ssize_t r;

				pattern_fill(seed + !server, off, buf, FLOW_CHUNK);
				r = c ? usmc_send(c, buf, FLOW_CHUNK, MSG_DONTWAIT)
				      : send(fd, buf, FLOW_CHUNK, MSG_DONTWAIT | MSG_NOSIGNAL);
				if (r > 0) {
					off += (uint64_t)r;
					continue;
				}
				if (r < 0 && (c ? r != -EAGAIN : errno != EAGAIN))
					_exit(6);
				/* full until it stays full: the survivor reads nothing */
				if (poll(&pf, 1, 300) == 0)
					break;
			}
			if (fd >= 0)
				fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
			/* the kill must land in the linger, 0.3 s after the tell:
			 * a linger far longer than the default 2 s, so that a
			 * slow host cannot end it first (its end sends an abort,
			 * which a kernel survivor rightly reads as EOF) */
			if (c)
				CHECK(!usmc_conn_setopt(c, USMC_OPT_LINGER_MS, 30000), "linger");
			peer_tell((int)off); /* what the application handed over */
			peer_close(fd, c);   /* lingers; the parent kills us meanwhile */
			peer_tell(2);
			for (;;)
				pause();
		}
		if (step == STEP_CLOSED) {
			/* everything sent and read, a clean close, then killed */
			if (peer_send_all(fd, c, seed + !server, bytes) ||
			    peer_recv_all(fd, c, seed + server, bytes))
				_exit(6);
			peer_close(fd, c);
			peer_tell(1);
			for (;;)
				pause();
		}
		/* soak cycles */
		{
			uint64_t s = cycle_seed(pp, seed); /* pp: the client's port */
			ssize_t r;

			if (!server) {
				if (peer_send_all(fd, c, s, bytes))
					_exit(7);
				if (c ? usmc_shutdown(c, SHUT_WR) : shutdown(fd, SHUT_WR))
					_exit(7);
				if (peer_recv_all(fd, c, s + 1, bytes))
					_exit(8);
				r = peer_io(fd, c, buf, 1, false);
				if (r != 0)
					_exit(9);
			} else {
				if (peer_recv_all(fd, c, s, bytes))
					_exit(8);
				r = peer_io(fd, c, buf, 1, false);
				if (r != 0)
					_exit(9);
				if (peer_send_all(fd, c, s + 1, bytes))
					_exit(7);
			}
			peer_close(fd, c);
			fd = -1;
			c = NULL;
		}
	}
	server_close(&srv);
	if (ctx)
		CHECK(!usmc_ctx_destroy(ctx), "peer ctx destroy");
	_exit(0);
}

/* ==== lossy links ===================================================== */

struct fault {
	const char *name, *netem;
};

static const struct fault faults[] = {
	{"none", ""},
	{"loss1", "loss 1%"},
	{"loss5", "loss 5%"},
	{"dup2", "duplicate 2%"},
	/* a quarter of the packets are held back 1 ms, the rest overtake them */
	{"reorder", "delay 1ms reorder 75% 50%"},
	{"corrupt1", "corrupt 1%"},
};

static const struct fault *fault_of(const char *name)
{
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
		if (!strcmp(faults[i].name, name))
			return &faults[i];
	die("unknown fault '%s' (none loss1 loss5 dup2 reorder corrupt1)", name);
}

static void netem_off(void)
{
	fnet_netem(NULL);
}

struct side_run {
	struct flow_end **ends;
	int n;
	double stall_s;
	volatile bool *stop;
};

static void *side_thread(void *arg)
{
	struct side_run *r = arg;

	flow_run(r->ends, r->n, r->stall_s, 0, r->stop, false);
	return NULL;
}

/* The two ends of an open connection. */
struct conn_pair {
	struct flow_end cli, srv;
	int cport;
	enum usmc_mode mode; /* of the usmc end(s); kernel: from smc_diag */
	uint32_t reason;
	bool kernel_smcr;
};

/* A server end accepted before its client's turn came. */
struct accepted_end {
	int fd, port;
	struct usmc_conn *c;
};

/* What our listener did while a connection its client completed did not
 * come: its counters, and the ports of the @ns ends it handed out that no
 * client has claimed yet. */
static void not_accepted_report(const struct server *srv, const struct accepted_end *st, int ns)
{
	struct usmc_listener_stats ls;

	usmc_listener_stats(srv->l, &ls);
	printf("  listener: accepted %llu (SMC-R %llu, TCP %llu), handshakes failed %llu, in "
	       "handshake %u, queued %u; handed out and not matched:",
	       (unsigned long long)ls.accepted, (unsigned long long)ls.smcr,
	       (unsigned long long)ls.fallbacks, (unsigned long long)ls.hs_failed, ls.in_handshake,
	       ls.queued);
	for (int j = 0; j < ns; j++)
		printf(" port %d", st[j].port);
	printf("%s\n", ns ? "" : " none");
}

/*
 * Opens @n connections of @p: the client connects, the server accepts the
 * one from that port (others are stashed). Returns how many opened; the
 * failures are counted in *@setup_failed with the first error in *@err.
 */
static int open_pairs(const struct pairing *p, struct usmc_ctx *cc, struct server *srv,
		      struct conn_pair *cp, int n, int *setup_failed, int *err)
{
	struct accepted_end *st = calloc(MAX_CONNS, sizeof(*st));
	int k = 0, ns = 0;

	*setup_failed = 0;
	for (int i = 0; i < n; i++) {
		struct conn_pair *x = &cp[k];
		int fd, port, rc, sfd = -1, sport = -1;
		struct usmc_conn *c, *sc = NULL;

		rc = client_connect(p->client, cc, srv->port, &fd, &c, &port);
		if (rc) {
			if (!(*setup_failed)++)
				*err = rc;
			continue;
		}
		for (int j = 0; j < ns; j++)
			if (st[j].port == port) {
				sfd = st[j].fd, sc = st[j].c, sport = port;
				st[j] = st[--ns];
				break;
			}
		while (sport != port) {
			rc = server_accept(srv, 30, &sfd, &sc, &sport);
			if (rc)
				break;
			if (sport != port && ns < MAX_CONNS)
				st[ns++] = (struct accepted_end){sfd, sport, sc};
		}
		if (rc) {
			if (p->server == SIDE_USMC)
				not_accepted_report(srv, st, ns);
			/* ours must accept what its client completed; the kernel's
			 * may not (seen under 5 % loss): a failed setup */
			CHECK(p->server == SIDE_KERNEL,
			      "connection %d from port %d not accepted within 30 s", i, port);
			printf("  connection %d from port %d: the kernel did not accept it within "
			       "30 s\n",
			       i, port);
			if (c)
				usmc_close(c);
			else
				close(fd);
			if (!(*setup_failed)++)
				*err = rc;
			continue;
		}
		x->cport = port;
		flow_end_init(&x->cli, fd, c, 0, 0, 0, 0, "");
		flow_end_init(&x->srv, sfd, sc, 0, 0, 0, 0, "");
		if (c) {
			struct usmc_conn_info info;

			usmc_conn_info(c, &info);
			x->mode = info.mode, x->reason = info.reason;
		}
		if (sc) {
			struct usmc_conn_info info;

			usmc_conn_info(sc, &info);
			x->mode = info.mode, x->reason = info.reason;
		}
		k++;
	}
	CHECK(!ns, "%d connections accepted that no client made", ns);
	free(st);
	return k;
}

/* Fills the kernel's view of each pair's kernel end (one dump). */
static void kernel_modes(const struct pairing *p, struct conn_pair *cp, int n)
{
	static struct kdiag_line d[KDIAG_MAX];
	int nd;

	if (p->client != SIDE_KERNEL && p->server != SIDE_KERNEL)
		return;
	nd = kdiag_dump(d, KDIAG_MAX);
	for (int i = 0; i < n; i++) {
		const struct kdiag_line *l = p->client == SIDE_KERNEL
						     ? kdiag_find(d, nd, cp[i].cport, 0)
						     : kdiag_find(d, nd, 0, cp[i].cport);

		if (p->client != SIDE_KERNEL) /* the kernel server: its peer port */
			for (int j = 0; j < nd && !l; j++)
				if (d[j].pport == cp[i].cport)
					l = &d[j];
		cp[i].kernel_smcr = l && !strcmp(l->mode, "SMC-R");
		if (p->client == SIDE_KERNEL && p->server == SIDE_KERNEL)
			cp[i].mode = cp[i].kernel_smcr ? USMC_MODE_SMCR : USMC_MODE_TCP;
	}
}

static void run_lossy(const char *fault_name, const char *pairing_name)
{
	const struct fault *f = fault_of(fault_name);
	const struct pairing *p = pairing_of(pairing_name);
	long n = env_long("FAULT_CONNS", 100);
	uint64_t bytes = (uint64_t)env_long("FAULT_BYTES", 16 << 20);
	double stall = (double)env_long("FAULT_STALL_S", 60);
	struct conn_pair *cp = calloc((size_t)n, sizeof(*cp));
	struct flow_end **ce = calloc((size_t)n, sizeof(*ce)),
			**se = calloc((size_t)n, sizeof(*se));
	struct usmc_ctx *cc = NULL, *cs = NULL;
	struct server srv;
	struct side_run rc_, rs_;
	pthread_t tc, ts;
	int opened, setup_failed = 0, err = 0, smcr = 0, leaks = 0;
	struct flow_tally tc_, ts_;
	double t0, t_setup, dt;
	struct lgr_census lc;
	bool kernel = p->client == SIDE_KERNEL || p->server == SIDE_KERNEL;
	bool after_setup = env_long("FAULT_AFTER_SETUP", 0) != 0;
	long regmr_replays = 0;

	CHECK(n > 0 && n <= MAX_CONNS, "FAULT_CONNS 1..%d", MAX_CONNS);
	res_add("scenario=lossy fault=%s pairing=%s%s conns=%ld bytes_each_way=%llu", f->name,
		p->name, after_setup ? " phase=data" : "", n, (unsigned long long)bytes);
	if (kernel)
		kernel_ueid();
	if (p->client == SIDE_USMC)
		cc = make_ctx();
	if (p->server == SIDE_USMC) {
		cs = make_ctx();
		/* 100 handshakes at once on 2 emulated cores */
		CHECK(!usmc_ctx_setopt(cs, USMC_OPT_HS_THREADS, 16), "hs threads");
	}
	server_open(&srv, p->server, cs);
	atexit(netem_off);
	/* a kernel end's own REG_MR can kill its link under loss: watch it */
	if (kernel)
		CHECK(!rxe_regmr_watch_start(), "kprobe on rxe_reg_fast_mr");
	if (!after_setup)
		CHECK(!fnet_netem(f->netem), "netem %s", f->netem);
	t0 = mono_s();
	opened = open_pairs(p, cc, &srv, cp, (int)n, &setup_failed, &err);
	t_setup = mono_s() - t0;
	kernel_modes(p, cp, opened);
	if (after_setup)
		CHECK(!fnet_netem(f->netem), "netem %s", f->netem);
	for (int i = 0; i < opened; i++) {
		uint64_t s = cycle_seed(cp[i].cport, 1);

		smcr += cp[i].mode == USMC_MODE_SMCR &&
			(p->client == SIDE_USMC && p->server == SIDE_USMC ? true
									  : cp[i].kernel_smcr);
		cp[i].cli.seed_out = s, cp[i].cli.seed_in = s + 1;
		cp[i].srv.seed_out = s + 1, cp[i].srv.seed_in = s;
		cp[i].cli.bytes_out = cp[i].cli.bytes_in = bytes;
		cp[i].srv.bytes_out = cp[i].srv.bytes_in = bytes;
		snprintf(cp[i].cli.who, sizeof(cp[i].cli.who), "client %d (port %d)", i,
			 cp[i].cport);
		snprintf(cp[i].srv.who, sizeof(cp[i].srv.who), "server %d (port %d)", i,
			 cp[i].cport);
		cp[i].cli.t_progress = cp[i].srv.t_progress = mono_s();
		/* hung is a connection's verdict: neither end moves while served */
		cp[i].cli.peer = &cp[i].srv;
		cp[i].srv.peer = &cp[i].cli;
		ce[i] = &cp[i].cli;
		se[i] = &cp[i].srv;
	}
	printf("%s %s: %d of %ld connections in %.1f s, %d SMC-R (both ends), %d failed to set "
	       "up%s%s\n",
	       f->name, p->name, opened, n, t_setup, smcr, setup_failed, setup_failed ? ": " : "",
	       setup_failed ? usmc_strerror(err) : "");
	for (int i = 0; i < opened; i++)
		if (cp[i].mode != USMC_MODE_SMCR)
			printf("  connection %d: %s, reason %s\n", i, usmc_mode_name(cp[i].mode),
			       usmc_reason_name(cp[i].reason));
	t0 = mono_s();
	rc_ = (struct side_run){ce, opened, stall, NULL};
	rs_ = (struct side_run){se, opened, stall, NULL};
	pthread_create(&tc, NULL, side_thread, &rc_);
	pthread_create(&ts, NULL, side_thread, &rs_);
	pthread_join(tc, NULL);
	pthread_join(ts, NULL);
	dt = mono_s() - t0;
	netem_off();
	if (kernel) {
		regmr_replays = rxe_regmr_watch_count();
		rxe_regmr_watch_stop();
	}
	tc_ = flow_tally(ce, opened);
	ts_ = flow_tally(se, opened);
	flow_report(ce, opened, 10);
	flow_report(se, opened, 10);
	for (int i = 0; i < opened; i++) {
		flow_close(ce[i]);
		flow_close(se[i]);
	}
	server_close(&srv);
	/* the connections are closed: their link groups hold nothing */
	if (cc && await_census(cc, 64, 10, &lc) < 0)
		leaks++, printf("  client context: %d connections, %d buffers still held\n",
				lc.conns, lc.bufs);
	if (cs && await_census(cs, 64, 10, &lc) < 0)
		leaks++, printf("  server context: %d connections, %d buffers still held\n",
				lc.conns, lc.bufs);
	{
		struct usmc_ctx_stats st;

		if (cc && (usmc_ctx_stats(cc, &st), st.open_conns))
			leaks++, printf("  client context: %llu connections open\n",
					(unsigned long long)st.open_conns);
		if (cs && (usmc_ctx_stats(cs, &st), st.open_conns))
			leaks++, printf("  server context: %llu connections open\n",
					(unsigned long long)st.open_conns);
	}
	printf("%s %s: %d connections, %.1f s, %.2f MB/s (both ways); client ends %d complete "
	       "%d failed %d truncated %d corrupt %d hung; server ends %d/%d/%d/%d/%d\n",
	       f->name, p->name, opened, dt,
	       (double)(tc_.bytes_checked + ts_.bytes_checked) / dt / 1e6, tc_.complete, tc_.failed,
	       tc_.truncated, tc_.corrupt, tc_.hung, ts_.complete, ts_.failed, ts_.truncated,
	       ts_.corrupt, ts_.hung);
	if (regmr_replays > 0) {
		printf("%s %s: the kernel's rxe ran %ld of its REG_MR work requests again after a "
		       "retransmission and failed them: a kernel link died (docs/faults.md)\n",
		       f->name, p->name, regmr_replays);
		res_add(" outcome=kernel-rxe-regmr-replay");
	}
	res_add(" opened=%d setup_failed=%d smcr=%d complete=%d failed=%d bytes_checked=%llu "
		"lost=%d corrupted=%d hangs=%d leaks=%d secs=%.1f mbps=%.2f kernel_regmr_replays=%ld",
		opened, setup_failed, smcr,
		tc_.complete < ts_.complete ? tc_.complete : ts_.complete, tc_.failed + ts_.failed,
		(unsigned long long)(tc_.bytes_checked + ts_.bytes_checked),
		tc_.truncated + ts_.truncated, tc_.corrupt + ts_.corrupt, tc_.hung + ts_.hung,
		leaks, dt, (double)(tc_.bytes_checked + ts_.bytes_checked) / dt / 1e6,
		regmr_replays);
	res_print();
	if (cc)
		CHECK(!usmc_ctx_destroy(cc), "client ctx destroy");
	if (cs)
		CHECK(!usmc_ctx_destroy(cs), "server ctx destroy");
	free(cp);
	free(ce);
	free(se);
	CHECK(regmr_replays >= 0, "reading the rxe_reg_fast_mr kprobe");
	/* the kernel against itself is the reference the others are measured
	 * by: its outcome is reported above, not ours to assert */
	if (p->client == SIDE_KERNEL && p->server == SIDE_KERNEL)
		return;
	CHECK(!tc_.truncated && !ts_.truncated && !tc_.corrupt && !ts_.corrupt,
	      "bytes lost or corrupted");
	CHECK(!tc_.hung && !ts_.hung, "connections hung");
	CHECK(!leaks, "leaks");
	/* a lossy link is no reason to fail or to leave SMC-R, unless the
	 * kernel's rxe killed the kernel's own link: then the connections on
	 * it may fail or fall back, cleanly (the checks above) */
	if (regmr_replays > 0)
		return;
	CHECK(!setup_failed && opened == n, "%d connections failed to set up", setup_failed);
	CHECK(tc_.complete == opened && ts_.complete == opened, "connections failed under %s",
	      f->name);
	CHECK(smcr == opened, "%d of %d connections did not run SMC-R on both ends", opened - smcr,
	      opened);
}

/* ==== link down and up ================================================ */

static void link_up_atexit(void)
{
	fnet_link(false);
}

/* A new connection during or after the outage: 16 KiB checked each way. */
struct probe_conn {
	double t;	     /* started, seconds after the link went down */
	int rc;		     /* setup error */
	enum usmc_mode mode; /* the usmc end's */
	uint32_t reason;
	bool peer_declined;
	char kmode[16];	    /* the kernel end's (smc_diag) */
	enum flow_state st; /* of the exchange */
	double secs;
};

static void probe_connect(const struct pairing *p, struct usmc_ctx *cc, struct server *srv,
			  struct probe_conn *pc)
{
	struct conn_pair x;
	struct flow_end *e[2];
	int failed = 0, err = 0;
	double t0 = mono_s();

	memset(&x, 0, sizeof(x));
	if (open_pairs(p, cc, srv, &x, 1, &failed, &err) != 1) {
		pc->rc = err;
		pc->secs = mono_s() - t0;
		return;
	}
	pc->mode = x.mode;
	pc->reason = x.reason;
	if (x.cli.c || x.srv.c) {
		struct usmc_conn_info info;

		usmc_conn_info(x.cli.c ? x.cli.c : x.srv.c, &info);
		pc->peer_declined = info.peer_declined;
	}
	if (p->client == SIDE_KERNEL || p->server == SIDE_KERNEL) {
		kernel_modes(p, &x, 1);
		snprintf(pc->kmode, sizeof(pc->kmode), "%s", x.kernel_smcr ? "SMC-R" : "fallback");
	}
	{
		uint64_t s = cycle_seed(x.cport, 7);

		x.cli.seed_out = x.srv.seed_in = s;
		x.srv.seed_out = x.cli.seed_in = s + 1;
		x.cli.bytes_out = x.cli.bytes_in = x.srv.bytes_out = x.srv.bytes_in = 16384;
		x.cli.t_progress = x.srv.t_progress = mono_s();
	}
	e[0] = &x.cli;
	e[1] = &x.srv;
	flow_run(e, 2, 20, 0, NULL, true);
	pc->st = x.cli.state == FLOW_COMPLETE ? x.srv.state : x.cli.state;
	flow_close(&x.cli);
	flow_close(&x.srv);
	pc->secs = mono_s() - t0;
}

/* New connections, one every @interval_s, classified by whether the link
 * was down or up when they started and ended. */
struct prober {
	const struct pairing *p;
	struct usmc_ctx *cc;
	struct server *srv;
	double t_down, interval_s;
	/* raising: the `ip link set up` has started (a connection that starts
	 * then may find the link up already); up: the port is back */
	atomic_bool raising, up, stop;
	struct probe_conn during[32], after[32];
	int ndur, naft, straddle;
};

static void *prober_thread(void *arg)
{
	struct prober *pr = arg;

	while (!atomic_load(&pr->stop)) {
		double t = mono_s();
		bool up0 = atomic_load(&pr->up);
		bool raising0 = atomic_load(&pr->raising), raising1;
		struct probe_conn pc = {.t = t - pr->t_down};

		probe_connect(pr->p, pr->cc, pr->srv, &pc);
		raising1 = atomic_load(&pr->raising);
		if (!raising0 && !raising1 && pr->ndur < 32)
			pr->during[pr->ndur++] = pc;
		else if (up0 && pr->naft < 32)
			pr->after[pr->naft++] = pc;
		else
			pr->straddle++;
		printf("  new connection at %+.1f s (link %s): %s%s%s%s%s, exchange %s, %.2f s\n",
		       pc.t,
		       up0	  ? "up"
		       : raising1 ? "coming up"
				  : "down",
		       pc.rc ? "setup failed: " : usmc_mode_name(pc.mode),
		       pc.rc ? usmc_strerror(pc.rc) : " reason ",
		       pc.rc ? "" : usmc_reason_name(pc.reason),
		       pc.peer_declined ? " (declined by the peer)" : "",
		       pc.kmode[0] ? (strcmp(pc.kmode, "SMC-R") ? ", kernel fallback"
								: ", kernel SMC-R")
				   : "",
		       pc.rc ? "-" : flow_state_name(pc.st), pc.secs);
		while (!atomic_load(&pr->stop) && mono_s() < t + pr->interval_s)
			usleep(50000);
	}
	return NULL;
}

static bool probe_ok(const struct probe_conn *pc)
{
	return !pc->rc && pc->st == FLOW_COMPLETE;
}

/*
 * Host A's netdev goes down for FAULT_DOWN_S while FAULT_CONNS connections
 * stream both ways and FAULT_IDLE_CONNS wait idle (in u2u on a link group
 * of their own: a second client context), and a new connection starts
 * every second. Expected: the streams end with an error within the QP's
 * retry time (a send that is not acknowledged), or go on after the link
 * is back; the idle ones live on (the link came back before TEST_LINK)
 * unless the peer ended their link group (Linux does, on the port event);
 * new connections during the outage run TCP with a recorded reason,
 * those after it SMC-R; in the end both ends hold the same link groups.
 */
static void run_linkdown(const char *pairing_name)
{
	const struct pairing *p = pairing_of(pairing_name);
	int nact = (int)env_long("FAULT_CONNS", 4), nidle = (int)env_long("FAULT_IDLE_CONNS", 4);
	double down_s = (double)env_long("FAULT_DOWN_S", 5);
	double bound = (double)env_long("FAULT_DETECT_BOUND_S", 10);
	int n = nact + nidle, opened, failed = 0, err = 0, bad = 0, leaks = 0, smcr = 0;
	struct conn_pair *cp = calloc((size_t)n, sizeof(*cp));
	struct flow_end **act = calloc((size_t)(2 * nact), sizeof(*act));
	struct flow_end **idle = calloc((size_t)(2 * nidle), sizeof(*idle));
	struct usmc_ctx *cc = NULL, *cc_idle = NULL, *cs = NULL;
	struct klgr kbefore[KPEER_MAX_LGRS], kfresh[KPEER_MAX_LGRS];
	int nkb = 0, nkf = 0, act_failed = 0, act_lived = 0, idle_ok = 0, idle_failed = 0;
	bool kernel = p->client == SIDE_KERNEL || p->server == SIDE_KERNEL;
	struct prober *pr = calloc(1, sizeof(*pr));
	volatile bool stop = false;
	struct side_run run;
	struct server srv;
	pthread_t th, tp;
	double t_down, t_up, detect_max = 0, t_agree = -1;
	char state[32] = "";
	struct flow_tally ta, ti;

	CHECK(p->client == SIDE_USMC || p->server == SIDE_USMC, "linkdown needs a usmc end");
	res_add("scenario=linkdown fault=linkdown_%.0fs pairing=%s conns=%d", down_s, p->name, n);
	if (kernel) {
		kernel_ueid();
		nkb = kpeer_lgrs(kctl, kbefore, KPEER_MAX_LGRS);
		CHECK(nkb >= 0, "smc_kctl lgr");
		if (nkb > KPEER_MAX_LGRS)
			nkb = KPEER_MAX_LGRS;
	}
	if (p->client == SIDE_USMC) {
		cc = make_ctx();
		cc_idle = p->server == SIDE_USMC ? make_ctx() : cc;
	}
	if (p->server == SIDE_USMC)
		cs = make_ctx();
	server_open(&srv, p->server, cs);
	opened = open_pairs(p, cc, &srv, cp, nact, &failed, &err);
	CHECK(opened == nact, "streams: %s", usmc_strerror(err));
	opened = open_pairs(p, cc_idle, &srv, cp + nact, nidle, &failed, &err);
	CHECK(opened == nidle, "idle connections: %s", usmc_strerror(err));
	kernel_modes(p, cp, n);
	for (int i = 0; i < n; i++) {
		uint64_t s = cycle_seed(cp[i].cport, 3);
		bool is_act = i < nact;

		CHECK(cp[i].mode == USMC_MODE_SMCR && (!kernel || cp[i].kernel_smcr),
		      "connection %d not SMC-R before the fault (%s)", i,
		      usmc_reason_name(cp[i].reason));
		smcr++;
		cp[i].cli.seed_out = cp[i].srv.seed_in = s;
		cp[i].srv.seed_out = cp[i].cli.seed_in = s + 1;
		cp[i].cli.bytes_out = cp[i].cli.bytes_in = is_act ? UINT64_MAX : 4096;
		cp[i].srv.bytes_out = cp[i].srv.bytes_in = is_act ? UINT64_MAX : 4096;
		cp[i].cli.keep_open = cp[i].srv.keep_open = !is_act;
		snprintf(cp[i].cli.who, sizeof(cp[i].cli.who), "%s client %d",
			 is_act ? "stream" : "idle", i);
		snprintf(cp[i].srv.who, sizeof(cp[i].srv.who), "%s server %d",
			 is_act ? "stream" : "idle", i);
		cp[i].cli.t_progress = cp[i].srv.t_progress = mono_s();
		if (is_act) {
			act[2 * i] = &cp[i].cli;
			act[2 * i + 1] = &cp[i].srv;
		} else {
			idle[2 * (i - nact)] = &cp[i].cli;
			idle[2 * (i - nact) + 1] = &cp[i].srv;
		}
	}
	/* the idle ones exchange a little, then wait */
	flow_run(idle, 2 * nidle, 20, 0, NULL, false);
	for (int i = 0; i < 2 * nidle; i++)
		CHECK(idle[i]->state == FLOW_COMPLETE, "%s: first exchange %s", idle[i]->who,
		      flow_state_name(idle[i]->state));
	run = (struct side_run){act, 2 * nact, down_s + 30, &stop};
	pthread_create(&th, NULL, side_thread, &run);
	sleep(2);
	atexit(link_up_atexit);
	t_down = mono_s();
	CHECK(!fnet_link(true), "link down");
	fnet_port_state(getenv("USMC_TEST_RXE_A"), state, sizeof(state));
	printf("%s: %s down at %.1f s; rxe port %s\n", p->name, fnet_dev(0), 0.0, state);
	*pr = (struct prober){.p = p, .cc = cc, .srv = &srv, .t_down = t_down, .interval_s = 1};
	pthread_create(&tp, NULL, prober_thread, pr);
	while (mono_s() < t_down + down_s)
		usleep(50000);
	atomic_store(&pr->raising, true);
	CHECK(!fnet_link(false), "link up");
	t_up = mono_s();
	atomic_store(&pr->up, true);
	fnet_port_state(getenv("USMC_TEST_RXE_A"), state, sizeof(state));
	printf("%s: up again at %.1f s; rxe port %s\n", p->name, t_up - t_down, state);
	/* the new connections go on until one ran SMC-R (at least 3 of them) */
	while (mono_s() < t_up + 30 &&
	       !(pr->naft >= 3 && pr->after[pr->naft - 1].mode == USMC_MODE_SMCR &&
		 probe_ok(&pr->after[pr->naft - 1])))
		usleep(100000);
	atomic_store(&pr->stop, true);
	pthread_join(tp, NULL);
	/* the streams: ended with an error, or moving again */
	{
		double t_check = mono_s();
		uint64_t moved[64] = {0};

		for (int i = 0; i < 2 * nact && i < 64; i++)
			moved[i] = act[i]->got;
		sleep(2);
		for (int i = 0; i < 2 * nact; i++)
			if (act[i]->state == FLOW_RUNNING && i < 64 && act[i]->got > moved[i])
				act_lived++;
		(void)t_check;
	}
	stop = true;
	pthread_join(th, NULL);
	ta = flow_tally(act, 2 * nact);
	for (int i = 0; i < 2 * nact; i++) {
		if (act[i]->state == FLOW_FAILED) {
			double d = act[i]->t_end - t_down;

			act_failed++;
			if (d > detect_max)
				detect_max = d;
			printf("  %s: %s after %.2f s\n", act[i]->who, usmc_strerror(act[i]->err),
			       d);
			if (d > bound)
				bad++, printf("  %s: error after the bound of %.0f s\n",
					      act[i]->who, bound);
		}
	}
	flow_report(act, 2 * nact, 2 * nact);
	/* the idle ones: a second exchange */
	for (int i = 0; i < 2 * nidle; i++) {
		if (idle[i]->state != FLOW_COMPLETE)
			continue;
		idle[i]->state = FLOW_RUNNING;
		idle[i]->bytes_out += 65536;
		idle[i]->bytes_in += 65536;
		idle[i]->t_progress = mono_s();
	}
	flow_run(idle, 2 * nidle, 20, 0, NULL, false);
	ti = flow_tally(idle, 2 * nidle);
	for (int i = 0; i < 2 * nidle; i++)
		if (idle[i]->state == FLOW_COMPLETE)
			idle_ok++;
		else if (idle[i]->state == FLOW_FAILED)
			idle_failed++;
	flow_report(idle, 2 * nidle, 2 * nidle);
	printf("%s: streams %d failed with an error (the last %.2f s after the link went down), "
	       "%d moving again; idle ends %d lived, %d failed; new connections %d during, %d "
	       "after, %d across\n",
	       p->name, act_failed, detect_max, act_lived, idle_ok, idle_failed, pr->ndur, pr->naft,
	       pr->straddle);
	for (int i = 0; i < 2 * nact; i++)
		flow_close(act[i]);
	for (int i = 0; i < 2 * nidle; i++)
		flow_close(idle[i]);
	server_close(&srv);
	/* expectations */
	bad += ta.truncated + ta.corrupt + ta.hung + ti.truncated + ti.corrupt + ti.hung;
	if (act_failed + act_lived != 2 * nact)
		bad++, printf("  a stream neither failed nor moved again\n");
	for (int i = 0; i < pr->ndur; i++)
		if (!probe_ok(&pr->during[i]) || pr->during[i].mode != USMC_MODE_TCP ||
		    !pr->during[i].reason)
			bad++, printf("  new connection %d during the outage: not TCP with a reason\n",
				      i);
	for (int i = 0; i < pr->naft; i++)
		if (!probe_ok(&pr->after[i]) ||
		    (pr->after[i].mode != USMC_MODE_SMCR && !pr->after[i].reason))
			bad++, printf("  new connection %d after the outage failed\n", i);
	if (!pr->naft || pr->after[pr->naft - 1].mode != USMC_MODE_SMCR)
		bad++, printf("  no SMC-R connection after the link came back\n");
	/* link groups: the dead ones freed; both ends hold the same live ones */
	{
		double t0 = mono_s();
		struct usmc_ctx *u = cs ? cs : cc;
		struct lgr_census lc;

		do {
			lc = census(u);
			if (kernel) {
				nkf = klgr_new(kbefore, nkb, kfresh);
				if (!lc.dead && !lc.conns && !lc.bufs && lc.lgrs == nkf)
					t_agree = mono_s() - t0;
			} else {
				struct lgr_census l2 = census(cc), l3 = census(cc_idle);

				if (!lc.dead && !l2.dead && !l3.dead && !lc.conns && !lc.bufs &&
				    lc.lgrs == l2.lgrs + (cc_idle != cc ? l3.lgrs : 0))
					t_agree = mono_s() - t0;
				nkf = l2.lgrs + (cc_idle != cc ? l3.lgrs : 0);
			}
			if (t_agree < 0)
				usleep(200000);
		} while (t_agree < 0 && mono_s() - t0 < 40);
		printf("%s: link groups after the close: usmc %d (%d dead, %d connections, %d "
		       "buffers), %s %d; %s\n",
		       p->name, lc.lgrs, lc.dead, lc.conns, lc.bufs,
		       kernel ? "kernel (new since the start)" : "the other usmc end", nkf,
		       t_agree < 0 ? "they do not agree" : "they agree");
		if (t_agree < 0)
			leaks++;
	}
	res_add(" opened=%d smcr=%d complete=%d failed=%d bytes_checked=%llu lost=%d corrupted=%d "
		"hangs=%d leaks=%d detect_s=%.2f during_tcp=%d after=%d bad=%d",
		n, smcr, idle_ok / 2, act_failed + idle_failed,
		(unsigned long long)(ta.bytes_checked + ti.bytes_checked),
		ta.truncated + ti.truncated, ta.corrupt + ti.corrupt, ta.hung + ti.hung, leaks,
		detect_max, pr->ndur, pr->naft, bad);
	res_print();
	if (cc_idle && cc_idle != cc)
		CHECK(!usmc_ctx_destroy(cc_idle), "ctx destroy");
	if (cc)
		CHECK(!usmc_ctx_destroy(cc), "ctx destroy");
	if (cs)
		CHECK(!usmc_ctx_destroy(cs), "ctx destroy");
	CHECK(!bad && !leaks, "link down: %d expectations failed, %d leaks", bad, leaks);
}

/* ==== peers killed ==================================================== */

/* What the survivor saw of one connection to a killed peer. */
struct survivor_view {
	int setup_rc;	     /* the connect's / accept's error (0: it had a connection) */
	double t_setup_end;  /* mono_s() */
	enum usmc_mode mode; /* usmc end: its mode */
	uint32_t reason;
	struct flow_end e; /* its stream after the kill */
	bool had_conn;
};

static const char *end_word(const struct flow_end *e)
{
	if (e->state == FLOW_FAILED)
		return usmc_strerror(e->err);
	if (e->state == FLOW_COMPLETE)
		return "EOF";
	return flow_state_name(e->state);
}

/* Drive one end until it ends (stall @stall_s: hung). */
static void drive(struct flow_end *e, double stall_s)
{
	struct flow_end *ep = e;

	e->t_progress = mono_s();
	flow_run(&ep, 1, stall_s, 0, NULL, false);
}

/*
 * After a kernel survivor's EOF: did the kernel receive a close flag, or
 * was the EOF its own, of a connection it killed? Linux 6.12 ends a link
 * group whose peer is dead (TEST_LINK unanswered) in __smc_lgr_terminate()
 * -> smc_conn_kill() (net/smc/smc_core.c): smc_close_abort() sets its own
 * peer_conn_abort in local_tx_ctrl, then smc_close_active_abort()
 * (smc_close.c) moves the socket to SMC_PEERABORTWAIT and drops the socket
 * lock (smc_close_cancel_work()) before SMC_CLOSED. A recv() blocked in
 * smc_rx_recvmsg() (smc_rx.c), or one that takes the lock in that window,
 * stops at that flag with nothing read: 0, a clean EOF; a later one gets
 * -ENOTCONN from smc_recvmsg() (af_smc.c), as SMC_CLOSED returns 0 only with
 * RCV_SHUTDOWN, which only smc_cdc_msg_recv_action() (smc_cdc.c) sets, on
 * a CDC of the peer with peer_done_writing, peer_conn_closed or
 * peer_conn_abort. So once the socket is closed, recv() tells: -ENOTCONN
 * proves that no close flag of the peer reached the kernel, 0 that one did.
 * Returns the first recv() result that is not 0 within @bound_s, else 0.
 */
static ssize_t kernel_after_eof(int fd, double bound_s)
{
	double until = mono_s() + bound_s;
	uint8_t b;
	ssize_t r;

	while ((r = recv(fd, &b, 1, MSG_DONTWAIT)) == 0 && mono_s() < until)
		usleep(10000);
	return r < 0 ? -errno : r;
}

/*
 * The victim's process is SIGKILLed at @step; this process survives.
 * usmc victims kill themselves at a handshake step (the --wrap hooks);
 * kernel victims are killed by this process's hooks at the matching step
 * of its own handshake, or by this process at the data steps.
 */
static void run_kill(const char *pairing_name, const char *victim_role, const char *step_name)
{
	const struct pairing *p = pairing_of(pairing_name);
	enum step step = step_of(step_name);
	bool victim_server = !strcmp(victim_role, "server");
	enum side vside = victim_server ? p->server : p->client;
	enum side sside = victim_server ? p->client : p->server;
	uint64_t bytes = (uint64_t)env_long("FAULT_BYTES", 4 << 20);
	double bound = (double)env_long("FAULT_DETECT_BOUND_S", 15);
	bool hs_step = step >= STEP_PROPOSAL && step <= STEP_CONFIRM_LINK;
	bool kernel = p->client == SIDE_KERNEL || p->server == SIDE_KERNEL;
	struct usmc_ctx *ctx = NULL;
	struct server srv = {.lfd = -1};
	struct survivor_view v;
	struct child ch;
	int fds0 = 0, leaks = 0, bad = 0, port = 0, lport = 0;
	struct fnet_res res0 = {0}, res1;
	struct klgr kbefore[KPEER_MAX_LGRS], kfresh[KPEER_MAX_LGRS];
	int nkb = 0;
	struct usmc_listener_stats ls0 = {0}, ls;
	static char fd_base[FD_SNAP_MAX][64];
	double t_kill = 0, detect = -1;
	long long truncated = 0;
	bool kernel_kill_eof = false; /* kernel_after_eof(): the kernel's own EOF */
	uint64_t seed = 0xfa17;

	CHECK(p->client != SIDE_KERNEL || p->server != SIDE_KERNEL, "kill: k2k is no usmc test");
	CHECK(strcmp(victim_role, "server") == 0 || strcmp(victim_role, "client") == 0,
	      "victim: client or server");
	memset(&v, 0, sizeof(v));
	flow_end_init(&v.e, -1, NULL, 0, 0, 0, 0, "survivor");
	res_add("scenario=kill fault=kill_%s pairing=%s victim=%s conns=1", step_names[step],
		p->name, victim_role);
	if (kernel) {
		kernel_ueid();
		/* the kernel finds a dead peer by TEST_LINK only: 2 s idle,
		 * then 2 s for the answer, instead of 30 + 2 */
		kernel_testlink(2);
		/* a kernel survivor of a killed usmc peer: one link (the
		 * kernel's deadlock, kernel_max_links()) */
		if (sside == SIDE_KERNEL)
			kernel_max_links(1);
		nkb = kpeer_lgrs(kctl, kbefore, KPEER_MAX_LGRS);
		CHECK(nkb >= 0, "smc_kctl lgr");
		if (nkb > KPEER_MAX_LGRS)
			nkb = KPEER_MAX_LGRS;
	}
	if (sside == SIDE_USMC) {
		ctx = make_ctx();
		/* idle link groups go quickly: the baseline is none */
		CHECK(!usmc_ctx_setopt(ctx, USMC_OPT_LGR_IDLE_MS, 1000), "idle option");
	}
	if (!victim_server) {
		server_open(&srv, sside, ctx);
		port = srv.port;
	}
	if (sside == SIDE_USMC) {
		fds0 = count_fds();
		fd_snapshot(fd_base);
		res0 = fnet_res_of(getpid());
		if (srv.l)
			usmc_listener_stats(srv.l, &ls0);
	}
	if (victim_server) {
		child_spawn(&ch, vside, true, step, 0, bytes, 1, seed);
		CHECK(child_read(&ch, &port, 20), "the victim server did not start");
	}
	if (hs_step && vside == SIDE_KERNEL) { /* our hooks kill it */
		atomic_store(&hook_step, step);
		if (victim_server)
			atomic_store(&hook_pid, ch.pid);
	}
	if (!victim_server) {
		child_spawn(&ch, vside, false, step, port, bytes, 1, seed);
		if (hs_step && vside == SIDE_KERNEL)
			atomic_store(&hook_pid, ch.pid);
	}
	/* the survivor's connection */
	if (victim_server) {
		int fd;
		struct usmc_conn *c;

		v.setup_rc = client_connect(sside, ctx, port, &fd, &c, &lport);
		v.t_setup_end = mono_s();
		if (!v.setup_rc) {
			v.had_conn = true;
			flow_end_init(&v.e, fd, c, 0, 0, 0, 0, "survivor client");
		}
	} else {
		/* a handshake killed in the middle hands out no connection:
		 * wait for one until well after the victim died */
		double until = mono_s() + 60;
		int fd, pp;
		struct usmc_conn *c;

		for (;;) {
			int rc = server_accept(&srv, 0.2, &fd, &c, &pp);

			if (!rc) {
				v.had_conn = true;
				flow_end_init(&v.e, fd, c, 0, 0, 0, 0, "survivor server");
				lport = pp;
				break;
			}
			if (atomic_load(&ch.reaped) && until > ch.t_dead + bound)
				until = ch.t_dead + bound;
			if (mono_s() > until)
				break;
			if (srv.l && hs_step) {
				usmc_listener_stats(srv.l, &ls);
				if (ls.hs_failed > ls0.hs_failed && atomic_load(&ch.reaped) &&
				    !ls.in_handshake)
					break; /* dropped: nothing to hand out */
			}
			if (sside == SIDE_KERNEL && hs_step && atomic_load(&ch.reaped) &&
			    !kernel_port_busy(port))
				break; /* the kernel dropped it: no socket on the port */
		}
		v.t_setup_end = mono_s();
		v.setup_rc = v.had_conn ? 0 : -ETIMEDOUT;
	}
	if (v.had_conn && v.e.c) {
		struct usmc_conn_info info;

		usmc_conn_info(v.e.c, &info);
		v.mode = info.mode;
		v.reason = info.reason;
	}
	/* the step itself, then the survivor's stream until it ends */
	v.e.seed_out = seed + victim_server;
	v.e.seed_in = seed + !victim_server;
	if (hs_step) {
		v.e.bytes_out = 65536;
		v.e.bytes_in = UINT64_MAX;
		if (v.had_conn)
			drive(&v.e, bound + 30);
	} else if (step == STEP_DATA) {
		int ready;

		CHECK(v.had_conn, "no connection to the victim: %s", usmc_strerror(v.setup_rc));
		CHECK(child_read(&ch, &ready, 20), "victim not streaming");
		v.e.bytes_out = v.e.bytes_in = UINT64_MAX;
		/* stream both ways for a while, then kill it */
		{
			struct flow_end *ep = &v.e;

			v.e.t_progress = mono_s();
			flow_run(&ep, 1, 30, mono_s() + 2, NULL, false);
		}
		CHECK(v.e.state == FLOW_RUNNING, "stream before the kill: %s", end_word(&v.e));
		child_kill(&ch);
		t_kill = mono_s();
		drive(&v.e, bound + 30);
	} else if (step == STEP_CLOSE) {
		int written;

		CHECK(v.had_conn, "no connection to the victim: %s", usmc_strerror(v.setup_rc));
		/* we read nothing: its close lingers with data unsent */
		CHECK(child_read(&ch, &written, 30), "victim did not fill and close");
		usleep(300000);
		child_kill(&ch);
		t_kill = mono_s();
		v.e.bytes_out = 0;
		v.e.bytes_in = UINT64_MAX;
		drive(&v.e, bound + 30);
		printf("  the victim's application wrote %d bytes before its close; %llu arrived, "
		       "then %s\n",
		       written, (unsigned long long)v.e.got, end_word(&v.e));
		/* a clean EOF promises the whole stream: fewer bytes is a loss,
		 * unless a kernel survivor proves the EOF its own (no close
		 * flag of the dying usmc peer reached it: kernel_after_eof()) */
		if (v.e.state == FLOW_COMPLETE && v.e.got < (uint64_t)written) {
			ssize_t after = v.e.c ? 0 : kernel_after_eof(v.e.fd, 2);

			kernel_kill_eof = after == -ENOTCONN;
			if (kernel_kill_eof) {
				printf("  EOF after %llu of %d bytes, then %s: the kernel's EOF of the "
				       "connection it killed with the link group; it received no close "
				       "flag\n",
				       (unsigned long long)v.e.got, written,
				       usmc_strerror((int)after));
			} else {
				const char *then = v.e.c ? NULL
						   : after == 0
							   ? "EOF: the kernel received a close flag"
						   : after > 0 ? "data"
							       : usmc_strerror((int)after);

				truncated = (long long)((uint64_t)written - v.e.got);
				bad++, printf("  EOF after %llu of %d bytes: %lld bytes lost silently%s%s\n",
					      (unsigned long long)v.e.got, written, truncated,
					      then ? "; recv after it: " : "", then ? then : "");
			}
		}
	} else if (step == STEP_CLOSED) {
		int closed;

		CHECK(v.had_conn, "no connection to the victim: %s", usmc_strerror(v.setup_rc));
		v.e.bytes_out = v.e.bytes_in = bytes;
		v.e.t_progress = mono_s();
		/* the victim closes cleanly once both directions are done;
		 * we take its data and EOF, then it is killed */
		{
			struct flow_end *ep = &v.e;

			flow_run(&ep, 1, 30, 0, NULL, false);
		}
		if (child_read(&ch, &closed, 10) && v.e.state == FLOW_COMPLETE) {
			/* it closed and reads no more: a send must fail at once,
			 * never be taken to fill its RMB and then block */
			static uint8_t junk[FLOW_CHUNK];
			uint64_t taken = 0;
			double t0 = mono_s();
			ssize_t r;

			do {
				r = flow_send(&v.e, junk, sizeof(junk));
				if (r > 0)
					taken += (uint64_t)r;
				else if (flow_transient(r))
					usleep(10000);
			} while ((r > 0 || flow_transient(r)) && mono_s() - t0 < 3);
			printf("  send after the peer's close: %s after %.2f s, %llu bytes taken\n",
			       r > 0		   ? "accepted"
			       : flow_transient(r) ? "blocked"
						   : usmc_strerror((int)r),
			       mono_s() - t0, (unsigned long long)taken);
			if (r > 0 || flow_transient(r))
				bad++, printf("  a send to a peer that closed must fail, not block\n");
		}
		if (!atomic_load(&ch.reaped)) {
			child_kill(&ch);
			t_kill = mono_s();
		}
		if (v.e.state == FLOW_COMPLETE && t_kill) {
			/* its link group dies now: our end must still say EOF */
			uint8_t b;
			ssize_t r;

			sleep(3);
			r = flow_recv(&v.e, &b, 1);
			if (r != 0)
				bad++, printf("  after the peer's clean close and death: %s, not EOF\n",
					      r < 0 ? usmc_strerror((int)r) : "data");
		}
	}
	/* the victim is dead */
	{
		bool reached;

		/* a usmc victim kills itself at the step: give the reaper time */
		for (int i = 0;
		     hs_step && vside == SIDE_USMC && i < 300 && !atomic_load(&ch.reaped); i++)
			usleep(10000);
		reached = hs_step ? (vside == SIDE_USMC ? atomic_load(&ch.reaped)
							: atomic_load(&hook_fired))
				  : t_kill > 0;
		child_kill(&ch);
		child_join(&ch);
		if (!reached || !killed_by_sigkill(ch.status))
			bad++, printf("  the victim was not killed at %s (status %#x): the step was "
				      "not reached\n",
				      step_names[step], ch.status);
	}
	if (!t_kill)
		t_kill = atomic_load(&hook_fired) && atomic_load(&hook_t) ? atomic_load(&hook_t)
									  : ch.t_dead;
	/* how it ended, and when */
	if (v.had_conn && v.e.state != FLOW_RUNNING && v.e.state != FLOW_COMPLETE)
		detect = v.e.t_end - t_kill;
	else if (v.had_conn && v.e.state == FLOW_COMPLETE)
		detect = v.e.t_end - t_kill;
	else
		detect = v.t_setup_end - t_kill;
	if (detect < 0)
		detect = 0; /* it ended before the kill landed (the kernel's own close) */
	if (v.had_conn)
		printf("%s, %s killed at %s: the survivor had a connection (%s%s%s); it ended with "
		       "%s %.2f s after the kill, %llu bytes checked\n",
		       p->name, victim_role, step_names[step],
		       v.e.c ? usmc_mode_name(v.mode) : "kernel socket",
		       v.e.c && v.mode != USMC_MODE_SMCR ? ", reason " : "",
		       v.e.c && v.mode != USMC_MODE_SMCR ? usmc_reason_name(v.reason) : "",
		       end_word(&v.e), detect, (unsigned long long)v.e.got);
	else
		printf("%s, %s killed at %s: the survivor got no connection (%s), %.2f s after the "
		       "kill\n",
		       p->name, victim_role, step_names[step],
		       victim_server ? usmc_strerror(v.setup_rc) : "the handshake was dropped",
		       detect);
	/* the right ending */
	if (v.e.state == FLOW_TRUNCATED || v.e.state == FLOW_CORRUPT || v.e.state == FLOW_HUNG)
		bad++, printf("  survivor stream: %s\n", flow_state_name(v.e.state));
	if (detect > bound)
		bad++, printf("  the survivor took %.1f s, bound %.0f s\n", detect, bound);
	if (step == STEP_CLOSED && v.e.state != FLOW_COMPLETE)
		bad++, printf("  after a clean close the survivor must read every byte, then EOF\n");
	/* a usmc peer that dies sends no close CDC: a usmc survivor on SMC-R
	 * must report an error, never a clean EOF (the kernel says EOF, see
	 * docs/interop.md; TCP says EOF or a reset) */
	if (step != STEP_CLOSED && vside == SIDE_USMC && sside == SIDE_USMC && v.had_conn &&
	    v.mode == USMC_MODE_SMCR && v.e.state != FLOW_FAILED)
		bad++, printf("  a usmc peer that died without closing must give an error, not %s\n",
			      end_word(&v.e));
	if (step == STEP_DATA && v.mode != USMC_MODE_SMCR && v.e.c)
		bad++, printf("  not SMC-R before the kill\n");
	flow_close(&v.e);
	/* nothing left behind */
	if (sside == SIDE_USMC) {
		struct lgr_census lc;
		struct usmc_ctx_stats st;
		double t;

		t = await_census(ctx, 0, bound + 5, &lc);
		if (t < 0)
			leaks++,
				printf("  usmc: %d link groups (%d dead), %d connections, %d buffers "
				       "left\n",
				       lc.lgrs, lc.dead, lc.conns, lc.bufs);
		if (srv.l) {
			double t0 = mono_s();

			do
				usmc_listener_stats(srv.l, &ls);
			while ((ls.in_handshake || ls.queued) && mono_s() - t0 < 10 &&
			       !usleep(100000));
			if (ls.in_handshake || ls.queued)
				leaks++, printf("  listener: %u in handshake, %u queued\n",
						ls.in_handshake, ls.queued);
			printf("  listener: %llu accepted, %llu SMC-R, %llu TCP, %llu handshakes "
			       "failed\n",
			       (unsigned long long)(ls.accepted - ls0.accepted),
			       (unsigned long long)(ls.smcr - ls0.smcr),
			       (unsigned long long)(ls.fallbacks - ls0.fallbacks),
			       (unsigned long long)(ls.hs_failed - ls0.hs_failed));
		}
		usmc_ctx_stats(ctx, &st);
		if (st.open_conns)
			leaks++, printf("  usmc: %llu connections open\n",
					(unsigned long long)st.open_conns);
		res1 = fnet_res_of(getpid());
		if (count_fds() != fds0 || res1.qp != res0.qp || res1.mr != res0.mr ||
		    res1.cq != res0.cq || res1.pd != res0.pd) {
			leaks++, printf("  fds %d (baseline %d), verbs qp %d mr %d cq %d pd %d "
					"(baseline %d %d %d %d)\n",
					count_fds(), fds0, res1.qp, res1.mr, res1.cq, res1.pd,
					res0.qp, res0.mr, res0.cq, res0.pd);
			fd_diff(fd_base);
		}
	} else {
		/* the kernel: no socket of ours left, no link group to the dead peer */
		static struct kdiag_line d[KDIAG_MAX];
		double t0 = mono_s();
		int nd, nkf;
		const struct kdiag_line *l = NULL;

		do {
			nd = kdiag_dump(d, KDIAG_MAX);
			l = NULL;
			for (int i = 0; i < nd && !l; i++)
				if (victim_server
					    ? d[i].lport == lport && lport > 0
					    : d[i].lport == port && strcmp(d[i].state, "LISTEN"))
					l = &d[i];
			nkf = klgr_new(kbefore, nkb, kfresh);
		} while ((l || nkf) && mono_s() - t0 < bound + 5 && !usleep(200000));
		if (l || nkf)
			leaks++,
				printf("  kernel: socket %s, %d link groups to the dead peer left\n",
				       l ? l->state : "gone", nkf);
		else
			printf("  kernel: socket and link group gone %.1f s after the close\n",
			       mono_s() - t0);
	}
	server_close(&srv);
	res_add(" opened=%d smcr=%d complete=%d failed=%d bytes_checked=%llu lost=%lld corrupted=%d "
		"hangs=%d leaks=%d detect_s=%.2f outcome=%s bad=%d",
		v.had_conn, v.had_conn && v.mode == USMC_MODE_SMCR, v.e.state == FLOW_COMPLETE,
		v.e.state == FLOW_FAILED || !v.had_conn, (unsigned long long)v.e.got,
		v.e.state == FLOW_TRUNCATED ? 1LL : truncated, v.e.state == FLOW_CORRUPT,
		v.e.state == FLOW_HUNG, leaks, detect,
		v.had_conn	? (v.e.state == FLOW_FAILED ? log_errname(v.e.err)
				   : kernel_kill_eof	    ? "EOF,ENOTCONN"
							    : end_word(&v.e))
		: victim_server ? log_errname(v.setup_rc)
				: "dropped",
		bad);
	res_print();
	if (ctx)
		CHECK(!usmc_ctx_destroy(ctx), "ctx destroy");
	CHECK(!bad && !leaks, "kill at %s: %d expectations failed, %d leaks", step_names[step], bad,
	      leaks);
}

/* ==== resources over time ============================================= */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

struct killer {
	struct child *ch;
	double after_s;
	atomic_bool cancel;
	_Atomic double t_kill; /* 0: not (yet) killed */
	pthread_t th;
};

static void *killer_thread(void *arg)
{
	struct killer *k = arg;
	double until = mono_s() + k->after_s;

	while (!atomic_load(&k->cancel) && mono_s() < until)
		usleep(2000);
	if (!atomic_load(&k->cancel) && !atomic_load(&k->ch->reaped)) {
		atomic_store(&k->t_kill, mono_s());
		kill(k->ch->pid, SIGKILL);
	}
	return NULL;
}

/*
 * FAULT_CYCLES connect / transfer (FAULT_BYTES each way, checked) / close
 * cycles between this process (the survivor, usmc) and peer processes
 * that each run FAULT_BATCH cycles; every FAULT_KILL_EVERY-th peer is
 * SIGKILLed at a random moment of its batch. Afterwards the survivor's
 * descriptors, verbs objects and link groups are back to the baseline
 * taken before the first connection, its RSS to the one after the first
 * batch (allocator warm-up) within FAULT_RSS_SLACK_KIB.
 */
static void run_soak(const char *pairing_name, const char *survivor_role)
{
	const struct pairing *p = pairing_of(pairing_name);
	bool srv_side = !strcmp(survivor_role, "server");
	enum side sside = srv_side ? p->server : p->client;
	enum side vside = srv_side ? p->client : p->server;
	long cycles = env_long("FAULT_CYCLES", 10000), batch = env_long("FAULT_BATCH", 100);
	long kill_every = env_long("FAULT_KILL_EVERY", 5);
	long slack_kib = env_long("FAULT_RSS_SLACK_KIB", 8192);
	uint64_t bytes = (uint64_t)env_long("FAULT_BYTES", 32768);
	double bound = (double)env_long("FAULT_DETECT_BOUND_S", 15);
	struct usmc_ctx *ctx;
	struct server srv = {.lfd = -1};
	long done = 0, complete = 0, failed = 0, lost = 0, corrupt = 0, hung = 0, bad = 0;
	long children = 0, killed = 0, smcr = 0, fallback = 0, fallback_killed = 0;
	long setup_failed = 0;
	uint64_t checked = 0;
	int fds0, leaks = 0;
	long rss0 = 0, rss, rss1, rss_peak = 0, heap0 = 0, heap1;
	struct fnet_res res0, res1;
	static char fd_base[FD_SNAP_MAX][64];
	double detect_max = 0, t0 = mono_s();

	CHECK(sside == SIDE_USMC, "soak: the survivor is usmc (its resources are measured)");
	res_add("scenario=soak fault=soak_kill_every_%ld pairing=%s survivor=%s", kill_every,
		p->name, survivor_role);
	if (vside == SIDE_KERNEL)
		kernel_ueid();
	ctx = make_ctx();
	CHECK(!usmc_ctx_setopt(ctx, USMC_OPT_LGR_IDLE_MS, 1000), "idle option");
	if (srv_side) {
		CHECK(!usmc_ctx_setopt(ctx, USMC_OPT_HS_THREADS, 4), "hs threads");
		server_open(&srv, SIDE_USMC, ctx);
	}
	fds0 = count_fds();
	fd_snapshot(fd_base);
	res0 = fnet_res_of(getpid());
	while (done < cycles) {
		long n = cycles - done < batch ? cycles - done : batch;
		bool to_kill = kill_every && children % kill_every == kill_every - 1;
		struct killer k = {0};
		struct child ch;
		int port = srv.port;
		long i;
		double tb = mono_s();

		children++;
		child_spawn(&ch, vside, !srv_side, STEP_NONE, port, bytes, n, (uint64_t)children);
		if (!srv_side)
			CHECK(child_read(&ch, &port, 20), "peer server %ld did not start",
			      children);
		if (to_kill) {
			/* somewhere in its batch: a batch takes about n x 10 ms */
			k.ch = &ch;
			k.after_s = (double)(rng() % (uint64_t)(n * 10 + 1)) / 1000.0;
			pthread_create(&k.th, NULL, killer_thread, &k);
		}
		for (i = 0; i < n; i++) {
			struct usmc_conn_info info;
			bool tcp_killed;
			struct flow_end e;
			int fd, pp, rc;
			struct usmc_conn *c;
			uint64_t s;

			if (srv_side) {
				rc = -ETIMEDOUT;
				while (rc == -ETIMEDOUT) {
					rc = server_accept(&srv, 0.5, &fd, &c, &pp);
					if (rc && atomic_load(&ch.reaped))
						break;
				}
			} else {
				rc = client_connect(SIDE_USMC, ctx, port, &fd, &c, &pp);
			}
			if (rc) {
				if (!atomic_load(&k.t_kill)) {
					setup_failed++, bad++, done++;
					printf("  peer %ld cycle %ld: no connection: %s\n",
					       children, i, usmc_strerror(rc));
				}
				break;
			}
			usmc_conn_info(c, &info);
			/* TCP is right only for a handshake its peer's death cut
			 * short: the peer was killed before we got the connection */
			tcp_killed = info.mode != USMC_MODE_SMCR && atomic_load(&k.t_kill);
			if (info.mode == USMC_MODE_SMCR) {
				smcr++;
			} else if (tcp_killed) {
				fallback_killed++;
			} else {
				fallback++;
				printf("  peer %ld cycle %ld: TCP with a live peer (%s)\n",
				       children, i, usmc_reason_name(info.reason));
			}
			s = cycle_seed(pp, (uint64_t)children);
			flow_end_init(&e, fd, c, srv_side ? s + 1 : s, srv_side ? s : s + 1, bytes,
				      bytes, "survivor");
			drive(&e, bound + 30);
			checked += e.got;
			done++;
			switch (e.state) {
			case FLOW_COMPLETE:
				complete++;
				break;
			case FLOW_FAILED:
				failed++;
				if (!atomic_load(&k.t_kill)) {
					bad++;
					printf("  peer %ld cycle %ld: %s with a live peer\n",
					       children, i, usmc_strerror(e.err));
				} else if (e.t_end - atomic_load(&k.t_kill) > detect_max) {
					detect_max = e.t_end - atomic_load(&k.t_kill);
				}
				break;
			case FLOW_TRUNCATED:
				/* a kernel peer killed while sending closes orderly,
				 * and so does any TCP peer (the kernel sends its FIN) */
				if ((vside == SIDE_KERNEL && atomic_load(&k.t_kill)) ||
				    tcp_killed) {
					failed++;
					break;
				}
				lost++;
				printf("  peer %ld cycle %ld: EOF after %llu of %llu bytes\n",
				       children, i, (unsigned long long)e.got,
				       (unsigned long long)bytes);
				break;
			case FLOW_CORRUPT:
				corrupt++;
				printf("  peer %ld cycle %ld: byte %lld corrupt\n", children, i,
				       e.bad_off);
				break;
			default:
				hung++;
				printf("  peer %ld cycle %ld: hung (%s)\n", children, i,
				       flow_state_name(e.state));
				break;
			}
			flow_close(&e);
			if (e.state != FLOW_COMPLETE)
				break;
		}
		if (to_kill) {
			atomic_store(&k.cancel, true); /* it may have finished before its time */
			pthread_join(k.th, NULL);
			killed += atomic_load(&k.t_kill) != 0;
		}
		child_join(&ch);
		if (!atomic_load(&k.t_kill) &&
		    !(WIFEXITED(ch.status) && WEXITSTATUS(ch.status) == 0))
			bad++, printf("  peer %ld ended with status %#x\n", children, ch.status);
		/* what the killed peer's last handshakes left, before the next
		 * peer's connections come in behind them */
		if (srv_side && atomic_load(&k.t_kill)) {
			int left = server_drain(&srv, bound + 10);

			if (left < 0)
				bad++, printf("  peer %ld: its handshakes still in our listener after "
					      "%.0f s\n",
					      children, bound + 10);
			else if (left)
				printf("  peer %ld (killed): closed %d connections it left queued\n",
				       children, left);
		}
		CHECK(bad + lost + corrupt + hung < 20, "soak: giving up after 20 failures");
		if (children == 1) {
			struct lgr_census lc;

			await_census(ctx, 0, 10, &lc);
			rss0 = rss_kib();
			heap0 = heap_inuse_kib();
		}
		rss = rss_kib(); /* once a batch: each reading trims the heap */
		if (rss > rss_peak)
			rss_peak = rss;
		if (children % 10 == 0 || done >= cycles)
			printf("soak %s %s: %ld cycles (%ld peers, %ld killed), %.1f s, RSS %ld KiB, "
			       "fds %d, last batch %.2f s\n",
			       p->name, survivor_role, done, children, killed, mono_s() - t0, rss,
			       count_fds(), mono_s() - tb);
		fflush(stdout);
	}
	/* back to the baseline */
	{
		struct lgr_census lc;
		struct usmc_ctx_stats st;
		double t = await_census(ctx, 0, bound + 10, &lc);

		if (t < 0) {
			leaks++;
			printf("  %d link groups (%d dead), %d connections, %d buffers left\n",
			       lc.lgrs, lc.dead, lc.conns, lc.bufs);
			lgr_dump(ctx, "soak survivor, not back to the baseline");
		}
		usmc_ctx_stats(ctx, &st);
		if (st.open_conns)
			leaks++, printf("  %llu connections open\n",
					(unsigned long long)st.open_conns);
		if (srv.l) {
			struct usmc_listener_stats ls;

			usmc_listener_stats(srv.l, &ls);
			if (ls.in_handshake || ls.queued)
				leaks++, printf("  listener: %u in handshake, %u queued\n",
						ls.in_handshake, ls.queued);
		}
	}
	rss1 = rss_kib();
	heap1 = heap_inuse_kib();
	res1 = fnet_res_of(getpid());
	printf("soak %s %s: %ld cycles, %ld complete, %ld failed (killed peers), %ld SMC-R, %ld TCP "
	       "with a killed peer, %ld TCP with a live one; fds %d (baseline %d), qp %d mr %d cq %d "
	       "pd %d (baseline %d %d %d %d), RSS %ld KiB (after the first peer %ld, peak %ld), "
	       "heap in use %ld KiB (after the first peer %ld)\n",
	       p->name, survivor_role, done, complete, failed, smcr, fallback_killed, fallback,
	       count_fds(), fds0, res1.qp, res1.mr, res1.cq, res1.pd, res0.qp, res0.mr, res0.cq,
	       res0.pd, rss1, rss0, rss_peak, heap1, heap0);
	if (count_fds() != fds0 || res1.qp != res0.qp || res1.mr != res0.mr || res1.cq != res0.cq ||
	    res1.pd != res0.pd) {
		leaks++, printf("  descriptors or verbs objects above the baseline\n");
		fd_diff(fd_base);
	}
	if (rss1 > rss0 + slack_kib)
		leaks++, printf("  RSS grew by %ld KiB (slack %ld)\n", rss1 - rss0, slack_kib);
	if (heap1 > heap0 + slack_kib)
		leaks++, printf("  heap in use grew by %ld KiB (slack %ld)\n", heap1 - heap0,
				slack_kib);
	if (fallback)
		bad++, printf("  %ld cycles ran TCP with a live peer\n", fallback);
	server_close(&srv);
	res_add(" conns=%ld opened=%ld smcr=%ld complete=%ld failed=%ld bytes_checked=%llu lost=%ld "
		"corrupted=%ld hangs=%ld leaks=%d detect_s=%.2f killed=%ld fds=%d/%d qp=%d/%d "
		"rss_kib=%ld/%ld heap_kib=%ld/%ld tcp_killed=%ld bad=%ld secs=%.1f",
		done, done - setup_failed, smcr, complete, failed, (unsigned long long)checked,
		lost, corrupt, hung, leaks, detect_max, killed, count_fds(), fds0, res1.qp, res0.qp,
		rss1, rss0, heap1, heap0, fallback_killed, bad, mono_s() - t0);
	res_print();
	CHECK(!usmc_ctx_destroy(ctx), "ctx destroy");
	CHECK(!lost && !corrupt && !hung && !leaks && !bad,
	      "soak: %ld lost, %ld corrupt, %ld hung, %d leaks, %ld expectations failed", lost,
	      corrupt, hung, leaks, bad);
}

/* ==== main ============================================================ */

int main(int argc, char **argv)
{
	const char *sc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	/* a failed scenario comes with the library's account of it (link
	 * groups up and down, DECLINEs, unanswered LLC requests) */
	setenv("USMC_LOG", "info", 0);
	self_exe = "/proc/self/exe";
	{
		static char exe[4096];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

		if (n > 0) {
			exe[n] = 0;
			self_exe = exe;
		}
	}
	if (argc < 3) {
		fprintf(stderr,
			"usage: fault_campaign <smc_kctl> lossy <fault> <pairing>\n"
			"       fault_campaign <smc_kctl> linkdown <pairing>\n"
			"       fault_campaign <smc_kctl> kill <pairing> <victim> <step>\n"
			"       fault_campaign <smc_kctl> soak <pairing> <survivor>\n"
			"in the guest: tests/rxe/vm-run.sh --setup two --smc -- ...\n"
			"(docs/faults.md; tests/rxe/run-fault-campaign.sh runs them all)\n");
		return 2;
	}
	kctl = argv[1];
	flow_kernel_detail = kdiag_cursors;
	sc = argv[2];
	host_a = getenv("USMC_TEST_HOST_A");
	host_b = getenv("USMC_TEST_HOST_B");
	if (!strcmp(sc, "peer"))
		run_peer(argc - 1, argv + 1);
	CHECK(host_a && host_b && strcmp(host_a, host_b),
	      "USMC_TEST_HOST_A/B: run in the guest's two-host setup (vm-run.sh --setup two --smc)");
	alarm((unsigned int)env_long("FAULT_ALARM_S", 3000)); /* a hang fails, never blocks CI */
	if (!strcmp(sc, "lossy") && argc == 5)
		run_lossy(argv[3], argv[4]);
	else if (!strcmp(sc, "linkdown") && argc == 4)
		run_linkdown(argv[3]);
	else if (!strcmp(sc, "kill") && argc == 6)
		run_kill(argv[3], argv[4], argv[5]);
	else if (!strcmp(sc, "soak") && argc == 5)
		run_soak(argv[3], argv[4]);
	else
		die("unknown scenario or arguments (run without arguments for the usage)");
	printf("PASS %s\n", sc);
	return 0;
}
