// SPDX-License-Identifier: MIT
/*
 * Asymmetric link groups: two links where one end has a single RoCE port
 * (Linux's SMC_LGR_ASYMMETRIC_LOCAL / _PEER), over the guest's asym
 * topology (tests/rxe/vm-run.sh --setup asym: host A has two ports, rxe0
 * and rxe2; host B one, rxe1 on a bridge both of A's wires reach). Each
 * context is kept to its own host's ports (usmc_ctx_set_devices()).
 *
 *  srv1     the server has the one port: it offers its second link on the
 *           port its first uses, the client takes it on its second port;
 *  cli1     the client has the one port: the server offers its second
 *           port, the client takes it on its one port;
 *  neither  each end keeps to one port: the server's offer on its one
 *           port is rejected (the client has none to spare), the link
 *           group stays single, and the server does not offer again
 *           (no ADD_LINK every SMCR_READD_MS).
 *
 * In srv1 and cli1 both ends hold two ACTIVE links (the one-port end's
 * both on that port); a checked stream (USMC_TEST_FAILOVER_MB, default 64
 * MiB) loses host A's path-1 port for 5 s (veth0 down: rxe0 DOWN, host B's
 * one port stays up) and completes on the other link, within 1 s without
 * progress; then the link comes back.
 *
 * usage: test_multilink_asym [srv1|cli1|neither ...] (as root in the guest)
 */
#include "multilink.h"

#define NEITHER_WATCH_MS 6000 /* three re-add ticks (SMCR_READD_MS) */

/* Host @side's ports: "A" both of A's, "A1" only its first, "B" B's one. */
static const char *ports(const char *side)
{
	static char buf[2][80];
	static int i;
	char *out = buf[i++ % 2];

	if (!strcmp(side, "A"))
		snprintf(out, sizeof(buf[0]), "%s,%s", getenv("USMC_TEST_RXE_A"),
			 getenv("USMC_TEST_RXE_A2"));
	else
		snprintf(out, sizeof(buf[0]), "%s",
			 getenv(!strcmp(side, "A1") ? "USMC_TEST_RXE_A" : "USMC_TEST_RXE_B"));
	return out;
}

struct apair {
	struct usmc_ctx *sctx, *cctx;
	struct ml_server srv;
	pthread_t t;
	struct usmc_conn *c;
};

/* A server on @srv_host ("A" or "B") with the ports @srv_ports, a client
 * from the other host (the routing picks its address) with @cli_ports,
 * both allowing two links. */
static void apair_open(struct apair *p, const char *srv_host, const char *srv_ports,
		       const char *cli_ports)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct sockaddr_in sa;
	char env[32];
	int rc;

	memset(p, 0, sizeof(*p));
	p->sctx = ml_ctx(2, srv_ports);
	p->cctx = ml_ctx(2, cli_ports);
	snprintf(env, sizeof(env), "USMC_TEST_HOST_%s", srv_host);
	sa = host_addr(env, 0);
	rc = usmc_listen(p->sctx, (struct sockaddr *)&sa, sizeof(sa), 8, 0, &p->srv.l);
	CHECK(!rc, "usmc_listen: %s", usmc_strerror(rc));
	rc = usmc_listener_addr(p->srv.l, &ss, &len);
	CHECK(!rc, "usmc_listener_addr: %s", usmc_strerror(rc));
	memcpy(&sa, &ss, sizeof(sa));
	CHECK(!pthread_create(&p->t, NULL, ml_server_main, &p->srv), "pthread_create");
	rc = usmc_connect(p->cctx, (struct sockaddr *)&sa, sizeof(sa), 0, &p->c);
	CHECK(!rc, "usmc_connect: %s", usmc_strerror(rc));
	expect_smcr(p->c, "client");
}

static void apair_close(struct apair *p)
{
	uint8_t b[256];
	ssize_t n;

	CHECK(!usmc_shutdown(p->c, SHUT_WR), "shutdown");
	while ((n = usmc_recv(p->c, b, sizeof(b), 0)) > 0)
		;
	CHECK(n == 0, "recv to EOF: %s", usmc_strerror((int)n));
	CHECK(!usmc_close(p->c), "client close");
	pthread_join(p->t, NULL);
	usmc_listener_close(p->srv.l);
	usmc_ctx_destroy(p->cctx);
	usmc_ctx_destroy(p->sctx);
}

/* @ctx holds two links; how many of them are on @dev. */
static int two_links_on(struct usmc_ctx *ctx, const char *who, const char *dev, int ms)
{
	struct smcr_link l[SMCR_LINKS_MAX];
	int n = ml_wait_links(ctx, 2, ms, l), on = 0;

	ml_print_links(who, l, n);
	CHECK(n == 2, "%s holds %d links, not 2", who, n);
	for (int i = 0; i < n; i++)
		on += !strcmp(l[i].dev.name, dev);
	return on;
}

/* Two links at each end, both of the one-port end's on its port, one on
 * each port of the other end. */
static void expect_asym(struct apair *p, bool server_has_one, int ms, const char *when)
{
	struct usmc_ctx *one = server_has_one ? p->sctx : p->cctx;
	struct usmc_ctx *two = server_has_one ? p->cctx : p->sctx;

	CHECK(two_links_on(one, "one-port end", getenv("USMC_TEST_RXE_B"), ms) == 2,
	      "%s: the one-port end's links are not both on its port", when);
	CHECK(two_links_on(two, "two-port end", getenv("USMC_TEST_RXE_A"), ms) == 1 &&
		      two_links_on(two, "two-port end", getenv("USMC_TEST_RXE_A2"), ms) == 1,
	      "%s: the two-port end's links are not one on each port", when);
	printf("%s: asymmetric, two links at each end\n", when);
}

static void test_asym(bool server_has_one)
{
	uint64_t total = (uint64_t)env_long("USMC_TEST_FAILOVER_MB", 64) << 20;
	const char *name = server_has_one ? "srv1" : "cli1";
	struct apair p;
	double t0, gap;

	t0 = mono_s();
	if (server_has_one)
		apair_open(&p, "B", ports("B"), ports("A"));
	else
		apair_open(&p, "A", ports("A"), ports("B"));
	expect_asym(&p, server_has_one, ML_LINKS_WAIT_MS, name);
	printf("%s: second link up %.0f ms after the connect\n", name, (mono_s() - t0) * 1000);
	t0 = mono_s();
	gap = ml_stream_through_fault(&(struct end){.fd = -1, .c = p.c}, total, FAULT_PORT_DOWN);
	printf("%s failover (%s): %llu MiB intact in %.1f s, longest without progress %.0f ms; "
	       "failovers server %llu client %llu\n",
	       name, ml_fault_name(FAULT_PORT_DOWN), (unsigned long long)(total >> 20),
	       mono_s() - t0, gap * 1000, (unsigned long long)ml_failovers(p.sctx),
	       (unsigned long long)ml_failovers(p.cctx));
	CHECK(ml_failovers(p.sctx) >= 1 && ml_failovers(p.cctx) >= 1,
	      "a failover at each end expected");
	CHECK(gap < 1.0, "%.0f ms without progress: over the target", gap * 1000);
	expect_asym(&p, server_has_one, ML_READD_WAIT_MS, "recovery");
	ml_stream_through_fault(&(struct end){.fd = -1, .c = p.c}, 4u << 20, FAULT_NONE);
	apair_close(&p);
	printf("ok: %s\n", name);
}

static uint64_t llc_sent(struct usmc_ctx *ctx)
{
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	return st.llc_sent;
}

static void test_neither(void)
{
	struct smcr_link l[SMCR_LINKS_MAX];
	uint64_t sent0;
	struct apair p;
	int ns, nc;

	apair_open(&p, "B", ports("B"), ports("A1"));
	usleep(SMCR_LLC_WAIT_MS * 1000); /* the first offer and its rejection */
	sent0 = llc_sent(p.sctx);
	usleep(NEITHER_WATCH_MS * 1000);
	ns = ml_active_links(p.sctx, l);
	nc = ml_active_links(p.cctx, l);
	printf("neither: %d and %d links; the server sent %llu LLC messages in %d ms after "
	       "the rejection\n",
	       ns, nc, (unsigned long long)(llc_sent(p.sctx) - sent0), NEITHER_WATCH_MS);
	CHECK(ns == 1 && nc == 1, "a second link where neither end has a port to spare");
	CHECK(!ml_links_added(p.sctx) && !ml_links_added(p.cctx), "links_added");
	CHECK(llc_sent(p.sctx) == sent0, "the server offered again after the rejection");
	ml_stream_through_fault(&(struct end){.fd = -1, .c = p.c}, 4u << 20, FAULT_NONE);
	apair_close(&p);
	printf("ok: neither\n");
}

int main(int argc, char **argv)
{
	static const char *const all[] = {"srv1", "cli1", "neither"};
	const char *const *run = argc > 1 ? (const char *const *)argv + 1 : all;
	int n = argc > 1 ? argc - 1 : 3;

	setvbuf(stdout, NULL, _IOLBF, 0);
	CHECK(getenv("USMC_TEST_SETUP") && !strcmp(getenv("USMC_TEST_SETUP"), "asym"),
	      "needs tests/rxe/vm-run.sh --setup asym");
	for (int i = 0; i < n; i++) {
		if (!strcmp(run[i], "srv1"))
			test_asym(true);
		else if (!strcmp(run[i], "cli1"))
			test_asym(false);
		else if (!strcmp(run[i], "neither"))
			test_neither();
		else
			CHECK(0, "no case %s", run[i]);
	}
	return 0;
}
