// SPDX-License-Identifier: MIT
/*
 * usmc <-> the Linux kernel's SMC-R, in the rxe guest with --smc
 * --setup two, as root: kernel-compat mode on, one UEID on both ends. Every
 * connection that should be SMC-R is checked on both ends (kernel: smc_diag
 * via smc_kctl; usmc: usmc_conn_info) and a TCP fallback FAILS. Data is
 * checked byte by byte at its offset (tests/common/pattern.h) on the
 * receiving end, whichever it is.
 *
 *   usage: test_kernel_interop <smc_kctl> [scenario]
 *
 * Scenarios (cmocka test names; one ctest each):
 *   k2u_data_client_close  kernel client -> usmc server, 64 MiB each way,
 *                          the client closes, the server sees EOF
 *   k2u_data_server_close  the same, the server closes, the client sees EOF
 *   u2k_data_client_close  usmc client -> kernel server, client closes
 *   u2k_data_server_close  usmc client -> kernel server, server closes
 *   k2u_sequential         300 connections one after another: 1 link group
 *   u2k_sequential         on each end (kernel: smc_kctl lgr; usmc: stats);
 *                          RMBs reused with their rkeys kept: usmc starts
 *                          no LLC flow in the second half
 *   k2u_concurrent         50 connections open at once, all in 1 link
 *   u2k_concurrent         group on each end, data on all at the same time;
 *                          twice, the second round on the pooled RMBs
 *   k2u_testlink           net.smc.smcr_testlink_time = 1 s: the kernel
 *   u2k_testlink           tests the idle link, usmc answers, data after
 *   killed_kernel_peer     the kernel server process is SIGKILLed while it
 *                          sends: the usmc client sees EOF/error, frees all
 *   killed_usmc_peer       the usmc server process is SIGKILLed while it
 *                          sends: the kernel client sees EOF/error (the
 *                          kernel finds out by TEST_LINK: 2 s here)
 * Host A (USMC_TEST_HOST_A) runs the clients, host B the servers.
 * Env: USMC_INTEROP_BYTES (64 MiB) for the data scenarios, USMC_INTEROP_SEQ
 * (300) connections for the sequential ones.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "../common/pattern.h"
#include "conn.h"
#include "bufpool.h"
#include "ctx.h"
#include "kernel_peer.h"
#include "lgr.h"
#include "mono_clock.h"
#include "roce_cut.h"
#include "smcr_conn.h"

#define UEID	      "USMC-INTEROP-TEST"
#define TESTLINK_PATH "/proc/sys/net/smc/smcr_testlink_time"
#define CHUNK	      65536
#define CONC_CONNS    50

static const char *kctl, *host_a, *host_b;
static long saved_testlink = -1;

static int send_pattern(struct end *e, uint64_t seed, uint64_t bytes, char *err, size_t errlen)
{
	static _Thread_local uint8_t buf[CHUNK];

	for (uint64_t off = 0; off < bytes;) {
		size_t n = bytes - off < CHUNK ? (size_t)(bytes - off) : CHUNK;
		ssize_t r;

		pattern_fill(seed, off, buf, n);
		r = end_send(e, buf, n);
		if (r <= 0) {
			snprintf(err, errlen, "send at %llu: %s", (unsigned long long)off,
				 strerror(r ? (int)-r : EPIPE));
			return r ? (int)r : -EPIPE;
		}
		off += (uint64_t)r;
	}
	return 0;
}

/* Receives @bytes (or until EOF/error if @bytes is UINT64_MAX) and checks
 * each at its offset; *got says how many arrived. Returns 0 when all
 * arrived, the (<= 0) end of stream otherwise, -EBADMSG on a bad byte. */
static int recv_from(struct end *e, uint64_t seed, uint64_t start, uint64_t bytes, uint64_t *got,
		     char *err, size_t errlen)
{
	static _Thread_local uint8_t buf[CHUNK];
	uint64_t off = 0;

	while (off < bytes) {
		size_t n = bytes - off < CHUNK ? (size_t)(bytes - off) : CHUNK;
		ssize_t r = end_recv(e, buf, n);
		long long bad;

		if (r <= 0) {
			snprintf(err, errlen, "%s after %llu of %llu bytes",
				 r ? strerror((int)-r) : "EOF", (unsigned long long)off,
				 (unsigned long long)bytes);
			if (got)
				*got = off;
			return r ? (int)r : -ENODATA;
		}
		bad = pattern_check(seed, start + off, buf, (size_t)r);
		if (bad >= 0) {
			snprintf(err, errlen, "byte %lld differs from what was sent", bad);
			return -EBADMSG;
		}
		off += (uint64_t)r;
	}
	if (got)
		*got = off;
	return 0;
}

static int recv_pattern(struct end *e, uint64_t seed, uint64_t bytes, uint64_t *got, char *err,
			size_t errlen)
{
	return recv_from(e, seed, 0, bytes, got, err, errlen);
}

enum close_mode { KEEP_OPEN, CLOSE_FIRST, WAIT_EOF };

/* What one end does: receive then send (or the reverse), then close. */
struct script {
	struct end e;
	uint64_t bytes, seed_in, seed_out;
	bool recv_first;
	enum close_mode close;
	int rc;
	char err[160];
};

static void *run_script(void *arg)
{
	struct script *s = arg;
	char b;

	for (int step = 0; step < 2 && !s->rc; step++) {
		if ((step == 0) == s->recv_first)
			s->rc = recv_pattern(&s->e, s->seed_in, s->bytes, NULL, s->err,
					     sizeof(s->err));
		else
			s->rc = send_pattern(&s->e, s->seed_out, s->bytes, s->err, sizeof(s->err));
	}
	if (s->rc)
		return NULL;
	if (s->close == WAIT_EOF) {
		/* the peer closed after all its data: EOF, not an error */
		ssize_t n = end_recv(&s->e, &b, 1);

		if (n != 0) {
			snprintf(s->err, sizeof(s->err), "expected EOF, got %zd (%s)", n,
				 n < 0 ? strerror((int)-n) : "data");
			s->rc = -EPROTO;
		}
	}
	if (s->close != KEEP_OPEN && end_close(&s->e) && !s->rc) {
		snprintf(s->err, sizeof(s->err), "close failed");
		s->rc = -EIO;
	}
	return NULL;
}

/* ---- connections between usmc and the kernel */

struct pair {
	struct end cli, srv;
	bool k2u; /* kernel client, usmc server (else usmc client, kernel server) */
	int port; /* the server's port */
};

struct env {
	struct usmc_ctx *ctx;
	struct usmc_listener *l; /* k2u */
	int lfd;		 /* u2k: the kernel listener */
	int port;
	bool k2u;
};

static struct usmc_ctx *make_ctx(void)
{
	struct usmc_ctx *ctx;

	setenv("USMC_KERNEL_COMPAT", "1", 1);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	unsetenv("USMC_KERNEL_COMPAT");
	assert_int_equal(usmc_ctx_kernel_compat(ctx), 1);
	assert_int_equal(usmc_ctx_set_ueid(ctx, UEID), 0);
	return ctx;
}

static void env_open(struct env *v, bool k2u)
{
	memset(v, 0, sizeof(*v));
	v->k2u = k2u;
	v->lfd = -1;
	v->ctx = make_ctx();
	if (k2u) {
		struct sockaddr_in b = kpeer_addr(host_b, 0);
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);

		assert_int_equal(
			usmc_listen(v->ctx, (struct sockaddr *)&b, sizeof(b), 128, 0, &v->l), 0);
		assert_int_equal(usmc_listener_addr(v->l, &ss, &len), 0);
		v->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	} else {
		v->lfd = kpeer_listen(host_b, 0, 128);
		assert_true(v->lfd >= 0);
		v->port = kpeer_local_port(v->lfd);
	}
}

static void env_close(struct env *v)
{
	struct usmc_ctx_stats st;

	if (v->l)
		usmc_listener_close(v->l);
	if (v->lfd >= 0)
		close(v->lfd);
	usmc_ctx_stats(v->ctx, &st);
	assert_int_equal(st.open_conns, 0);
	assert_int_equal(usmc_ctx_destroy(v->ctx), 0);
}

static void pair_open(struct env *v, struct pair *p)
{
	struct sockaddr_in b = kpeer_addr(host_b, v->port);

	p->k2u = v->k2u;
	p->port = v->port;
	if (v->k2u) {
		p->cli = (struct end){.fd = kpeer_connect(host_a, host_b, v->port)};
		assert_true(p->cli.fd >= 0);
		p->srv.fd = -1;
		assert_int_equal(usmc_accept(v->l, 0, &p->srv.c), 0);
	} else {
		p->cli.fd = -1;
		assert_int_equal(
			usmc_connect(v->ctx, (struct sockaddr *)&b, sizeof(b), 0, &p->cli.c), 0);
		p->srv = (struct end){.fd = accept(v->lfd, NULL, NULL)};
		assert_true(p->srv.fd >= 0);
	}
}

/* Both ends must say SMC-R; returns the usmc end's link group id. */
static uint32_t expect_smcr(const struct pair *p)
{
	const struct end *u = p->k2u ? &p->srv : &p->cli, *k = p->k2u ? &p->cli : &p->srv;
	struct usmc_conn_info ci;
	struct kdiag d = {0};
	int rc;

	assert_int_equal(usmc_conn_info(u->c, &ci), 0);
	if (ci.mode != USMC_MODE_SMCR)
		fail_msg("usmc %s runs %s (reason %#x %s%s), not SMC-R",
			 p->k2u ? "server" : "client", usmc_mode_name(ci.mode), ci.reason,
			 usmc_reason_name(ci.reason),
			 ci.peer_declined ? ", declined by the kernel" : "");
	assert_int_equal(ci.smc_version, 2);
	if (p->k2u) {
		rc = kpeer_diag(kctl, host_a, kpeer_local_port(k->fd), host_b, p->port, &d);
	} else {
		struct sockaddr_in *la = (struct sockaddr_in *)&ci.local;
		char ip[INET_ADDRSTRLEN];

		inet_ntop(AF_INET, &la->sin_addr, ip, sizeof(ip));
		rc = kpeer_diag(kctl, host_b, p->port, ip, ntohs(la->sin_port), &d);
	}
	if (rc)
		fail_msg("no smc_diag entry for the kernel %s", p->k2u ? "client" : "server");
	if (strcmp(d.mode, "SMC-R"))
		fail_msg("kernel %s runs %s (fallback %#x, peer diagnosis %#x), not SMC-R",
			 p->k2u ? "client" : "server", d.mode, d.fallback, d.peer_diagnosis);
	return ci.lgr_id;
}

static void scripts_for(struct pair *p, uint64_t bytes, uint64_t seed, bool client_closes,
			struct script *cs, struct script *ss)
{
	*cs = (struct script){.e = p->cli,
			      .bytes = bytes,
			      .seed_in = seed + 1,
			      .seed_out = seed,
			      .recv_first = false,
			      .close = client_closes ? CLOSE_FIRST : WAIT_EOF};
	*ss = (struct script){.e = p->srv,
			      .bytes = bytes,
			      .seed_in = seed,
			      .seed_out = seed + 1,
			      .recv_first = true,
			      .close = client_closes ? WAIT_EOF : CLOSE_FIRST};
}

static void check_script(const struct script *s, const char *who, int i)
{
	if (s->rc)
		fail_msg("connection %d, %s: %s", i, who, s->err);
}

/* @bytes each way on @p, then one side closes and the other sees EOF. */
static void exchange(struct pair *p, uint64_t bytes, uint64_t seed, bool client_closes, int i)
{
	struct script cs, ss;
	pthread_t th;

	scripts_for(p, bytes, seed, client_closes, &cs, &ss);
	assert_int_equal(pthread_create(&th, NULL, run_script, &ss), 0);
	run_script(&cs);
	pthread_join(th, NULL);
	check_script(&cs, p->k2u ? "kernel client" : "usmc client", i);
	check_script(&ss, p->k2u ? "usmc server" : "kernel server", i);
}

/* ---- 64 MiB each way, closed by either side */

static void data_test(bool k2u, bool client_closes)
{
	uint64_t bytes = (uint64_t)strtoull(getenv("USMC_INTEROP_BYTES") ?: "67108864", NULL, 0);
	struct env v;
	struct pair p;
	double t0;

	env_open(&v, k2u);
	pair_open(&v, &p);
	expect_smcr(&p);
	t0 = mono_s();
	exchange(&p, bytes, 0x5eed, client_closes, 0);
	print_message(
		"  %s: %llu bytes each way checked in %.2f s (%.1f MB/s both ways), %s closed, "
		"peer saw EOF\n",
		k2u ? "kernel client -> usmc server" : "usmc client -> kernel server",
		(unsigned long long)bytes, mono_s() - t0,
		2.0 * (double)bytes / (mono_s() - t0) / 1e6, client_closes ? "client" : "server");
	env_close(&v);
}

static void test_k2u_data_client_close(void **state)
{
	data_test(true, true);
}

static void test_k2u_data_server_close(void **state)
{
	data_test(true, false);
}

static void test_u2k_data_client_close(void **state)
{
	data_test(false, true);
}

static void test_u2k_data_server_close(void **state)
{
	data_test(false, false);
}

/* ---- link group reuse */

/* The kernel link groups made since @before: exactly one, of @role, with
 * @conns connections (-1: any). */
static void expect_one_new_klgr(const struct klgr *before, int nb, const char *role, int conns)
{
	struct klgr now[KPEER_MAX_LGRS], fresh[KPEER_MAX_LGRS];
	int nn = kpeer_lgrs(kctl, now, KPEER_MAX_LGRS), k;

	assert_true(nn >= 0 && nn <= KPEER_MAX_LGRS);
	k = kpeer_new_lgrs(before, nb, now, nn, fresh);
	for (int i = 0; i < k; i++)
		print_message("  kernel: new lgr id=%#x role=%s conns=%u %s\n", fresh[i].id,
			      fresh[i].role, fresh[i].conns, fresh[i].version);
	if (k != 1)
		fail_msg("%d new kernel link groups, 1 expected", k);
	assert_string_equal(fresh[0].role, role);
	assert_string_equal(fresh[0].version, "SMC-Rv2");
	if (conns >= 0)
		assert_int_equal(fresh[0].conns, conns);
}

static void expect_usmc_lgrs(struct usmc_ctx *ctx)
{
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	print_message("  usmc: %llu link groups created, %llu open; %llu SMC-R, %llu fallbacks\n",
		      (unsigned long long)st.lgrs_created, (unsigned long long)st.lgrs_open,
		      (unsigned long long)st.smcr, (unsigned long long)st.fallbacks);
	assert_int_equal(st.lgrs_created, 1);
	assert_int_equal(st.lgrs_open, 1);
	assert_int_equal(st.fallbacks, 0);
}

/* What the usmc end's LLC did, summed over its link groups. */
struct llc_view {
	uint64_t rkey_flows; /* CONFIRM_RKEY and DELETE_RKEY requests it started */
	uint64_t test_links; /* TEST_LINK probes it started (keepalive, a peer gone quiet) */
	uint64_t barriers;   /* barrier TEST_LINKs (held EOFs, hang-ups: smcr_llc_barrier()) */
	uint64_t rmbs;	     /* RMBs its pools hold: each new one costs one CONFIRM_RKEY */
};

/* The requests usmc itself started, by kind (each counted as it left, never
 * derived from totals that an answer in flight updates one at a time). */
static struct llc_view usmc_llc_view(struct usmc_ctx *ctx)
{
	struct llc_view v = {0};
	struct lgr *l;

	pthread_mutex_lock(&ctx->rdma.lock);
	for (l = ctx->rdma.lgrs; l; l = l->next) {
		v.rkey_flows += atomic_load(&l->llc.rkey_requests);
		v.barriers += atomic_load(&l->llc.barrier_gen);
		v.test_links += atomic_load(&l->llc.test_link_sent);
		for (uint8_t c = 0; c < SMC_BUF_CLASSES; c++)
			v.rmbs += bufpool_class_count(l->rmbs, c);
	}
	pthread_mutex_unlock(&ctx->rdma.lock);
	return v;
}

static void sequential_test(bool k2u)
{
	const int seq_conns = (int)strtol(getenv("USMC_INTEROP_SEQ") ?: "300", NULL, 0);
	struct llc_view half = {0}, end;
	struct klgr before[KPEER_MAX_LGRS];
	int nb = kpeer_lgrs(kctl, before, KPEER_MAX_LGRS);
	uint32_t lgr0 = 0;
	struct env v;
	double t0 = mono_s();

	assert_true(nb >= 0 && nb <= KPEER_MAX_LGRS);
	assert_true(seq_conns >= 2);
	env_open(&v, k2u);
	for (int i = 0; i < seq_conns; i++) {
		struct pair p;
		uint32_t id;

		if (i == seq_conns / 2)
			half = usmc_llc_view(v.ctx);
		pair_open(&v, &p);
		id = expect_smcr(&p);
		if (!i)
			lgr0 = id;
		else if (id != lgr0)
			fail_msg("connection %d in link group %#x, the first in %#x", i, id, lgr0);
		exchange(&p, 16384 + (uint64_t)i * 97, (uint64_t)i << 8, i & 1, i);
	}
	print_message("  %d sequential connections, SMC-R and checked on both ends, %.1f s\n",
		      seq_conns, mono_s() - t0);
	usleep(200000); /* a DELETE_RKEY is not waited for */
	end = usmc_llc_view(v.ctx);
	print_message("  second half: usmc started %llu rkey flows (reused RMBs keep their "
		      "rkeys), %llu TEST_LINK probes, %llu barriers; its pool grew by "
		      "%llu RMBs to %llu\n",
		      (unsigned long long)(end.rkey_flows - half.rkey_flows),
		      (unsigned long long)(end.test_links - half.test_links),
		      (unsigned long long)(end.barriers - half.barriers),
		      (unsigned long long)(end.rmbs - half.rmbs), (unsigned long long)end.rmbs);
	/* a connection that opens before the last one's RMB came back gets a
	 * new RMB, confirmed once; nothing else may start an rkey flow, and
	 * no peer went quiet long enough to be probed */
	if (end.rkey_flows - half.rkey_flows > end.rmbs - half.rmbs)
		fail_msg("usmc started %llu rkey flows in the steady state, at most %llu "
			 "(one per new RMB) expected",
			 (unsigned long long)(end.rkey_flows - half.rkey_flows),
			 (unsigned long long)(end.rmbs - half.rmbs));
	if (end.test_links != half.test_links)
		fail_msg("usmc probed the kernel peer with TEST_LINK in the steady state");
	if (end.rmbs > 8)
		fail_msg("%llu RMBs for sequential connections: released RMBs are not reused",
			 (unsigned long long)end.rmbs);
	expect_one_new_klgr(before, nb, k2u ? "client" : "server", 0);
	expect_usmc_lgrs(v.ctx);
	env_close(&v);
}

static void test_k2u_sequential(void **state)
{
	sequential_test(true);
}

static void test_u2k_sequential(void **state)
{
	sequential_test(false);
}

/* Connections in the one kernel link group made since @before (-1: none). */
static int klgr_conns(const struct klgr *before, int nb)
{
	struct klgr now[KPEER_MAX_LGRS], fresh[KPEER_MAX_LGRS];
	int nn = kpeer_lgrs(kctl, now, KPEER_MAX_LGRS);

	if (nn < 0 || nn > KPEER_MAX_LGRS || kpeer_new_lgrs(before, nb, now, nn, fresh) != 1)
		return -1;
	return (int)fresh[0].conns;
}

/* One round of CONC_CONNS at once; the second runs on the pooled RMBs. */
static void concurrent_round(struct env *vp, int round, const struct klgr *before, int nb,
			     uint32_t *lgr0p)
{
	static struct pair p[CONC_CONNS];
	static struct script cs[CONC_CONNS], ss[CONC_CONNS];
	pthread_t th[2 * CONC_CONNS];
	struct env v = *vp;
	bool k2u = v.k2u;
	uint32_t lgr0 = *lgr0p;
	double t0;

	for (int i = 0; i < CONC_CONNS; i++) {
		uint32_t id;

		pair_open(&v, &p[i]);
		id = expect_smcr(&p[i]);
		if (!i && !round)
			lgr0 = *lgr0p = id;
		else if (id != lgr0)
			fail_msg("connection %d in link group %#x, the first in %#x", i, id, lgr0);
	}
	/* all open: one link group on each end, holding all of them */
	expect_one_new_klgr(before, nb, k2u ? "client" : "server", CONC_CONNS);
	expect_usmc_lgrs(v.ctx);
	t0 = mono_s();
	for (int i = 0; i < CONC_CONNS; i++) {
		scripts_for(&p[i], 1 << 20, (uint64_t)i << 8, i & 1, &cs[i], &ss[i]);
		assert_int_equal(pthread_create(&th[2 * i], NULL, run_script, &cs[i]), 0);
		assert_int_equal(pthread_create(&th[2 * i + 1], NULL, run_script, &ss[i]), 0);
	}
	for (int i = 0; i < 2 * CONC_CONNS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < CONC_CONNS; i++) {
		check_script(&cs[i], k2u ? "kernel client" : "usmc client", i);
		check_script(&ss[i], k2u ? "usmc server" : "kernel server", i);
	}
	print_message("  round %d: %d concurrent connections, 1 MiB each way each, checked in "
		      "%.1f s\n",
		      round + 1, CONC_CONNS, mono_s() - t0);
	/* every connection ended on both sides before the next round */
	for (int w = 0; w < 100 && klgr_conns(before, nb) != 0; w++)
		usleep(50000);
}

static void concurrent_test(bool k2u)
{
	struct klgr before[KPEER_MAX_LGRS];
	int nb = kpeer_lgrs(kctl, before, KPEER_MAX_LGRS);
	uint32_t lgr0 = 0;
	struct env v;

	assert_true(nb >= 0 && nb <= KPEER_MAX_LGRS);
	env_open(&v, k2u);
	for (int round = 0; round < 2; round++)
		concurrent_round(&v, round, before, nb, &lgr0);
	expect_one_new_klgr(before, nb, k2u ? "client" : "server", 0);
	env_close(&v);
}

static void test_k2u_concurrent(void **state)
{
	concurrent_test(true);
}

static void test_u2k_concurrent(void **state)
{
	concurrent_test(false);
}

/* ---- TEST_LINK from the kernel */

static int set_testlink(long seconds)
{
	if (kpeer_sysctl_get(TESTLINK_PATH, &saved_testlink))
		return -1;
	/* read when a link is made: set before the link group exists */
	return kpeer_sysctl_set(TESTLINK_PATH, seconds);
}

static int testlink_setup(void **state)
{
	return set_testlink(1);
}

/* The kernel does not watch the TCP socket of an SMC-R connection: a peer
 * that died silently is found by TEST_LINK (idle time, then 2 s for the
 * answer). 2 s here instead of the default 30 s bounds the test. */
static int killed_setup(void **state)
{
	return set_testlink(2);
}

static int testlink_teardown(void **state)
{
	return saved_testlink < 0 ? 0 : kpeer_sysctl_set(TESTLINK_PATH, saved_testlink);
}

static void testlink_test(bool k2u)
{
	struct script cs, ss;
	uint64_t answered;
	struct lgr *lgr;
	struct end *u;
	struct env v;
	struct pair p;
	pthread_t th;

	env_open(&v, k2u);
	/* usmc never tests on its own: what it answers, the kernel asked */
	assert_int_equal(usmc_ctx_setopt(v.ctx, USMC_OPT_TESTLINK_MS, 0), 0);
	pair_open(&v, &p);
	expect_smcr(&p);
	u = k2u ? &p.srv : &p.cli;
	lgr = u->c->smcr->lgr;
	/* a little data, then idle for several TEST_LINK rounds */
	scripts_for(&p, 4096, 1, true, &cs, &ss);
	cs.close = ss.close = KEEP_OPEN;
	assert_int_equal(pthread_create(&th, NULL, run_script, &ss), 0);
	run_script(&cs);
	pthread_join(th, NULL);
	check_script(&cs, "client", 0);
	check_script(&ss, "server", 0);
	sleep(6);
	answered = atomic_load(&lgr->llc.test_link_answered);
	print_message("  idle 6 s with smcr_testlink_time=1: usmc answered %llu TEST_LINKs, "
		      "sent %llu\n",
		      (unsigned long long)answered,
		      (unsigned long long)atomic_load(&lgr->llc.test_link_sent));
	assert_true(answered >= 3);
	/* still SMC-R, still moving data */
	expect_smcr(&p);
	exchange(&p, 1 << 20, 7, true, 0);
	env_close(&v);
}

static void test_k2u_testlink(void **state)
{
	testlink_test(true);
}

static void test_u2k_testlink(void **state)
{
	testlink_test(false);
}

/* ---- the peer process killed mid-transfer */

/* A child that listens on host B as a kernel AF_SMC (or usmc) server,
 * tells the port, accepts one connection and sends a pattern forever. */
static pid_t spawn_sender(bool usmc, int *port)
{
	int pfd[2];
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct end e = {.fd = -1};
		char err[160];
		int p;

		close(pfd[0]);
		if (usmc) {
			struct env v;

			env_open(&v, true);
			p = v.port;
			if (write(pfd[1], &p, sizeof(p)) != sizeof(p) || usmc_accept(v.l, 0, &e.c))
				_exit(3);
		} else {
			int lfd = kpeer_listen(host_b, 0, 4);

			p = lfd >= 0 ? kpeer_local_port(lfd) : -1;
			if (write(pfd[1], &p, sizeof(p)) != sizeof(p) || p < 0)
				_exit(3);
			e.fd = accept(lfd, NULL, NULL);
			if (e.fd < 0)
				_exit(3);
		}
		send_pattern(&e, 42, UINT64_MAX, err, sizeof(err));
		_exit(4);
	}
	close(pfd[1]);
	assert_int_equal(read(pfd[0], port, sizeof(*port)), (ssize_t)sizeof(*port));
	close(pfd[0]);
	assert_true(*port > 0);
	return pid;
}

/* Receive checked data until @first bytes arrived, kill @pid, then read on:
 * the stream must end (EOF or an error) within @bound seconds. */
static void read_then_kill(struct end *e, pid_t pid, uint64_t first, double bound, const char *who)
{
	uint64_t got = 0, more = 0;
	char err[160];
	double t0;
	int rc;

	rc = recv_pattern(e, 42, first, &got, err, sizeof(err));
	if (rc)
		fail_msg("before the kill: %s", err);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	t0 = mono_s();
	rc = recv_from(e, 42, got, UINT64_MAX, &more, err, sizeof(err));
	/* UINT64_MAX never all arrives: rc is the end of the stream */
	if (rc == -EBADMSG)
		fail_msg("after the kill: %s", err);
	print_message("  %s: peer killed after %llu bytes; %llu more checked bytes, then %s after "
		      "%.2f s\n",
		      who, (unsigned long long)first, (unsigned long long)more,
		      rc == -ENODATA ? "EOF" : strerror(-rc), mono_s() - t0);
	assert_true(mono_s() - t0 < bound);
}

static void test_killed_kernel_peer(void **state)
{
	struct usmc_ctx_stats st;
	struct env v;
	struct pair p = {.k2u = false};
	struct sockaddr_in b;
	ssize_t sent;
	int port;
	pid_t pid = spawn_sender(false, &port); /* fork before any verbs state */

	v = (struct env){.lfd = -1, .port = port};
	v.ctx = make_ctx();
	b = kpeer_addr(host_b, port);
	p.port = port;
	p.cli.fd = -1;
	p.srv.fd = -1;
	assert_int_equal(usmc_connect(v.ctx, (struct sockaddr *)&b, sizeof(b), 0, &p.cli.c), 0);
	expect_smcr(&p); /* the kernel end is found by the usmc address */
	read_then_kill(&p.cli, pid, 8 << 20, 10, "usmc client");
	/* Linux refuses a send once the peer's close CDC came (ECONNRESET);
	 * usmc still takes it, like TCP after a FIN (docs/interop.md) */
	sent = usmc_send(p.cli.c, "x", 1, 0);
	print_message("  usmc_send after the peer's close: %zd (%s)\n", sent,
		      sent < 0 ? usmc_strerror((int)sent) : "accepted");
	assert_int_equal(usmc_close(p.cli.c), 0);
	usmc_ctx_stats(v.ctx, &st);
	print_message("  usmc: open connections %llu, link groups open %llu (the kernel lives)\n",
		      (unsigned long long)st.open_conns, (unsigned long long)st.lgrs_open);
	assert_int_equal(st.open_conns, 0);
	assert_int_equal(usmc_ctx_destroy(v.ctx), 0);
}

static void test_killed_usmc_peer(void **state)
{
	struct klgr before[KPEER_MAX_LGRS], now[KPEER_MAX_LGRS], fresh[KPEER_MAX_LGRS];
	int nb = kpeer_lgrs(kctl, before, KPEER_MAX_LGRS), nn, k = 0, port, i;
	struct end e;
	pid_t pid;
	double t0;

	assert_true(nb >= 0 && nb <= KPEER_MAX_LGRS);
	pid = spawn_sender(true, &port); /* this process never opens verbs */
	e = (struct end){.fd = kpeer_connect(host_a, host_b, port)};
	assert_true(e.fd >= 0);
	{
		struct kdiag d = {0};

		assert_int_equal(kpeer_diag(kctl, host_a, kpeer_local_port(e.fd), host_b, port, &d),
				 0);
		if (strcmp(d.mode, "SMC-R"))
			fail_msg("kernel client runs %s (fallback %#x), not SMC-R", d.mode,
				 d.fallback);
	}
	read_then_kill(&e, pid, 8 << 20, 15, "kernel client");
	close(e.fd);
	/* the kernel's link group to the dead process goes away too */
	t0 = mono_s();
	for (i = 0; i < 300; i++) {
		nn = kpeer_lgrs(kctl, now, KPEER_MAX_LGRS);
		assert_true(nn >= 0 && nn <= KPEER_MAX_LGRS);
		k = kpeer_new_lgrs(before, nb, now, nn, fresh);
		if (!k)
			break;
		usleep(100000);
	}
	print_message("  kernel: link group to the dead peer %s %.1f s after the close\n",
		      k ? "still there" : "freed", mono_s() - t0);
	assert_int_equal(k, 0);
}

/* ---- the RDMA path cut during a first contact: one DECLINE crosses */

static int rdmacut_setup(void **state)
{
	return roce_cut(true);
}

static int rdmacut_teardown(void **state)
{
	roce_cut(false);
	return 0;
}

/*
 * CLC goes through, CONFIRM_LINK does not: both ends fall back to TCP and
 * one DECLINE crosses, consumed by whoever gave up last. The first bytes
 * each application reads must be the other's data, never a DECLINE.
 */
static void rdmacut_test(bool k2u)
{
	struct usmc_conn_info ci;
	struct env v;
	struct pair p;
	char buf[8] = "";
	double t0 = mono_s();

	env_open(&v, k2u);
	pair_open(&v, &p);
	assert_int_equal(usmc_conn_info(k2u ? p.srv.c : p.cli.c, &ci), 0);
	print_message("  %s without RDMA: usmc %s %s%s after %.1f s\n", k2u ? "k2u" : "u2k",
		      usmc_mode_name(ci.mode), usmc_reason_name(ci.reason),
		      ci.peer_declined ? " (declined by the kernel)" : "", mono_s() - t0);
	assert_int_equal(ci.mode, USMC_MODE_TCP);
	assert_int_equal(end_send(&p.cli, "hello", 5), 5);
	assert_int_equal(end_recv(&p.srv, buf, 5), 5);
	if (memcmp(buf, "hello", 5))
		fail_msg("server read %02x %02x %02x %02x, not the client's data", (uint8_t)buf[0],
			 (uint8_t)buf[1], (uint8_t)buf[2], (uint8_t)buf[3]);
	assert_int_equal(end_send(&p.srv, "world", 5), 5);
	assert_int_equal(end_recv(&p.cli, buf, 5), 5);
	if (memcmp(buf, "world", 5))
		fail_msg("client read %02x %02x %02x %02x, not the server's data", (uint8_t)buf[0],
			 (uint8_t)buf[1], (uint8_t)buf[2], (uint8_t)buf[3]);
	end_close(&p.cli);
	end_close(&p.srv);
	env_close(&v);
}

static void test_k2u_rdmacut(void **state)
{
	rdmacut_test(true);
}

static void test_u2k_rdmacut(void **state)
{
	rdmacut_test(false);
}

static int group_setup(void **state)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "'%s' ueid flush && '%s' ueid add %s", kctl, kctl, UEID);
	return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_k2u_data_client_close),
		cmocka_unit_test(test_k2u_data_server_close),
		cmocka_unit_test(test_u2k_data_client_close),
		cmocka_unit_test(test_u2k_data_server_close),
		cmocka_unit_test(test_k2u_sequential),
		cmocka_unit_test(test_u2k_sequential),
		cmocka_unit_test(test_k2u_concurrent),
		cmocka_unit_test(test_u2k_concurrent),
		cmocka_unit_test_setup_teardown(test_k2u_testlink, testlink_setup,
						testlink_teardown),
		cmocka_unit_test_setup_teardown(test_u2k_testlink, testlink_setup,
						testlink_teardown),
		cmocka_unit_test(test_killed_kernel_peer),
		cmocka_unit_test_setup_teardown(test_k2u_rdmacut, rdmacut_setup, rdmacut_teardown),
		cmocka_unit_test_setup_teardown(test_u2k_rdmacut, rdmacut_setup, rdmacut_teardown),
		cmocka_unit_test_setup_teardown(test_killed_usmc_peer, killed_setup,
						testlink_teardown),
	};
	char filter[64];

	kctl = argc > 1 ? argv[1] : NULL;
	host_a = getenv("USMC_TEST_HOST_A");
	host_b = getenv("USMC_TEST_HOST_B");
	if (!kctl || !host_a || !host_b || !strcmp(host_a, host_b)) {
		fprintf(stderr, "usage: test_kernel_interop <smc_kctl> [scenario], in the guest:\n"
				"  tests/rxe/vm-run.sh --smc --setup two -- <this> <smc_kctl>\n");
		return 1;
	}
	if (argc > 2) {
		snprintf(filter, sizeof(filter), "test_%s", argv[2]);
		cmocka_set_test_filter(filter);
	}
	return cmocka_run_group_tests(tests, group_setup, NULL);
}
