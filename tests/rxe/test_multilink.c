// SPDX-License-Identifier: MIT
/*
 * A link group's second link (LLC ADD_LINK, then CONFIRM_LINK on the new
 * QP) between two libusmc contexts over the guest's two RoCE paths
 * (tests/rxe/vm-run.sh --setup twopath):
 *
 *  1. both ends allow two links (USMC_OPT_MAX_LINKS 2): after a first
 *     contact over path 1, each end's link group holds two ACTIVE links,
 *     the second on one of path 2's devices each, the two QPs each other's
 *     peer; links_added counts one at each end; a checked stream crosses
 *     the link group afterwards;
 *  2. one end allows one link: max_links 1 is negotiated, no ADD_LINK is
 *     sent, each link group keeps its one link;
 *  3. spreading: 64 connections on a two-link group, neither link carries
 *     more than 2/3 of them at either end; path 1's netdevs go down and
 *     every connection still echoes a checked message;
 *  4. failover: a checked stream (USMC_TEST_FAILOVER_MB, default 64 MiB)
 *     whose first path fails for 5 s a quarter of the way through, its
 *     netdevs down (a port event at both ends), or for 10 s its RoCE
 *     silently lost (no event, and rxe retries a send for ever: TEST_LINK,
 *     every 3 s here, tells, within 2 x its interval): the stream completes
 *     intact on the second link; each end counts a failover; once the path
 *     is back the server adds a link again unasked, and a stream crosses.
 *     The longest time without progress is printed;
 *  5. an idle link lost silently: path 2's RoCE lost while the one
 *     connection streams on link 1; each end finds link 2 dead by its own
 *     TEST_LINK within 2 x its interval, the stream is untouched, the link
 *     comes back;
 *  6. soak: path 1 flaps (USMC_TEST_FLAPS times, default 3: netdevs down
 *     1 s, up until the link is back) under a checked stream and short
 *     connections (a checked 64 B echo each, USMC_TEST_SHORT_PER_S, default
 *     64 a second): nothing lost, every short connection answered but
 *     those (at most 1 %) of a link group of their own that lost its one
 *     link to a flap before its second was up (made while the stream's
 *     link group had no link on path 1 yet: see soak_clients()), the
 *     link group ends with two links, and the guest holds as many QPs,
 *     CQs, PDs and MRs after the last flap as after the first.
 *
 * What a link group holds is read from the library's internals (lgr.h):
 * the test's view, not an API (usmc-stat shows the same to operators).
 *
 * usage: test_multilink (as root in the guest; fails without the topology)
 */
#include "conn.h"
#include "multilink.h"
#include "smcr_conn.h"

#define STREAM_BYTES   (4u << 20)
#define SINGLE_WAIT_MS 1500 /* for an ADD_LINK that must not come */
#define SPREAD_CONNS   64
#define SPREAD_MSG     4096
#define TESTLINK_MS    3000 /* the silent case's USMC_OPT_TESTLINK_MS */

/*
 * The link of @lnk[@n] on one of path 2's devices; dies if none. Both
 * ends run in one kernel here and see all four devices: which end takes
 * which of path 2's two is theirs to pick (a host of its own would have
 * only one); the path the link runs over is what counts.
 */
static const struct smcr_link *link_on_path2(const struct smcr_link *lnk, int n, const char *dev_a2,
					     const char *dev_b2, const char *who)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(lnk[i].dev.name, dev_a2) || !strcmp(lnk[i].dev.name, dev_b2))
			return &lnk[i];
	CHECK(0, "%s: no link on %s or %s", who, dev_a2, dev_b2);
	return NULL;
}

/* Push STREAM_BYTES of the pattern through the echo and check what comes back. */
static void stream_checked(struct usmc_conn *c)
{
	ml_stream_through_fault(&(struct end){.fd = -1, .c = c}, STREAM_BYTES, FAULT_NONE);
}

/* A connection from host A to host B's listener; the server echoes. */
struct pair {
	struct usmc_ctx *sctx, *cctx;
	struct ml_server srv;
	pthread_t t;
	struct usmc_conn *c;
};

/* @testlink_ms: both ends' USMC_OPT_TESTLINK_MS (0: the default). */
static void pair_open(struct pair *p, long server_links, long client_links, long testlink_ms)
{
	struct sockaddr_in sa;
	int rc;

	memset(p, 0, sizeof(*p));
	p->sctx = ml_ctx(server_links, NULL);
	p->cctx = ml_ctx(client_links, NULL);
	if (testlink_ms)
		CHECK(!usmc_ctx_setopt(p->sctx, USMC_OPT_TESTLINK_MS, testlink_ms) &&
			      !usmc_ctx_setopt(p->cctx, USMC_OPT_TESTLINK_MS, testlink_ms),
		      "USMC_OPT_TESTLINK_MS");
	p->srv.l = listen_b(p->sctx, 8, &sa);
	CHECK(!pthread_create(&p->t, NULL, ml_server_main, &p->srv), "pthread_create");
	rc = usmc_connect(p->cctx, (struct sockaddr *)&sa, sizeof(sa), 0, &p->c);
	CHECK(!rc, "usmc_connect: %s", usmc_strerror(rc));
	expect_smcr(p->c, "client");
}

static void pair_close(struct pair *p)
{
	CHECK(!usmc_shutdown(p->c, SHUT_WR), "shutdown");
	for (;;) {
		uint8_t b[256];
		ssize_t n = usmc_recv(p->c, b, sizeof(b), 0);

		CHECK(n >= 0, "recv to EOF: %s", usmc_strerror((int)n));
		if (!n)
			break;
	}
	CHECK(!usmc_close(p->c), "client close");
	pthread_join(p->t, NULL);
	usmc_listener_close(p->srv.l);
	usmc_ctx_destroy(p->cctx);
	usmc_ctx_destroy(p->sctx);
}

static void test_second_link(void)
{
	const char *dev_a2 = getenv("USMC_TEST_RXE_A2"), *dev_b2 = getenv("USMC_TEST_RXE_B2");
	struct smcr_link sl[SMCR_LINKS_MAX], cl[SMCR_LINKS_MAX];
	const struct smcr_link *s2, *c2;
	double t0 = mono_s();
	struct pair p;
	int ns, nc;

	CHECK(dev_a2 && dev_b2, "USMC_TEST_RXE_A2/_B2 not set (vm-run.sh --setup twopath)");
	pair_open(&p, 2, 2, 0);
	ns = ml_wait_links(p.sctx, 2, ML_LINKS_WAIT_MS, sl);
	nc = ml_wait_links(p.cctx, 2, ML_LINKS_WAIT_MS, cl);
	printf("second link: server %d links, client %d links after %.0f ms\n", ns, nc,
	       (mono_s() - t0) * 1000);
	ml_print_links("server", sl, ns);
	ml_print_links("client", cl, nc);
	CHECK(ns == 2 && nc == 2, "two links expected at each end");
	s2 = link_on_path2(sl, ns, dev_a2, dev_b2, "server");
	c2 = link_on_path2(cl, nc, dev_a2, dev_b2, "client");
	CHECK(strcmp(s2->dev.name, c2->dev.name), "both ends on %s", s2->dev.name);
	CHECK(s2->link_num == c2->link_num && s2->link_num != sl[0].link_num,
	      "link numbers: server %u, client %u", s2->link_num, c2->link_num);
	CHECK(s2->peer_qpn == c2->qp->qp_num && c2->peer_qpn == s2->qp->qp_num,
	      "the second links are not each other's peers");
	CHECK(ml_links_added(p.sctx) == 1 && ml_links_added(p.cctx) == 1,
	      "links_added: server %llu, client %llu", (unsigned long long)ml_links_added(p.sctx),
	      (unsigned long long)ml_links_added(p.cctx));
	stream_checked(p.c);
	pair_close(&p);
	printf("ok: a second link on %s <-> %s, %u MiB echoed intact\n", dev_a2, dev_b2,
	       STREAM_BYTES >> 20);
}

static void test_one_end_single(long server_links, long client_links)
{
	struct smcr_link sl[SMCR_LINKS_MAX], cl[SMCR_LINKS_MAX];
	struct pair p;
	int ns, nc;

	pair_open(&p, server_links, client_links, 0);
	usleep(SINGLE_WAIT_MS * 1000);
	ns = ml_active_links(p.sctx, sl);
	nc = ml_active_links(p.cctx, cl);
	CHECK(ns == 1 && nc == 1, "server %ld/client %ld: %d and %d links, one expected",
	      server_links, client_links, ns, nc);
	CHECK(!ml_links_added(p.sctx) && !ml_links_added(p.cctx), "a link was added");
	stream_checked(p.c);
	pair_close(&p);
	printf("ok: server max_links %ld, client %ld: one link each\n", server_links, client_links);
}

static void test_failover(enum ml_fault f)
{
	uint64_t total = (uint64_t)env_long("USMC_TEST_FAILOVER_MB", 64) << 20;
	struct smcr_link sl[SMCR_LINKS_MAX], cl[SMCR_LINKS_MAX];
	double t0, gap;
	struct pair p;
	int ns, nc;

	pair_open(&p, 2, 2, f == FAULT_SILENT_DROP ? TESTLINK_MS : 0);
	ns = ml_wait_links(p.sctx, 2, ML_LINKS_WAIT_MS, sl);
	nc = ml_wait_links(p.cctx, 2, ML_LINKS_WAIT_MS, cl);
	CHECK(ns == 2 && nc == 2, "two links expected at each end before the fault");
	t0 = mono_s();
	gap = ml_stream_through_fault(&(struct end){.fd = -1, .c = p.c}, total, f);
	ns = ml_active_links(p.sctx, sl);
	nc = ml_active_links(p.cctx, cl);
	printf("failover (%s): %llu MiB intact in %.1f s, longest without progress %.0f ms; "
	       "failovers server %llu client %llu; links now %d and %d\n",
	       ml_fault_name(f), (unsigned long long)(total >> 20), mono_s() - t0, gap * 1000,
	       (unsigned long long)ml_failovers(p.sctx), (unsigned long long)ml_failovers(p.cctx),
	       ns, nc);
	CHECK(ml_failovers(p.sctx) >= 1 && ml_failovers(p.cctx) >= 1,
	      "a failover at each end expected");
	CHECK(gap < (f == FAULT_PORT_DOWN ? 1.0 : 2 * TESTLINK_MS / 1000.0),
	      "%.0f ms without progress: over the target", gap * 1000);
	CHECK(ns >= 1 && nc >= 1, "a link left at each end");
	/* the path is back: the server adds a link again, unasked */
	t0 = mono_s();
	ns = ml_wait_links(p.sctx, 2, ML_READD_WAIT_MS, sl);
	nc = ml_wait_links(p.cctx, 2, ML_READD_WAIT_MS, cl);
	printf("recovery: %d and %d links %.1f s after the stream; links_added %llu and %llu\n", ns,
	       nc, mono_s() - t0, (unsigned long long)ml_links_added(p.sctx),
	       (unsigned long long)ml_links_added(p.cctx));
	CHECK(ns == 2 && nc == 2, "the link was not added again");
	stream_checked(p.c); /* and the link group carries on */
	pair_close(&p);
	printf("ok: failover on %s\n", ml_fault_name(f));
}

/*
 * An idle link that fails silently is found by its own TEST_LINK: path 2's
 * RoCE is lost at ingress for ML_SILENT_SECONDS while the one connection
 * streams on link 1 (path 1). Each end fails link 2 within 2 x
 * TESTLINK_MS (link_failures), the stream goes on untouched (its checked
 * echo, no failover), and once the path is back the link is added again.
 */
static void test_idle_link_silent(void)
{
	struct smcr_link sl[SMCR_LINKS_MAX], cl[SMCR_LINKS_MAX];
	double t0, found = -1, bound = 2 * TESTLINK_MS / 1000.0;
	struct pair p;
	int ns, nc;

	pair_open(&p, 2, 2, TESTLINK_MS);
	ns = ml_wait_links(p.sctx, 2, ML_LINKS_WAIT_MS, sl);
	nc = ml_wait_links(p.cctx, 2, ML_LINKS_WAIT_MS, cl);
	CHECK(ns == 2 && nc == 2, "two links expected at each end");
	CHECK(smcr_conn_link_slot(p.c->smcr) == LGR_FIRST_LINK,
	      "the first connection should send on the first link");
	CHECK(!roce_lose_path(2, true), "path 2's RoCE lost");
	t0 = mono_s();
	while (mono_s() - t0 < ML_SILENT_SECONDS) {
		stream_checked(p.c);
		if (found < 0 && ml_link_failures(p.sctx) && ml_link_failures(p.cctx))
			found = mono_s() - t0;
	}
	CHECK(!roce_lose_path(2, false), "path 2's RoCE back");
	printf("idle link lost silently: found at both ends after %.1f s (bound %.1f s); "
	       "failovers %llu and %llu\n",
	       found, bound, (unsigned long long)ml_failovers(p.sctx),
	       (unsigned long long)ml_failovers(p.cctx));
	CHECK(found >= 0 && found < bound, "the idle link's loss was not found in time");
	CHECK(!ml_failovers(p.sctx) && !ml_failovers(p.cctx), "a connection moved");
	ns = ml_wait_links(p.sctx, 2, ML_READD_WAIT_MS, sl);
	nc = ml_wait_links(p.cctx, 2, ML_READD_WAIT_MS, cl);
	CHECK(ns == 2 && nc == 2, "the link was not added again");
	pair_close(&p);
	printf("ok: an idle link lost silently\n");
}

/* How many of @ctx's connections send on each link slot. */
static void conns_per_slot(struct usmc_ctx *ctx, int per[SMCR_LINKS_MAX])
{
	struct smcr_ctx *s = &ctx->rdma;

	memset(per, 0, sizeof(int) * SMCR_LINKS_MAX);
	pthread_mutex_lock(&s->lock);
	for (struct lgr *l = s->lgrs; l; l = l->next) {
		pthread_mutex_lock(&l->lock);
		for (int i = 1; i <= SMCR_MAX_CONNS; i++)
			if (l->conns[i].conn)
				per[smcr_conn_link_slot(l->conns[i].conn)]++;
		pthread_mutex_unlock(&l->lock);
	}
	pthread_mutex_unlock(&s->lock);
}

/* Each of the @n client connections sends a checked message, the server's
 * echo it back; @round makes each round's bytes its own. */
static void echo_each(struct usmc_conn **c, struct usmc_conn **sv, int n, int round)
{
	static uint8_t buf[SPREAD_MSG];

	for (int i = 0; i < n; i++) {
		pattern_fill(ML_SEED + (uint64_t)i, (uint64_t)round * SPREAD_MSG, buf, sizeof(buf));
		send_all(c[i], buf, sizeof(buf));
	}
	for (int i = 0; i < n; i++) {
		size_t got = 0;

		while (got < sizeof(buf)) {
			ssize_t r = usmc_recv(sv[i], buf + got, sizeof(buf) - got, 0);

			CHECK(r > 0, "server recv on %d: %s", i, usmc_strerror((int)r));
			got += (size_t)r;
		}
		send_all(sv[i], buf, sizeof(buf));
	}
	for (int i = 0; i < n; i++) {
		size_t got = 0;

		while (got < sizeof(buf)) {
			ssize_t r = usmc_recv(c[i], buf + got, sizeof(buf) - got, 0);

			CHECK(r > 0, "client recv on %d: %s", i, usmc_strerror((int)r));
			got += (size_t)r;
		}
		/* the server's i-th accept need not be our i-th connect: each
		 * connection's echo is its own message, whichever it is */
		CHECK(pattern_check(ML_SEED + (uint64_t)i, (uint64_t)round * SPREAD_MSG, buf,
				    sizeof(buf)) < 0,
		      "connection %d: echo wrong", i);
	}
}

static void test_spread(void)
{
	static struct usmc_conn *c[SPREAD_CONNS], *sv[SPREAD_CONNS];
	struct smcr_link sl[SMCR_LINKS_MAX];
	struct usmc_ctx *sctx = ml_ctx(2, NULL), *cctx = ml_ctx(2, NULL);
	int sper[SMCR_LINKS_MAX], cper[SMCR_LINKS_MAX];
	struct usmc_listener *l;
	struct sockaddr_in sa;

	l = listen_b(sctx, 2 * SPREAD_CONNS, &sa);
	for (int i = 0; i < SPREAD_CONNS; i++) {
		int rc = usmc_connect(cctx, (struct sockaddr *)&sa, sizeof(sa), 0, &c[i]);

		CHECK(!rc, "usmc_connect %d: %s", i, usmc_strerror(rc));
		expect_smcr(c[i], "client");
		if (!i)
			CHECK(ml_wait_links(sctx, 2, ML_LINKS_WAIT_MS, sl) == 2 &&
				      ml_wait_links(cctx, 2, ML_LINKS_WAIT_MS, sl) == 2,
			      "two links after the first contact");
	}
	for (int i = 0; i < SPREAD_CONNS; i++) {
		int rc = usmc_accept(l, 0, &sv[i]);

		CHECK(!rc, "usmc_accept %d: %s", i, usmc_strerror(rc));
	}
	conns_per_slot(sctx, sper);
	conns_per_slot(cctx, cper);
	printf("spread: server %d/%d/%d, client %d/%d/%d connections per link slot\n", sper[0],
	       sper[1], sper[2], cper[0], cper[1], cper[2]);
	for (int i = 0; i < SMCR_LINKS_MAX; i++)
		CHECK(sper[i] * 3 <= SPREAD_CONNS * 2 && cper[i] * 3 <= SPREAD_CONNS * 2 &&
			      sper[i] == cper[i],
		      "slot %d carries %d and %d of %d", i, sper[i], cper[i], SPREAD_CONNS);
	echo_each(c, sv, SPREAD_CONNS, 0);
	ml_fault_apply(FAULT_PORT_DOWN, true);
	echo_each(c, sv, SPREAD_CONNS, 1);
	ml_fault_apply(FAULT_PORT_DOWN, false);
	conns_per_slot(sctx, sper);
	printf("spread: after path 1 went down, server %d/%d/%d connections per slot; "
	       "failovers %llu and %llu\n",
	       sper[0], sper[1], sper[2], (unsigned long long)ml_failovers(sctx),
	       (unsigned long long)ml_failovers(cctx));
	CHECK(ml_failovers(sctx) >= 1 && ml_failovers(cctx) >= 1, "no failover");
	for (int i = 0; i < SPREAD_CONNS; i++) {
		CHECK(!usmc_close(c[i]) && !usmc_close(sv[i]), "close %d", i);
	}
	usmc_listener_close(l);
	usmc_ctx_destroy(cctx);
	usmc_ctx_destroy(sctx);
	printf("ok: %d connections spread over two links, all intact through a failover\n",
	       SPREAD_CONNS);
}

/* ---- soak --------------------------------------------------------------- */

#define SOAK_REASONS 8
#define SOAK_IDLE_MS 500 /* USMC_OPT_LGR_IDLE_MS of the soak's contexts */

struct soak {
	struct usmc_ctx *sctx, *cctx;
	/* why short connections ran TCP: the first reasons seen, and counts */
	pthread_mutex_t rlock;
	uint32_t reason[SOAK_REASONS];
	int reason_n[SOAK_REASONS];
	struct usmc_listener *l;
	struct sockaddr_in sa;
	atomic_bool stop;
	atomic_int short_ok, short_smcr, short_failed;
	/* of those failed: aborted with a link group of their own whose one
	 * link went down with a flap (below) */
	atomic_int short_single_lost;
	uint32_t main_lgr; /* the client's link group of the stream */
	int per_s;
};

/* The short connections' server: each echoes 64 B and closes. */
static void *soak_server(void *arg)
{
	struct soak *k = arg;

	while (!atomic_load(&k->stop)) {
		struct usmc_conn *c;
		uint8_t b[64];
		size_t got = 0;

		if (usmc_accept(k->l, 0, &c))
			continue;
		while (got < sizeof(b)) {
			ssize_t r = usmc_recv(c, b + got, sizeof(b) - got, 0);

			if (r <= 0)
				break;
			got += (size_t)r;
		}
		if (got == sizeof(b))
			send_all(c, b, sizeof(b));
		usmc_close(c);
	}
	return NULL;
}

/* Every link group of @ctx with its links' states (a failure's diagnosis). */
static void print_lgrs(const char *who, struct usmc_ctx *ctx)
{
	struct smcr_ctx *s = &ctx->rdma;

	pthread_mutex_lock(&s->lock);
	for (struct lgr *l = s->all; l; l = l->all_next)
		printf("  %s link group %x: state %d, %d connections, link states %d/%d/%d\n", who,
		       l->id, atomic_load(&l->state), l->nconns, atomic_load(&l->lnk[0].state),
		       atomic_load(&l->lnk[1].state), atomic_load(&l->lnk[2].state));
	pthread_mutex_unlock(&s->lock);
}

/* Links @ctx holds the objects of (one QP, two CQs, one PD each): every
 * slot of every link group not UNUSED. */
static int links_held(struct usmc_ctx *ctx)
{
	struct smcr_ctx *s = &ctx->rdma;
	int n = 0;

	pthread_mutex_lock(&s->lock);
	for (struct lgr *l = s->all; l; l = l->all_next)
		for (int i = 0; i < SMCR_LINKS_MAX; i++)
			n += atomic_load(&l->lnk[i].state) != SMCR_LNK_UNUSED;
	pthread_mutex_unlock(&s->lock);
	return n;
}

static void soak_reason(struct soak *k, uint32_t reason)
{
	pthread_mutex_lock(&k->rlock);
	for (int i = 0; i < SOAK_REASONS; i++)
		if (!k->reason_n[i] || k->reason[i] == reason) {
			k->reason[i] = reason;
			k->reason_n[i]++;
			break;
		}
	pthread_mutex_unlock(&k->rlock);
}

/* The short connections: per_s a second, each a checked 64 B echo. */
static void *soak_clients(void *arg)
{
	struct soak *k = arg;

	for (uint64_t i = 0; !atomic_load(&k->stop); i++) {
		struct usmc_conn *c;
		struct usmc_conn_info info;
		uint8_t b[64];
		size_t got = 0;
		bool ok = false;

		ssize_t r = 0;
		int rc;

		usleep((useconds_t)(1000000 / k->per_s));
		rc = usmc_connect(k->cctx, (struct sockaddr *)&k->sa, sizeof(k->sa), 0, &c);
		if (rc) {
			printf("  short connection %llu: connect: %s\n", (unsigned long long)i,
			       usmc_strerror(rc));
			atomic_fetch_add(&k->short_failed, 1);
			continue;
		}
		pattern_fill(ML_SEED ^ i, 0, b, sizeof(b));
		send_all(c, b, sizeof(b));
		while (got < sizeof(b)) {
			r = usmc_recv(c, b + got, sizeof(b) - got, 0);
			if (r <= 0)
				break;
			got += (size_t)r;
		}
		ok = got == sizeof(b) && pattern_check(ML_SEED ^ i, 0, b, sizeof(b)) < 0;
		if (!ok) {
			struct usmc_conn_info fi = {0};

			usmc_conn_info(c, &fi);
			printf("  short connection %llu (%s, link group %x): %zu of 64 bytes back, "
			       "the last read %zd (%s)\n",
			       (unsigned long long)i, usmc_mode_name(fi.mode), fi.lgr_id, got, r,
			       r < 0 ? usmc_strerror((int)r) : "EOF or data");
			/*
			 * A connection made while path 1 is back but the stream's
			 * link group has no link there yet gets a link group of its
			 * own (the reuse needs a link whose peer GID is the
			 * proposal's, as Linux's smcr_lgr_match()); if the next flap
			 * comes before that one's second link is up, it has no link
			 * left and its connections abort, as SMC-R says. Only those
			 * may fail.
			 */
			if (r == -ECONNABORTED && fi.lgr_id && fi.lgr_id != k->main_lgr)
				atomic_fetch_add(&k->short_single_lost, 1);
		}
		if (ok && !usmc_conn_info(c, &info) && info.mode == USMC_MODE_SMCR)
			atomic_fetch_add(&k->short_smcr, 1);
		else if (ok)
			soak_reason(k, info.reason);
		atomic_fetch_add(ok ? &k->short_ok : &k->short_failed, 1);
		usmc_close(c);
	}
	return NULL;
}

struct flapper {
	struct soak *k;
	int flaps;
	struct fnet_res after_first, after_last;
	double worst_readd;
	atomic_bool done;
};

/* Path 1 down for 1 s, then up until both ends have two links again;
 * the verbs objects counted after the first and the last. */
static void *soak_flap(void *arg)
{
	struct flapper *fl = arg;
	struct smcr_link tmp[SMCR_LINKS_MAX];

	for (int i = 0; i < fl->flaps; i++) {
		double t;

		ml_fault_apply(FAULT_PORT_DOWN, true);
		usleep(1000000);
		ml_fault_apply(FAULT_PORT_DOWN, false);
		t = mono_s();
		CHECK(ml_wait_links(fl->k->sctx, 2, ML_READD_WAIT_MS, tmp) == 2 &&
			      ml_wait_links(fl->k->cctx, 2, ML_READD_WAIT_MS, tmp) == 2,
		      "flap %d: the link was not added again", i + 1);
		if (mono_s() - t > fl->worst_readd)
			fl->worst_readd = mono_s() - t;
		if (!i)
			fl->after_first = fnet_res_of(0);
	}
	fl->after_last = fnet_res_of(0);
	atomic_store(&fl->done, true);
	return NULL;
}

static void test_soak(void)
{
	struct soak k = {.per_s = (int)env_long("USMC_TEST_SHORT_PER_S", 64)};
	struct flapper fl = {.k = &k, .flaps = (int)env_long("USMC_TEST_FLAPS", 3)};
	struct fnet_res base, end;
	int held0, held1;
	static uint8_t out[ML_CHUNK], in[ML_CHUNK];
	struct smcr_link tmp[SMCR_LINKS_MAX];
	pthread_t ts, tc, tf;
	uint64_t sent = 0, got = 0;
	double t0 = mono_s();
	struct pair p;

	pair_open(&p, 2, 2, 0);
	CHECK(!usmc_ctx_setopt(p.sctx, USMC_OPT_LGR_IDLE_MS, SOAK_IDLE_MS) &&
		      !usmc_ctx_setopt(p.cctx, USMC_OPT_LGR_IDLE_MS, SOAK_IDLE_MS),
	      "USMC_OPT_LGR_IDLE_MS"); /* for the link groups made from now on */
	CHECK(ml_wait_links(p.sctx, 2, ML_LINKS_WAIT_MS, tmp) == 2 &&
		      ml_wait_links(p.cctx, 2, ML_LINKS_WAIT_MS, tmp) == 2,
	      "two links before the soak");
	k.sctx = p.sctx;
	k.cctx = p.cctx;
	{
		struct usmc_conn_info info;

		CHECK(!usmc_conn_info(p.c, &info), "usmc_conn_info");
		k.main_lgr = info.lgr_id;
	}
	pthread_mutex_init(&k.rlock, NULL);
	base = fnet_res_of(0);
	held0 = links_held(p.sctx) + links_held(p.cctx);
	k.l = listen_b(p.sctx, 128, &k.sa);
	CHECK(!pthread_create(&ts, NULL, soak_server, &k) &&
		      !pthread_create(&tc, NULL, soak_clients, &k) &&
		      !pthread_create(&tf, NULL, soak_flap, &fl),
	      "pthread_create");
	while (!atomic_load(&fl.done) || sent != got) {
		if (!atomic_load(&fl.done) && sent - got < 4 * ML_CHUNK) {
			pattern_fill(ML_SEED, sent, out, ML_CHUNK);
			send_all(p.c, out, ML_CHUNK);
			sent += ML_CHUNK;
			continue;
		}
		ssize_t n = usmc_recv(p.c, in, sizeof(in), 0);

		CHECK(n > 0, "stream recv at %llu: %s", (unsigned long long)got,
		      usmc_strerror((int)n));
		CHECK(pattern_check(ML_SEED, got, in, (size_t)n) < 0,
		      "byte %llu of the stream is wrong", (unsigned long long)got);
		got += (uint64_t)n;
	}
	atomic_store(&k.stop, true);
	pthread_join(tf, NULL);
	pthread_join(tc, NULL);
	/* the server waits in usmc_accept(): one more connection lets it see stop */
	{
		struct usmc_conn *c;

		if (!usmc_connect(p.cctx, (struct sockaddr *)&k.sa, sizeof(k.sa), 0, &c))
			usmc_close(c);
	}
	pthread_join(ts, NULL);
	/* the link groups short connections made while path 1 was down, idle
	 * now, end (SOAK_IDLE_MS) */
	usleep(3 * SOAK_IDLE_MS * 1000);
	end = fnet_res_of(0);
	held1 = links_held(p.sctx) + links_held(p.cctx);
	for (int i = 0; i < SOAK_REASONS && k.reason_n[i]; i++)
		printf("  short connections on TCP: %d for %s\n", k.reason_n[i],
		       usmc_reason_name(k.reason[i]));
	printf("soak: %d flaps in %.0f s, %llu MiB streamed intact; short connections %d answered "
	       "(%d SMC-R), %d failed (%d of them with a link group of their own that lost its "
	       "one link); re-added within %.1f s at worst; failovers %llu and %llu; "
	       "qp/cq/pd/mr after the first flap %d/%d/%d/%d, after the last %d/%d/%d/%d\n",
	       fl.flaps, mono_s() - t0, (unsigned long long)(got >> 20), atomic_load(&k.short_ok),
	       atomic_load(&k.short_smcr), atomic_load(&k.short_failed),
	       atomic_load(&k.short_single_lost), fl.worst_readd,
	       (unsigned long long)ml_failovers(p.sctx), (unsigned long long)ml_failovers(p.cctx),
	       fl.after_first.qp, fl.after_first.cq, fl.after_first.pd, fl.after_first.mr,
	       fl.after_last.qp, fl.after_last.cq, fl.after_last.pd, fl.after_last.mr);
	CHECK(atomic_load(&k.short_failed) == atomic_load(&k.short_single_lost),
	      "short connections failed on the stream's link group, or not by a lost link");
	CHECK(atomic_load(&k.short_single_lost) * 100 <= atomic_load(&k.short_ok),
	      "over 1 %% of the short connections lost with a link group's one link");
	/* every object the guest holds beyond the kernel's own is a link's
	 * that a link group holds (the first link's stays until its link group
	 * ends; short connections made link groups of their own while path 1
	 * was down): none of a dropped link is left. MRs also count pooled
	 * buffers, which short connections grow: printed only. */
	printf("soak: qp/cq/pd/mr before %d/%d/%d/%d with %d links held, after %d/%d/%d/%d "
	       "with %d\n",
	       base.qp, base.cq, base.pd, base.mr, held0, end.qp, end.cq, end.pd, end.mr, held1);
	print_lgrs("server", p.sctx);
	print_lgrs("client", p.cctx);
	CHECK(end.qp - base.qp == held1 - held0 && end.cq - base.cq == 2 * (held1 - held0) &&
		      end.pd - base.pd == held1 - held0,
	      "verbs objects left behind by the flaps");
	CHECK(ml_active_links(p.sctx, tmp) == 2 && ml_active_links(p.cctx, tmp) == 2,
	      "two links at the end");
	usmc_listener_close(k.l);
	pair_close(&p);
	printf("ok: soak\n");
}

/* Runs every case, or those named on the command line (links, single,
 * spread, portdown, silent, soak). */
int main(int argc, char **argv)
{
	static const char *const all[] = {"links",  "single",	  "spread", "portdown",
					  "silent", "idlesilent", "soak"};
	const char *const *run = argc > 1 ? (const char *const *)argv + 1 : all;
	int n = argc > 1 ? argc - 1 : 7;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < n; i++) {
		if (!strcmp(run[i], "links")) {
			test_second_link();
		} else if (!strcmp(run[i], "single")) {
			test_one_end_single(2, 1);
			test_one_end_single(1, 2);
		} else if (!strcmp(run[i], "spread")) {
			test_spread();
		} else if (!strcmp(run[i], "portdown")) {
			test_failover(FAULT_PORT_DOWN);
		} else if (!strcmp(run[i], "silent")) {
			test_failover(FAULT_SILENT_DROP);
		} else if (!strcmp(run[i], "idlesilent")) {
			test_idle_link_silent();
		} else if (!strcmp(run[i], "soak")) {
			test_soak();
		} else {
			CHECK(0, "no case %s", run[i]);
		}
	}
	return 0;
}
