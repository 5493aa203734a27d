// SPDX-License-Identifier: MIT
/*
 * The link group caps on the real wire, against a usmc context on host B
 * whose caps are lowered to 8 link groups (8 per peer address, the
 * default): a hostile peer on host A (hostile_peer.c) takes the places
 * with a new system ID each time, as any number of processes of one host
 * may. One scenario per run:
 *
 *   closed     12 complete first contacts, each closed at once (its
 *              link group idle): with idle link groups never reclaimed,
 *              the ninth and every later one, and then an honest usmc
 *              client of host A with a new context, were declined (MEM)
 *              and ran TCP for the 10 minutes the idle ones live. Now
 *              each takes the place of the one idle the longest, and the
 *              honest client runs SMC-R.
 *   proposals  8 PROPOSALs left without their CONFIRM (link groups in
 *              their handshake): they took every place, and the server
 *              context's own connect to a usmc server on host A ran TCP.
 *              Now one address's handshakes hold half its cap (4), the
 *              rest are declined at once, and the connect runs SMC-R.
 *
 * Run in the soft-RoCE guest: tests/rxe/run-rxe-tests.sh <build> -R lgrcap.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/random.h>
#include <unistd.h>

#include "../common/pattern.h"
#include "ctx.h"
#include "hostile_peer.h"
#include "lgr.h"
#include "smcr_common.h"

#define CAP	     8	  /* USMC_OPT_MAX_LGRS of the server context */
#define HS_SHARE     4	  /* of them, one address's handshakes (lgr_cap.h) */
#define CLOSED_N     12	  /* closed first contacts: more than CAP */
#define ACCEPT_WAIT  4000 /* ms for the ACCEPT or DECLINE of a PROPOSAL */
#define IDLE_WAIT_MS 5000 /* for a closed connection's link group to be idle */
#define SERVER_HS_MS 30000
#define ECHO_BYTES   8192
#define NSERVERS     2 /* proposals: the context under attack and its peer */

/* ---- usmc servers: every accepted connection echoes until EOF ---- */

struct server {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	struct sockaddr_in addr;
	pthread_t th;
};

static atomic_bool stop;
static atomic_int echoing;

static void *echo_conn(void *arg)
{
	struct usmc_conn *c = arg;
	static _Thread_local uint8_t buf[65536];
	ssize_t n;

	/* a peer that vanishes ends its connection with an error: fine here */
	while ((n = usmc_recv(c, buf, sizeof(buf), 0)) > 0)
		if (usmc_send(c, buf, (size_t)n, 0) != n)
			break;
	usmc_close(c);
	atomic_fetch_sub(&echoing, 1);
	return NULL;
}

static void *acceptor(void *arg)
{
	struct server *s = arg;

	while (!atomic_load(&stop)) {
		struct pollfd pfd = {.fd = usmc_listener_fd(s->l), .events = POLLIN};
		struct usmc_conn *c;
		pthread_t th;

		if (poll(&pfd, 1, 100) <= 0 || usmc_accept(s->l, 0, &c))
			continue;
		atomic_fetch_add(&echoing, 1);
		CHECK(!pthread_create(&th, NULL, echo_conn, c), "pthread_create");
		pthread_detach(th);
	}
	return NULL;
}

/* A usmc server on host @env's address; @cap: its context's link group
 * cap (0: the default). */
static void server_start(struct server *s, const char *env, int cap)
{
	struct sockaddr_in sa = host_addr(env, 0);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	CHECK(!usmc_ctx_create(&s->ctx), "ctx");
	CHECK(!usmc_ctx_setopt(s->ctx, USMC_OPT_PROBE_MS, 2000), "probe option");
	CHECK(!usmc_ctx_setopt(s->ctx, USMC_OPT_HS_TIMEOUT_MS, SERVER_HS_MS), "hs option");
	if (cap)
		CHECK(!usmc_ctx_setopt(s->ctx, USMC_OPT_MAX_LGRS, cap), "cap option");
	CHECK(!usmc_listen(s->ctx, (struct sockaddr *)&sa, sizeof(sa), 64, USMC_LISTEN_NONBLOCK,
			   &s->l),
	      "listen");
	if (cap)
		CHECK(!usmc_listener_setopt(s->l, USMC_OPT_MAX_LGRS, cap), "listener cap option");
	CHECK(!usmc_listener_addr(s->l, &ss, &len), "listener addr");
	memcpy(&s->addr, &ss, sizeof(s->addr));
	CHECK(!pthread_create(&s->th, NULL, acceptor, s), "pthread_create");
}

static void ctx_destroy(struct usmc_ctx *ctx, const char *who)
{
	double t0 = mono_s();
	int rc;

	while ((rc = usmc_ctx_destroy(ctx)) == -EBUSY && mono_s() - t0 < 10)
		usleep(100000);
	CHECK(!rc, "%s ctx destroy: %s", who, usmc_strerror(rc));
}

static void servers_stop(struct server *s, int n)
{
	double t0 = mono_s();

	while (atomic_load(&echoing) && mono_s() - t0 < 20)
		usleep(100000);
	CHECK(!atomic_load(&echoing), "%d server connections still open after 20 s",
	      atomic_load(&echoing));
	atomic_store(&stop, true);
	for (int i = 0; i < n; i++) {
		pthread_join(s[i].th, NULL);
		CHECK(!usmc_listener_close(s[i].l), "listener close");
		ctx_destroy(s[i].ctx, "server");
	}
}

/* ---- the checks ---- */

/* @c's mode, printed; its data echoed when it runs SMC-R. */
static bool runs_smcr(struct usmc_conn *c, const char *who)
{
	static uint8_t out[ECHO_BYTES], in[ECHO_BYTES];
	struct usmc_conn_info info;
	ssize_t n;

	CHECK(!usmc_conn_info(c, &info), "conn info");
	printf("  %s: %s (reason %s)\n", who, usmc_mode_name(info.mode),
	       usmc_reason_name(info.reason));
	pattern_fill(7, 0, out, sizeof(out));
	send_all(c, out, sizeof(out));
	n = usmc_recv(c, in, sizeof(in), MSG_WAITALL);
	CHECK(n == (ssize_t)sizeof(in) && pattern_check(7, 0, in, sizeof(in)) < 0,
	      "%s: echo failed (%zd)", who, n);
	return info.mode == USMC_MODE_SMCR;
}

/* A new context's connect to @srv (a new system ID: a first contact). */
static bool fresh_client_smcr(const struct sockaddr_in *srv, const char *who)
{
	struct usmc_ctx *ctx;
	struct usmc_conn *c;
	bool smcr;
	int rc;

	CHECK(!usmc_ctx_create(&ctx), "ctx");
	rc = usmc_connect(ctx, (const struct sockaddr *)srv, sizeof(*srv), 0, &c);
	CHECK(!rc, "%s: connect: %s", who, usmc_strerror(rc));
	smcr = runs_smcr(c, who);
	CHECK(!usmc_close(c), "close");
	ctx_destroy(ctx, who);
	return smcr;
}

/* Every published link group of @ctx without connection and reference:
 * idle, reclaimable (lgr_find.c). */
static bool all_idle(struct usmc_ctx *ctx)
{
	struct smcr_ctx *s = &ctx->rdma;
	bool idle = true;

	pthread_mutex_lock(&s->lock);
	for (struct lgr *l = s->lgrs; l; l = l->next) {
		pthread_mutex_lock(&l->lock);
		idle &= !l->nconns && !atomic_load(&l->refs) && l->idle_since_ms;
		pthread_mutex_unlock(&l->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return idle;
}

static void await_idle(struct usmc_ctx *ctx)
{
	double t0 = mono_s();

	while (!all_idle(ctx) && mono_s() - t0 < IDLE_WAIT_MS / 1e3)
		usleep(20000);
	CHECK(all_idle(ctx), "a closed connection's link group not idle after %d ms", IDLE_WAIT_MS);
}

/* ---- closed: complete first contacts, closed at once ---- */

/* A complete first contact from @src on a new link @lk (a new system ID),
 * then the close (PEER_CONN_CLOSED) the server answers with its own;
 * false if declined. */
static bool closed_first_contact(struct hp_link *lk, struct hp_conn *c,
				 const struct sockaddr_in *src, const struct sockaddr_in *srv)
{
	struct cdc_msg m;
	double t0;
	int rc;

	hp_link_open(lk, NULL, src);
	hp_propose(lk, c, srv, NULL, NULL);
	rc = hp_await_accept(c, ACCEPT_WAIT);
	CHECK(rc == 0 || rc == 1, "no ACCEPT or DECLINE (%d)", rc);
	if (rc == 1)
		return false;
	CHECK(c->acc.first_contact, "a reuse ACCEPT for a new system ID");
	CHECK(!hp_confirm(c, NULL, NULL), "first contact");
	c->tx_state_flags = CDC_CS_PEER_CONN_CLOSED;
	m = hp_cdc_now(c);
	CHECK(!hp_send_cdc(c, &m), "close");
	for (t0 = mono_s(); !c->srv_closed && mono_s() - t0 < IDLE_WAIT_MS / 1e3;)
		hp_poll(lk, 10);
	CHECK(c->srv_closed, "the server did not close");
	return true;
}

static void run_closed(void)
{
	struct sockaddr_in a = host_addr("USMC_TEST_HOST_A", 0);
	struct hp_link *lk = calloc(CLOSED_N, sizeof(*lk));
	struct hp_conn *c = calloc(CLOSED_N, sizeof(*c));
	struct usmc_ctx_stats st;
	struct server s;
	int accepted = 0;
	bool honest;

	CHECK(lk && c, "calloc");
	server_start(&s, "USMC_TEST_HOST_B", CAP);
	for (int i = 0; i < CLOSED_N; i++) {
		accepted += closed_first_contact(&lk[i], &c[i], &a, &s.addr);
		await_idle(s.ctx);
	}
	honest = fresh_client_smcr(&s.addr, "honest client of host A, new context");
	usleep(500000); /* the reclaimed ones are freed at their next tick */
	usmc_ctx_stats(s.ctx, &st);
	printf("  %d closed first contacts from one address, cap %d: %d accepted; server: "
	       "%llu link groups open, %llu created, %llu reclaimed\n",
	       CLOSED_N, CAP, accepted, (unsigned long long)st.lgrs_open,
	       (unsigned long long)st.lgrs_created, (unsigned long long)st.lgrs_reclaimed);
	CHECK(honest, "the honest client ran TCP: idle link groups kept the cap full");
	CHECK(accepted == CLOSED_N, "%d of %d closed first contacts declined", CLOSED_N - accepted,
	      CLOSED_N);
	CHECK(st.lgrs_reclaimed >= CLOSED_N + 1 - CAP, "%llu link groups reclaimed",
	      (unsigned long long)st.lgrs_reclaimed);
	CHECK(st.lgrs_open <= CAP, "%llu link groups open, cap %d",
	      (unsigned long long)st.lgrs_open, CAP);
	for (int i = 0; i < CLOSED_N; i++)
		hp_link_close(&lk[i]);
	free(c);
	free(lk);
	servers_stop(&s, 1);
}

/* ---- proposals: first contacts left in their handshake ---- */

static void edit_random_id(struct clc_proposal *p, void *arg)
{
	(void)arg;
	CHECK(getrandom(p->peer_id, sizeof(p->peer_id), 0) == sizeof(p->peer_id), "getrandom");
}

static void run_proposals(void)
{
	struct sockaddr_in a = host_addr("USMC_TEST_HOST_A", 0);
	struct hp_conn c[CAP];
	struct server s[NSERVERS];
	struct usmc_conn *out;
	struct hp_link lk;
	int accepted = 0, declined = 0, rc;
	bool smcr;

	server_start(&s[0], "USMC_TEST_HOST_B", CAP);
	server_start(&s[1], "USMC_TEST_HOST_A", 0); /* the server context's peer */
	hp_link_open(&lk, NULL, &a);
	for (int i = 0; i < CAP; i++) {
		hp_propose(&lk, &c[i], &s[0].addr, edit_random_id, NULL);
		rc = hp_await_accept(&c[i], ACCEPT_WAIT);
		CHECK(rc == 0 || rc == 1, "PROPOSAL %d: no ACCEPT or DECLINE (%d)", i, rc);
		accepted += rc == 0;
		declined += rc == 1;
		lk.nconns = 0; /* c[i] is ours to free: hp_link_close must not see it */
	}
	/* the server context connects out while they hold their places */
	rc = usmc_connect(s[0].ctx, (const struct sockaddr *)&s[1].addr, sizeof(s[1].addr), 0,
			  &out);
	CHECK(!rc, "the server context's connect: %s", usmc_strerror(rc));
	smcr = runs_smcr(out, "the server context's own connect to host A");
	printf("  %d PROPOSALs without CONFIRM from one address, cap %d: %d accepted, %d "
	       "declined\n",
	       CAP, CAP, accepted, declined);
	CHECK(smcr, "the server context's own connect ran TCP: handshakes held every place");
	CHECK(accepted == HS_SHARE, "%d handshakes of one address admitted, share %d", accepted,
	      HS_SHARE);
	CHECK(!usmc_close(out), "close");
	for (int i = 0; i < CAP; i++) {
		close(c[i].fd);
		if (c[i].rmb_mr)
			ibv_dereg_mr(c[i].rmb_mr);
		free(c[i].rmb);
	}
	hp_link_close(&lk);
	servers_stop(s, NSERVERS);
}

int main(int argc, char **argv)
{
	const char *sc = argc > 1 ? argv[1] : "";

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("scenario %s\n", sc);
	if (!strcmp(sc, "closed"))
		run_closed();
	else if (!strcmp(sc, "proposals"))
		run_proposals();
	else
		die("unknown scenario '%s'", sc);
	printf("PASS %s\n", sc);
	return 0;
}
