// SPDX-License-Identifier: MIT
/*
 * One address must not hold the listener (docs/listener.md "One
 * address"), over loopback with the real wire. A hostile client bound to
 * 127.0.0.2 keeps HOSTILE sockets open against a listener of backlog
 * BACKLOG, each showing only the 8-byte header of a CLC PROPOSAL, and
 * renews each one the listener closes, a little later. Meanwhile, from
 * 127.0.0.1, a plain TCP client, an SMC client (a whole PROPOSAL, then the
 * DECLINE: no RDMA device here) and a usmc client connect ROUNDS times
 * each: every one must reach the application within ACCEPT_MS.
 *   test_userspace_only  the userspace-only mode;
 *   test_kernel_compat   the kernel-compatible mode, the hostile and SMC
 *                        clients' SYNs with the option (skipped where the
 *                        BPF program cannot load: not root, no cgroup v2);
 *   test_share_refusal   the rules step by step: what an address past its
 *                        share gets, and the short bound on a header.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "common/loopback.h"
#include "ctx.h"
#include "kcompat.h"
#include "linux_proposal.h"
#include "mono_clock.h"

#define BACKLOG	  16
#define HOSTILE	  (3 * BACKLOG) /* more than the backlog and the kernel's queue */
#define ROUNDS	  10
#define ACCEPT_MS 1000 /* what an honest client may wait, attacked */
#define BUDGET_MS 2500 /* when a round gives up (the old code needs seconds) */
#define PASS_MS	  20   /* the attacker's pass over its sockets */
/*
 * A socket the listener closed is opened again RENEW_MS plus up to
 * RENEW_SPREAD_MS later, and the first ones are opened spread over two
 * thirds of SETTLE_MS: the attacker renews what it loses as independent
 * clients would, not in bursts. A burst of SYNs larger than the kernel's
 * accept queue (the backlog) overflows it whatever the listener does, as
 * for any TCP server, and a SYN dropped there is sent again only after
 * 1 s, past ACCEPT_MS: the honest clients' SYNs among them with it.
 */
#define RENEW_MS	300
#define RENEW_SPREAD_MS 1400
#define SETTLE_MS	1500 /* the attack in force before the first round */
/* between rounds: the attack outlasts LISTEN_CLC_REST_MS (2 s), so that the
 * attacker renews the places the listener cut */
#define GAP_MS	     300
#define TAG_MS	     200 /* an honest client's tag follows its connect at once */
#define TAGS	     (1 + 3 * ROUNDS)
#define HOSTILE_ADDR "127.0.0.2"

/* A PROPOSAL's header (SMC-Rv2, 652 bytes announced) and nothing more. */
static const uint8_t proposal_hdr[8] = {0xE2, 0xD4, 0xC3, 0xD9, 0x01, 0x02, 0x8C, 0x20};

struct attacker {
	struct sockaddr_in to;
	struct kcompat *kc; /* kernel-compatible mode: SYNs with the option */
	atomic_bool stop;
	int fds[HOSTILE];
	bool sent[HOSTILE];
	long renew_at[HOSTILE]; /* when to open it (again) */
	unsigned int seed;
	long opened, cut; /* attacker thread; read after the join */
	pthread_t t;
};

static int hostile_socket(struct attacker *a)
{
	struct sockaddr_in from = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	uint32_t ticket = 0;

	assert_true(fd >= 0);
	inet_pton(AF_INET, HOSTILE_ADDR, &from.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&from, sizeof(from)), 0);
	if (a->kc)
		ticket = kcompat_mark_client(a->kc, fd);
	if (connect(fd, (struct sockaddr *)&a->to, sizeof(a->to)) && errno != EINPROGRESS)
		fail_msg("hostile connect: %s", strerror(errno));
	if (a->kc)
		kcompat_client_forget(a->kc, &ticket);
	a->opened++;
	return fd;
}

/* One socket's step: open it, send the header once connected, renew it
 * once the listener closed it. */
static void hostile_step(struct attacker *a, int i, short revents)
{
	uint8_t b[64];

	if (a->fds[i] < 0) {
		if (mono_ms() < a->renew_at[i])
			return;
		a->fds[i] = hostile_socket(a);
		a->sent[i] = false;
		return;
	}
	if (!a->sent[i] && (revents & POLLOUT) && !(revents & (POLLERR | POLLHUP))) {
		if (send(a->fds[i], proposal_hdr, sizeof(proposal_hdr), MSG_NOSIGNAL) ==
		    (ssize_t)sizeof(proposal_hdr)) {
			a->sent[i] = true;
		}
		return;
	}
	if ((revents & (POLLIN | POLLERR | POLLHUP)) && recv(a->fds[i], b, sizeof(b), 0) <= 0) {
		close(a->fds[i]);
		a->fds[i] = -1;
		a->renew_at[i] = mono_ms() + RENEW_MS + rand_r(&a->seed) % RENEW_SPREAD_MS;
		a->cut++;
	}
}

static void *attacker_main(void *arg)
{
	struct attacker *a = arg;
	struct pollfd p[HOSTILE];

	for (int i = 0; i < HOSTILE; i++) {
		a->fds[i] = -1;
		a->renew_at[i] = mono_ms() + i * (SETTLE_MS * 2 / 3 / HOSTILE);
	}
	while (!atomic_load(&a->stop)) {
		for (int i = 0; i < HOSTILE; i++)
			p[i] = (struct pollfd){.fd = a->fds[i],
					       .events = a->sent[i] ? POLLIN : POLLOUT};
		poll(p, HOSTILE, PASS_MS);
		for (int i = 0; i < HOSTILE; i++)
			hostile_step(a, i, a->fds[i] < 0 ? 0 : p[i].revents);
	}
	for (int i = 0; i < HOSTILE; i++)
		if (a->fds[i] >= 0)
			close(a->fds[i]);
	return NULL;
}

/*
 * The application: it accepts whatever the listener hands out, as a
 * server does, and notes when each honest client's connection (the first
 * byte it sends is its tag) reached it, and how; any other connection (an
 * attacker's that became TCP) is read and closed.
 */
struct app {
	struct usmc_listener *l;
	atomic_bool stop;
	atomic_long at_ms[TAGS];  /* when the tag's connection was accepted, 0 not yet */
	atomic_uint reason[TAGS]; /* its fallback reason */
	long others;		  /* app thread; read after the join */
	pthread_t t;
};

/* The first byte of @c within TAG_MS, or -1. */
static int first_byte(struct usmc_conn *c)
{
	struct pollfd p = {.fd = usmc_conn_fd(c), .events = POLLIN};
	uint8_t b;

	if (poll(&p, 1, TAG_MS) != 1 || usmc_recv(c, &b, 1, 0) != 1)
		return -1;
	return b;
}

static void app_take(struct app *a, struct usmc_conn *c, long at)
{
	struct usmc_conn_info info;
	int tag = first_byte(c);

	assert_int_equal(usmc_conn_info(c, &info), 0);
	if (tag > 0 && tag < TAGS && info.mode == USMC_MODE_TCP) {
		atomic_store(&a->reason[tag], info.reason);
		atomic_store(&a->at_ms[tag], at);
	} else {
		a->others++;
	}
	usmc_close(c);
}

static void *app_main(void *arg)
{
	struct app *a = arg;
	struct pollfd p = {.fd = usmc_listener_fd(a->l), .events = POLLIN};
	struct usmc_conn *c;

	while (!atomic_load(&a->stop)) {
		poll(&p, 1, PASS_MS);
		while (usmc_accept(a->l, USMC_NONBLOCK, &c) == 0)
			app_take(a, c, mono_ms());
	}
	return NULL;
}

/* ms from @t0 until the application had the connection of @tag, or
 * BUDGET_MS + 1 if it did not within the budget; its reason checked. */
static long accepted_after(struct app *a, long t0, uint8_t tag, uint32_t reason)
{
	long at;

	while (!(at = atomic_load(&a->at_ms[tag])) && mono_ms() - t0 <= BUDGET_MS)
		usleep(1000);
	if (!at)
		return BUDGET_MS + 1;
	if (reason)
		assert_string_equal(usmc_reason_name(atomic_load(&a->reason[tag])),
				    usmc_reason_name(reason));
	return at - t0;
}

/* A plain TCP client that speaks first (its @tag): ms until the
 * application has it. */
static long plain_round(struct app *a, const struct sockaddr_in *to, uint8_t tag)
{
	long t0 = mono_ms(), ms = BUDGET_MS + 1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct pollfd p = {.fd = fd, .events = POLLOUT};

	assert_true(fd >= 0);
	if (connect(fd, (const struct sockaddr *)to, sizeof(*to)) && errno != EINPROGRESS)
		fail_msg("connect: %s", strerror(errno));
	if (poll(&p, 1, BUDGET_MS) == 1 && send(fd, &tag, 1, MSG_NOSIGNAL) == 1)
		ms = accepted_after(a, t0, tag, 0);
	close(fd);
	return ms;
}

/* Read a whole CLC message (a DECLINE) from @fd within @deadline. */
static bool read_clc(int fd, long deadline)
{
	uint8_t m[128];
	size_t got = 0, need = 8;

	while (got < need) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		long left = deadline - mono_ms();
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) != 1)
			return false;
		n = recv(fd, m + got, need - got, 0);
		if (n <= 0)
			return false;
		got += (size_t)n;
		if (got == 8) {
			assert_int_equal(m[4], 4); /* a DECLINE */
			need = (size_t)m[5] << 8 | m[6];
			assert_true(need > 8 && need <= sizeof(m));
		}
	}
	return true;
}

/* An SMC client as Linux's sends it: its whole PROPOSAL at once, then the
 * server's DECLINE (no device here), then TCP: ms until the application
 * has it. In kernel-compatible mode its SYN carries the option. */
static long clc_round(struct kcompat *kc, struct app *a, const struct sockaddr_in *to, uint8_t tag)
{
	long t0 = mono_ms(), ms = BUDGET_MS + 1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	uint32_t ticket = 0;

	assert_true(fd >= 0);
	if (kc)
		ticket = kcompat_mark_client(kc, fd);
	if (connect(fd, (const struct sockaddr *)to, sizeof(*to)) && errno != EINPROGRESS)
		fail_msg("connect: %s", strerror(errno));
	if (poll(&p, 1, BUDGET_MS) == 1 &&
	    send(fd, linux_v2_proposal, sizeof(linux_v2_proposal), MSG_NOSIGNAL) ==
		    (ssize_t)sizeof(linux_v2_proposal) &&
	    read_clc(fd, t0 + BUDGET_MS) && send(fd, &tag, 1, MSG_NOSIGNAL) == 1)
		ms = accepted_after(a, t0, tag, USMC_REASON_NOSMCRDEV);
	if (kc)
		kcompat_client_forget(kc, &ticket);
	close(fd);
	return ms;
}

/* A usmc client (its CLC, then TCP: no device), asynchronous so that the
 * round keeps its budget: ms until the application has it. */
static long usmc_round(struct usmc_ctx *cc, struct app *a, const struct sockaddr_in *to,
		       uint8_t tag)
{
	long t0 = mono_ms(), ms = BUDGET_MS + 1;
	struct usmc_conn *cl = NULL;
	int rc = usmc_connect(cc, (const struct sockaddr *)to, sizeof(*to),
			      USMC_NONBLOCK | USMC_CONNECT_ASYNC, &cl);

	if (!rc) /* the TCP connect is under way */
		rc = usmc_connect_finish(cl);
	while (rc == -EINPROGRESS && mono_ms() - t0 < BUDGET_MS) {
		int tmo = -1, ev = usmc_connect_events(cl, &tmo);
		struct pollfd p = {.fd = usmc_conn_fd(cl), .events = (short)(ev > 0 ? ev : 0)};
		long left = BUDGET_MS - (mono_ms() - t0);

		poll(&p, 1, tmo < 0 || tmo > left ? (int)left : tmo);
		rc = usmc_connect_finish(cl);
	}
	if (rc == 0 && usmc_send(cl, &tag, 1, 0) == 1) {
		struct usmc_conn_info ci;

		assert_int_equal(usmc_conn_info(cl, &ci), 0);
		assert_int_equal(ci.mode, USMC_MODE_TCP);
		ms = accepted_after(a, t0, tag, 0);
	}
	if (cl)
		usmc_close(cl);
	return ms;
}

static long worst(const long *v, int n, int *within)
{
	long w = 0;

	*within = 0;
	for (int i = 0; i < n; i++) {
		w = v[i] > w ? v[i] : w;
		*within += v[i] < ACCEPT_MS;
	}
	return w;
}

static void attack(bool kernel_compat)
{
	struct usmc_ctx *sc, *cc;
	struct usmc_listener *l;
	struct sockaddr_storage ss;
	socklen_t len;
	struct attacker a = {0};
	struct app app = {0};
	struct usmc_listener_stats st0, st;
	long plain[ROUNDS], clc[ROUNDS], usmc[ROUNDS], wp, wc, wu;
	int np, nc, nu;

	setenv("USMC_KERNEL_COMPAT", kernel_compat ? "auto" : "0", 1);
	assert_int_equal(usmc_ctx_create(&sc), 0);
	assert_int_equal(usmc_ctx_create(&cc), 0);
	if (kernel_compat && (!usmc_ctx_kernel_compat(sc) || !usmc_ctx_kernel_compat(cc))) {
		usmc_ctx_destroy(cc);
		usmc_ctx_destroy(sc);
		print_message("kernel-compat mode unavailable here (not root, no BPF or no "
			      "cgroup v2): skipped\n");
		skip();
	}
	l = lo_listen(sc, BACKLOG, USMC_LISTEN_NONBLOCK, &ss, &len);
	memcpy(&a.to, &ss, sizeof(a.to));
	a.kc = kernel_compat ? cc->kc : NULL;
	app.l = l;
	assert_int_equal(pthread_create(&app.t, NULL, app_main, &app), 0);
	assert_int_equal(pthread_create(&a.t, NULL, attacker_main, &a), 0);
	usleep(SETTLE_MS * 1000);
	usmc_listener_stats(l, &st0);
	for (int i = 0; i < ROUNDS; i++) {
		plain[i] = plain_round(&app, &a.to, (uint8_t)(1 + i));
		clc[i] = clc_round(a.kc, &app, &a.to, (uint8_t)(1 + ROUNDS + i));
		usmc[i] = usmc_round(cc, &app, &a.to, (uint8_t)(1 + 2 * ROUNDS + i));
		usleep(GAP_MS * 1000);
	}
	atomic_store(&a.stop, true);
	pthread_join(a.t, NULL);
	atomic_store(&app.stop, true);
	pthread_join(app.t, NULL);
	usmc_listener_stats(l, &st);
	wp = worst(plain, ROUNDS, &np);
	wc = worst(clc, ROUNDS, &nc);
	wu = worst(usmc, ROUNDS, &nu);
	print_message("%s: %d hostile sockets from %s (%ld opened, %ld cut by the listener, %ld "
		      "reached the application), "
		      "backlog %d: within %d ms: plain clients %d/%d (worst %ld ms), SMC clients "
		      "%d/%d (worst %ld ms), usmc clients %d/%d (worst %ld ms); listener: "
		      "accepted %llu hs_failed %llu source_refused %llu backlog_full %llu "
		      "listen_drops %llu (%llu during the rounds)\n",
		      kernel_compat ? "kernel-compatible" : "userspace-only", HOSTILE, HOSTILE_ADDR,
		      a.opened, a.cut, app.others, BACKLOG, ACCEPT_MS, np, ROUNDS, wp, nc, ROUNDS,
		      wc, nu, ROUNDS, wu, (unsigned long long)st.accepted,
		      (unsigned long long)st.hs_failed, (unsigned long long)st.source_refused,
		      (unsigned long long)st.backlog_full, (unsigned long long)st.listen_drops,
		      (unsigned long long)(st.listen_drops - st0.listen_drops));
	assert_int_equal(np, ROUNDS);
	assert_int_equal(nc, ROUNDS);
	assert_int_equal(nu, ROUNDS);
	assert_true(st.source_refused > 0); /* the share, not luck, let them in */
	assert_int_equal(usmc_listener_close(l), 0);
	assert_int_equal(usmc_ctx_destroy(cc), 0);
	assert_int_equal(usmc_ctx_destroy(sc), 0);
}

/* A socket from @from to @to, connected, blocking. */
static int client_from(const char *from, const struct sockaddr_in *to)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, from, &a.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(connect(fd, (const struct sockaddr *)to, sizeof(*to)), 0);
	return fd;
}

/* The diagnosis of the DECLINE the server sends on @fd within @ms, or 0. */
static uint32_t decline_diag(int fd, long ms)
{
	uint8_t m[64];
	size_t got = 0, need = 8;
	uint32_t diag;

	while (got < need) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t n;

		if (poll(&p, 1, (int)ms) != 1 || (n = recv(fd, m + got, need - got, 0)) <= 0)
			return 0;
		got += (size_t)n;
		if (got == 8)
			need = (size_t)m[5] << 8 | m[6];
		assert_true(need >= 24 && need <= sizeof(m));
	}
	memcpy(&diag, m + 16, sizeof(diag));
	return ntohl(diag);
}

/* ms until the server closes @fd (EOF or reset), at most @ms. */
static long closed_after(int fd, long ms)
{
	long t0 = mono_ms();
	struct pollfd p = {.fd = fd, .events = POLLIN};
	uint8_t b;

	while (mono_ms() - t0 < ms)
		if (poll(&p, 1, (int)(ms - (mono_ms() - t0))) == 1 && recv(fd, &b, 1, 0) <= 0)
			return mono_ms() - t0;
	return ms;
}

/*
 * What an address past its share gets, step by step: backlog 4 (share 2).
 * Two header-only clients from the hostile address hold its two places.
 * Then its next header-only client is closed at once, and its whole
 * PROPOSAL is declined at once (SERVER_BUSY on the wire, TCP with SRC_BUSY
 * for the application), while another address's PROPOSAL is served as
 * usual. The held clients are cut LISTEN_CLC_REST_MS after their header,
 * not at the handshake's 10 s.
 */
static void test_share_refusal(void **state)
{
	struct sockaddr_storage ss;
	struct sockaddr_in to;
	socklen_t len;
	struct usmc_ctx *sc;
	struct usmc_listener *l;
	struct usmc_listener_stats st;
	int held, held2, over, whole, other;
	long t_held;

	(void)state;
	setenv("USMC_KERNEL_COMPAT", "0", 1);
	assert_int_equal(usmc_ctx_create(&sc), 0);
	assert_int_equal(usmc_ctx_setopt(sc, USMC_OPT_PROBE_MS, 10000), 0);
	l = lo_listen(sc, 4, USMC_LISTEN_NONBLOCK, &ss, &len);
	memcpy(&to, &ss, sizeof(to));
	held = client_from(HOSTILE_ADDR, &to);
	assert_int_equal(send(held, proposal_hdr, 8, 0), 8);
	t_held = mono_ms();
	held2 = client_from(HOSTILE_ADDR, &to);
	assert_int_equal(send(held2, proposal_hdr, 8, 0), 8);
	for (long t0 = mono_ms(); usmc_listener_stats(l, &st), st.in_handshake < 2; usleep(1000))
		assert_true(mono_ms() - t0 < 5000);
	over = client_from(HOSTILE_ADDR, &to);
	assert_int_equal(send(over, proposal_hdr, 8, 0), 8);
	assert_true(closed_after(over, 1000) < 1000);
	whole = client_from(HOSTILE_ADDR, &to);
	assert_int_equal(send(whole, linux_v2_proposal, sizeof(linux_v2_proposal), 0),
			 (ssize_t)sizeof(linux_v2_proposal));
	assert_int_equal(decline_diag(whole, 1000), USMC_REASON_SERVER_BUSY);
	other = client_from("127.0.0.1", &to);
	assert_int_equal(send(other, linux_v2_proposal, sizeof(linux_v2_proposal), 0),
			 (ssize_t)sizeof(linux_v2_proposal));
	assert_int_equal(decline_diag(other, 1000), USMC_REASON_NOSMCRDEV);
	/* the held one: cut after LISTEN_CLC_REST_MS (2 s), well before 10 s */
	t_held = mono_ms() - t_held + closed_after(held, 8000);
	print_message("a header-only PROPOSAL held for %ld ms\n", t_held);
	assert_true(t_held >= 1500 && t_held < 4000);
	usmc_listener_stats(l, &st);
	assert_int_equal(st.source_refused, 2);
	assert_int_equal(usmc_listener_fallback_count(l, USMC_REASON_SRC_BUSY), 1);
	assert_int_equal(usmc_listener_fallback_count(l, USMC_REASON_NOSMCRDEV), 1);
	assert_true(closed_after(held2, 4000) < 4000);
	usmc_listener_stats(l, &st);
	assert_int_equal(st.hs_failed, 3); /* the one closed at once, the held ones */
	close(held);
	close(held2);
	close(over);
	close(whole);
	close(other);
	assert_int_equal(usmc_listener_close(l), 0);
	assert_int_equal(usmc_ctx_destroy(sc), 0);
}

static void test_userspace_only(void **state)
{
	(void)state;
	attack(false);
}

static void test_kernel_compat(void **state)
{
	(void)state;
	attack(true);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_userspace_only),
		cmocka_unit_test(test_kernel_compat),
		cmocka_unit_test(test_share_refusal),
	};

	if (argc > 1) /* one test by name */
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
