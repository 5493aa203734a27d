// SPDX-License-Identifier: MIT
/*
 * A link group with two links between libusmc and the Linux kernel's own
 * SMC-R, in both roles, over the guest's two RoCE paths
 * (tests/rxe/vm-run.sh --setup twopath --smc):
 *
 *  ksrv  a usmc client on host A, the kernel's AF_SMC echo server on host
 *        B: the kernel adds the second link (its ADD_LINK, our response,
 *        its CONFIRM_LINK on the new QP: net/smc/smc_llc.c
 *        smc_llc_srv_add_link());
 *  kcli  the kernel's AF_SMC client on host A, a usmc echo server on host
 *        B: we add it (smc_llc_cli_add_link() answers).
 *
 * In each, both ends' link groups hold two ACTIVE links, the second on
 * path 2; then a checked stream (USMC_TEST_FAILOVER_MB, default 64 MiB)
 * loses path 1 a quarter of the way through, for 5 s with its netdevs down
 * (*-portdown: a port event at both ends), or for 10 s with its RoCE lost
 * at ingress (*-silent: no event; both ends' TEST_LINK every 3 s tells,
 * the kernel's net.smc.smcr_testlink_time set to 3 for the case). The
 * stream completes intact on path 2, the usmc end counts a failover, the
 * longest time without progress is printed and bounded (1 s after a port
 * event, 2 x the TEST_LINK interval when silent); once path 1 is back the
 * server (the kernel, or usmc) adds a link again, and a stream crosses.
 *
 * The kernel gets two paths as docs/soft-roce.md "The kernel's SMC-R on
 * two paths" shows: a pnet table that gives each host its own devices,
 * and path 2's netdevs an address in path 1's subnet; the usmc end is told
 * its own host's devices (usmc_ctx_set_devices()), as the pnet table tells
 * the kernel. Both are undone at exit.
 *
 * usage: test_multilink_kernel <smc_kctl> [ksrv-portdown|kcli-portdown|
 *        ksrv-silent|kcli-silent ...] (as root in the guest)
 */
#include "multilink.h"

#define UEID		 "USMC-ML-KERNEL"
#define TESTLINK_S	 3 /* the silent cases' TEST_LINK interval (the kernel's) */
#define TESTLINK_SYSCTL	 "/proc/sys/net/smc/smcr_testlink_time"
#define PORT_BASE	 18720
#define SUBNET_A2	 "10.0.0.3/24" /* path 2's netdevs in path 1's subnet */
#define SUBNET_B2	 "10.0.0.4/24"
#define KLINKS_LINE_MAX	 512
#define AFTER_STREAM_MiB 4

static const char *kctl;
static long saved_testlink = -1;
static bool configured;

/* ---- the kernel's side of two paths -------------------------------------- */

static void kernel_unconfigure(void)
{
	if (saved_testlink > 0)
		kpeer_sysctl_set(TESTLINK_SYSCTL, saved_testlink);
	if (!configured)
		return;
	configured = false;
	fnet_sh("'%s' pnet flush", kctl);
	fnet_sh("ip addr del %s dev %s; ip addr del %s dev %s; true", SUBNET_A2,
		getenv("USMC_TEST_NETDEV_A2"), SUBNET_B2, getenv("USMC_TEST_NETDEV_B2"));
}

static void kernel_configure(void)
{
	const char *host[2] = {"HOSTA", "HOSTB"}, *side[2] = {"A", "B"};

	CHECK(!fnet_sh("'%s' ueid flush && '%s' ueid add %s && '%s' pnet flush", kctl, kctl, UEID,
		       kctl),
	      "smc_kctl ueid/pnet");
	configured = true;
	atexit(kernel_unconfigure);
	for (int h = 0; h < 2; h++)
		for (int path = 1; path <= 2; path++) {
			char ndev[32], rdev[32];

			snprintf(ndev, sizeof(ndev), "USMC_TEST_NETDEV_%s%s", side[h],
				 path == 1 ? "" : "2");
			snprintf(rdev, sizeof(rdev), "USMC_TEST_RXE_%s%s", side[h],
				 path == 1 ? "" : "2");
			CHECK(getenv(ndev) && getenv(rdev), "%s/%s not set (--setup twopath)", ndev,
			      rdev);
			CHECK(!fnet_sh("'%s' pnet add %s eth %s && '%s' pnet add %s ib %s", kctl,
				       host[h], getenv(ndev), kctl, host[h], getenv(rdev)),
			      "smc_kctl pnet add");
		}
	/* replace: a run that died with two threads in exit() may have left them */
	CHECK(!fnet_sh("ip addr replace %s dev %s && ip addr replace %s dev %s", SUBNET_A2,
		       getenv("USMC_TEST_NETDEV_A2"), SUBNET_B2, getenv("USMC_TEST_NETDEV_B2")),
	      "path 2's addresses in path 1's subnet");
}

/*
 * The kernel's link group of @role ("client"/"server") that has a
 * connection: how many ACTIVE links it holds, and whether one is on
 * @dev2 (path 2's device of the kernel's host). Prints the dump.
 */
static int kernel_links(const char *role, const char *dev2, bool *on_path2)
{
	char cmd[512], line[KLINKS_LINE_MAX], want[64], dev[64];
	int links = 0, best = 0;
	bool in = false, p2 = false;
	FILE *f;

	*on_path2 = false;
	snprintf(cmd, sizeof(cmd), "'%s' links", kctl);
	snprintf(want, sizeof(want), "role=%s ", role);
	snprintf(dev, sizeof(dev), "dev=%s ", dev2);
	f = popen(cmd, "r");
	CHECK(f, "popen %s", cmd);
	while (fgets(line, sizeof(line), f)) {
		fputs(line, stdout);
		if (!strncmp(line, "lgr ", 4)) {
			if (in && links > best) {
				best = links;
				*on_path2 = p2;
			}
			in = strstr(line, want) && !strstr(line, "conns=0");
			links = 0;
			p2 = false;
		} else if (in && strstr(line, "state=ACTIVE")) {
			links++;
			p2 |= strstr(line, dev) != NULL;
		}
	}
	pclose(f);
	if (in && links > best) {
		best = links;
		*on_path2 = p2;
	}
	return best;
}

/* Wait up to @ms for that link group to hold @want links, one on path 2. */
static int kernel_wait_links(const char *role, const char *dev2, int want, int ms)
{
	double until = mono_s() + ms / 1000.0;
	bool p2;
	int n;

	while ((n = kernel_links(role, dev2, &p2)) != want || (want > 1 && !p2)) {
		if (mono_s() >= until)
			return n;
		usleep(200000);
	}
	return n;
}

/* ---- the kernel's echo server ------------------------------------------- */

struct kserver {
	int lfd;
	pthread_t t;
};

static void *kserver_main(void *arg)
{
	struct kserver *k = arg;
	static uint8_t buf[ML_CHUNK];
	int fd = accept(k->lfd, NULL, NULL);
	struct end e = {.fd = fd};
	ssize_t n;

	CHECK(fd >= 0, "kernel accept: %s", strerror(errno));
	while ((n = end_recv(&e, buf, sizeof(buf))) > 0)
		ml_end_send_all(&e, buf, (size_t)n);
	CHECK(n == 0, "kernel echo: %s", strerror((int)-n));
	close(fd);
	return NULL;
}

/* ---- one case ----------------------------------------------------------- */

struct kpair {
	bool usmc_server; /* kcli: the kernel connects to us */
	struct usmc_ctx *ctx;
	struct ml_server us;
	struct kserver ks;
	pthread_t t;
	struct end e; /* the client's end: what streams */
};

static char *devices_of(const char *side, char *buf, size_t len)
{
	char a[32], b[32];

	snprintf(a, sizeof(a), "USMC_TEST_RXE_%s", side);
	snprintf(b, sizeof(b), "USMC_TEST_RXE_%s2", side);
	snprintf(buf, len, "%s,%s", getenv(a), getenv(b));
	return buf;
}

static void kpair_open(struct kpair *p, bool usmc_server, int port, long testlink_ms)
{
	const char *a = getenv("USMC_TEST_HOST_A"), *b = getenv("USMC_TEST_HOST_B");
	struct sockaddr_in sa = kpeer_addr(b, port);
	char devs[80];
	int rc;

	memset(p, 0, sizeof(*p));
	p->usmc_server = usmc_server;
	p->ctx = ml_ctx(2, devices_of(usmc_server ? "B" : "A", devs, sizeof(devs)));
	CHECK(!usmc_ctx_set_ueid(p->ctx, UEID), "usmc_ctx_set_ueid");
	if (testlink_ms)
		CHECK(!usmc_ctx_setopt(p->ctx, USMC_OPT_TESTLINK_MS, testlink_ms), "TESTLINK_MS");
	if (usmc_server) {
		CHECK(!usmc_listen(p->ctx, (struct sockaddr *)&sa, sizeof(sa), 8, 0, &p->us.l),
		      "usmc_listen");
		CHECK(!pthread_create(&p->t, NULL, ml_server_main, &p->us), "pthread_create");
		p->e.fd = kpeer_connect(a, b, port);
		CHECK(p->e.fd >= 0, "kernel connect: %s", strerror(-p->e.fd));
		return;
	}
	p->ks.lfd = kpeer_listen(b, port, 8);
	CHECK(p->ks.lfd >= 0, "kernel listen: %s", strerror(-p->ks.lfd));
	CHECK(!pthread_create(&p->t, NULL, kserver_main, &p->ks), "pthread_create");
	p->e.fd = -1;
	rc = usmc_connect(p->ctx, (struct sockaddr *)&sa, sizeof(sa), 0, &p->e.c);
	CHECK(!rc, "usmc_connect: %s", usmc_strerror(rc));
	expect_smcr(p->e.c, "client");
}

static void kpair_close(struct kpair *p)
{
	uint8_t b[256];
	ssize_t n;

	if (p->e.fd >= 0)
		CHECK(!shutdown(p->e.fd, SHUT_WR), "shutdown: %s", strerror(errno));
	else
		CHECK(!usmc_shutdown(p->e.c, SHUT_WR), "usmc_shutdown");
	while ((n = end_recv(&p->e, b, sizeof(b))) > 0)
		;
	CHECK(n == 0, "recv to EOF: %s", strerror((int)-n));
	CHECK(!end_close(&p->e), "client close");
	pthread_join(p->t, NULL);
	if (p->usmc_server)
		usmc_listener_close(p->us.l);
	else
		close(p->ks.lfd);
	CHECK(!usmc_ctx_destroy(p->ctx), "usmc_ctx_destroy");
}

/* Both ends hold two links, the second on path 2; prints them. */
static void expect_two_links(struct kpair *p, const char *when)
{
	const char *kdev2 = getenv(p->usmc_server ? "USMC_TEST_RXE_A2" : "USMC_TEST_RXE_B2");
	const char *udev2 = getenv(p->usmc_server ? "USMC_TEST_RXE_B2" : "USMC_TEST_RXE_A2");
	const char *krole = p->usmc_server ? "client" : "server";
	struct smcr_link l[SMCR_LINKS_MAX];
	int n = ml_wait_links(p->ctx, 2, ML_READD_WAIT_MS, l), k;
	bool p2 = false;

	ml_print_links("usmc", l, n);
	for (int i = 0; i < n; i++)
		p2 |= !strcmp(l[i].dev.name, udev2);
	CHECK(n == 2 && p2, "%s: usmc holds %d links%s", when, n, p2 ? "" : ", none on path 2");
	k = kernel_wait_links(krole, kdev2, 2, ML_LINKS_WAIT_MS);
	CHECK(k == 2, "%s: the kernel's %s link group holds %d links, not 2 with one on %s", when,
	      krole, k, kdev2);
	printf("%s: two links at each end, the second on path 2\n", when);
}

static void test_kernel_failover(bool usmc_server, enum ml_fault f, int port)
{
	uint64_t total = (uint64_t)env_long("USMC_TEST_FAILOVER_MB", 64) << 20;
	const char *name = usmc_server ? "kcli" : "ksrv";
	bool silent = f == FAULT_SILENT_DROP;
	double t0, gap, bound = silent ? 2.0 * TESTLINK_S : 1.0;
	struct smcr_link l[SMCR_LINKS_MAX];
	struct kpair p;
	int n;

	if (silent) {
		CHECK(!kpeer_sysctl_get(TESTLINK_SYSCTL, &saved_testlink), "read %s",
		      TESTLINK_SYSCTL);
		CHECK(!kpeer_sysctl_set(TESTLINK_SYSCTL, TESTLINK_S), "set %s", TESTLINK_SYSCTL);
	}
	t0 = mono_s();
	/*
	 * Silent, with the kernel as server: the kernel must find the loss
	 * first. Told by its client, a kernel server waits for its sends on
	 * the lost link to complete, without a deadline (net/smc/smc_llc.c
	 * smc_llc_process_srv_delete_link() -> smc_wr.c
	 * smc_wr_tx_wait_no_pending_sends()); rxe retries a send for ever at
	 * retry_cnt 7 and the client's QP is gone, so they never do, and the
	 * kernel's link group takes no LLC flow again (no second link ever).
	 * Hardware ends the retries (7 of them) in about a second. So our
	 * TEST_LINK waits twice as long as the kernel's here.
	 */
	kpair_open(&p, usmc_server, port, !silent ? 0 : (usmc_server ? 1 : 2) * TESTLINK_S * 1000);
	expect_two_links(&p, name);
	printf("%s: second link up %.0f ms after the connect\n", name, (mono_s() - t0) * 1000);
	t0 = mono_s();
	gap = ml_stream_through_fault(&p.e, total, f);
	n = ml_active_links(p.ctx, l);
	printf("%s failover (%s): %llu MiB intact in %.1f s, longest without progress %.0f ms; "
	       "usmc failovers %llu, links now %d\n",
	       name, ml_fault_name(f), (unsigned long long)(total >> 20), mono_s() - t0, gap * 1000,
	       (unsigned long long)ml_failovers(p.ctx), n);
	CHECK(ml_failovers(p.ctx) >= 1, "no failover counted at the usmc end");
	CHECK(gap < bound, "%.0f ms without progress: over the target of %.0f ms", gap * 1000,
	      bound * 1000);
	CHECK(n >= 1, "no link left at the usmc end");
	/* the path is back: the server, kernel or usmc, adds a link again */
	t0 = mono_s();
	expect_two_links(&p, "recovery");
	printf("%s recovery: two links again %.1f s after the stream\n", name, mono_s() - t0);
	ml_stream_through_fault(&p.e, (uint64_t)AFTER_STREAM_MiB << 20, FAULT_NONE);
	kpair_close(&p);
	if (silent) {
		kpeer_sysctl_set(TESTLINK_SYSCTL, saved_testlink);
		saved_testlink = -1;
	}
	printf("ok: %s, %s\n", name, ml_fault_name(f));
}

int main(int argc, char **argv)
{
	static const char *const all[] = {"ksrv-portdown", "kcli-portdown", "ksrv-silent",
					  "kcli-silent"};
	const char *const *run = argc > 2 ? (const char *const *)argv + 2 : all;
	int n = argc > 2 ? argc - 2 : 4;

	setvbuf(stdout, NULL, _IOLBF, 0);
	kctl = argc > 1 ? argv[1] : NULL;
	CHECK(kctl, "usage: test_multilink_kernel <smc_kctl> [case...]");
	kernel_configure();
	for (int i = 0; i < n; i++) {
		bool kcli = !strncmp(run[i], "kcli-", 5);

		CHECK(kcli || !strncmp(run[i], "ksrv-", 5), "no case %s", run[i]);
		if (!strcmp(run[i] + 5, "portdown"))
			test_kernel_failover(kcli, FAULT_PORT_DOWN, PORT_BASE + i);
		else if (!strcmp(run[i] + 5, "silent"))
			test_kernel_failover(kcli, FAULT_SILENT_DROP, PORT_BASE + i);
		else
			CHECK(0, "no case %s", run[i]);
	}
	return 0;
}
