// SPDX-License-Identifier: MIT
/*
 * A first contact whose RoCE path is cut (UDP 4791 dropped on both veths,
 * roce_cut.h) after the CLC went through: CONFIRM_LINK never arrives, both
 * ends fall back to TCP, and exactly one DECLINE may cross the stream: it
 * must never reach an application (docs/smcr.md "A failed first contact").
 * In the rxe guest with --smc --setup two, as root; host A runs the
 * clients, host B the servers.
 *
 *   usage: test_fc_decline <smc_kctl> <scenario>
 *
 * Linux's timing, measured on the wire and checked against the order
 * libusmc's constants rely on (smcr_clc.h), so that a kernel that changes
 * it is caught:
 *   ktime_server  usmc client -> kernel server: the kernel server's
 *                 DECLINE must come while our client still waits for it
 *   ktime_client  kernel client -> usmc server, ours held KCLIENT_HOLD_MS:
 *                 the kernel client gives up and declines; that must be
 *                 well after our server declines, and within the window in
 *                 which it takes a crossing DECLINE
 * The matrix: each row falls back, then 1 MiB goes each way at once and
 * every byte is checked at both ends; the mode and reason of each usmc end
 * and the kernel's smc_diag verdict are printed. A hold (roce_hold_tcp())
 * starts once the CLC went through, so it delays a DECLINE, not the CLC.
 *   u2k_early     usmc client -> kernel server, nothing held
 *   u2k_late      the kernel server's TCP held HOLD_MS: its DECLINE comes
 *                 after Linux's client (and our former one) stopped
 *                 waiting for it
 *   u2k_absent    a server that never declines (the hostile peer)
 *   k2u_early     kernel client -> usmc server, nothing held
 *   k2u_late      the kernel client's TCP held HOLD_MS
 *   k2u_absent    a client that never declines (the hostile peer)
 *   u2u_early     usmc <-> usmc, nothing held
 *   u2u_late      the usmc server's TCP held USMC_HOLD_MS: its DECLINE
 *                 comes after our former client's wait
 *   k2k_early     kernel <-> kernel, nothing held: reported, not judged
 *   k2k_crossed   the kernel server's TCP held CROSS_HOLD_MS: reported
 *   k2u_crossed   the usmc server's TCP held KCLIENT_HOLD_MS: the kernel
 *                 client gives up and declines, crossing ours: the usmc
 *                 end is judged, the kernel's, which reads ours, reported
 * With RoCE dropped as it leaves (roce_cut()) rxe fails a send at once;
 * the *_lost scenarios drop it as it arrives (roce_lose()), so that a
 * sender's QP retries until it gives up, as on a fabric that loses the
 * packets (the kernel server then tears its link down more slowly):
 *   ktime_server_lost, ktime_client_lost, u2k_lost, k2u_lost, u2u_lost,
 *   k2k_lost (reported)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <usmc/usmc.h>

#include "../common/check.h"
#include "ctx.h"
#include "fc_stream.h"
#include "hostile_peer.h"
#include "kcompat.h"
#include "kernel_peer.h"
#include "mono_clock.h"
#include "roce_cut.h"
#include "smcr_clc.h"
#include "smcr_llc.h"

#define UEID "LIBUSMC" /* the hostile peer's */
/* Holds of one side's TCP that make its DECLINE late: it then comes after
 * Linux's client (and libusmc's before) stopped looking for it, 5 s after
 * the CONFIRM. Linux's server declines 3.1 s after the CONFIRM here (RoCE
 * dropped), ours 1.1 s after (rxe fails the CONFIRM_LINK send at once). */
#define HOLD_MS		3000 /* Linux's DECLINE: at 6.1 s */
#define USMC_HOLD_MS	4500 /* ours: at 5.6 s */
#define CROSS_HOLD_MS	2500 /* Linux's server's: at 5.6 s, after Linux's client */
#define ORDER_MARGIN_MS 800  /* the guest's slack in the ordering checks */
#define HOLD_AFTER_MS	400  /* the CLC is through by then, no DECLINE yet */
#define HOLD_SLACK_MS	500
#define KCLIENT_HOLD_MS 6000 /* our server's DECLINE past any client's wait */

static const char *kctl, *host_a, *host_b;

/* ---- the wire: RoCE cut, one host's TCP held ---- */

static void net_restore(void)
{
	roce_hold_tcp(0, 0);
	roce_hold_tcp(1, 0);
	roce_cut(false);
}

/*
 * A hold of one host's TCP (roce_hold_tcp()) from HOLD_AFTER_MS into the
 * handshake, once the CLC went through and before anyone's DECLINE: it
 * makes that host's DECLINE late, not its ACCEPT or CONFIRM. It is
 * released once the handshakes ended and what it held has come, so that
 * the data after it runs at full speed.
 */
struct hold {
	int host, ms;
	bool lost; /* RoCE lost on the way (roce_lose()), not refused at once */
	double t0;
	pthread_t th;
};

static void *hold_thread(void *arg)
{
	struct hold *h = arg;

	usleep(HOLD_AFTER_MS * 1000);
	CHECK(!roce_hold_tcp(h->host, h->ms), "tc: cannot hold host %c's TCP", 'A' + h->host);
	return NULL;
}

static void net_cut(struct hold *h)
{
	atexit(net_restore);
	CHECK(!(h->lost ? roce_lose(true) : roce_cut(true)), "tc: cannot drop RoCE");
	h->t0 = mono_s();
	if (h->ms)
		pthread_create(&h->th, NULL, hold_thread, h);
}

static void hold_release(struct hold *h)
{
	double until = h->t0 + (HOLD_AFTER_MS + h->ms + HOLD_SLACK_MS) / 1e3;

	if (!h->ms)
		return;
	pthread_join(h->th, NULL);
	while (mono_s() < until)
		usleep(50000);
	roce_hold_tcp(h->host, 0);
}

/* ---- the ends' verdicts ---- */

static void usmc_verdict(const struct fc_end *e, double secs)
{
	struct timeval tv = {.tv_sec = FC_IO_WAIT_MS / 1000};
	struct usmc_conn_info ci;

	CHECK(!usmc_conn_info(e->c, &ci), "usmc_conn_info");
	/* on TCP usmc_recv() is the socket's: bounded like the others */
	setsockopt(usmc_conn_fd(e->c), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	printf("  %s: %s, %s%s, after %.2f s\n", e->name, usmc_mode_name(ci.mode),
	       usmc_reason_name(ci.reason), ci.peer_declined ? " (the peer's DECLINE)" : "", secs);
	CHECK(ci.mode == USMC_MODE_TCP, "%s runs %s, not TCP", e->name, usmc_mode_name(ci.mode));
}

/* The kernel socket @fd's smc_diag line: @local is its host. */
static void kernel_verdict(const char *name, int fd, const char *local, const char *peer,
			   bool listener_side, int port)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	struct kdiag d = {0};
	int rc;

	CHECK(!getpeername(fd, (struct sockaddr *)&a, &len), "getpeername");
	rc = listener_side ? kpeer_diag(kctl, local, port, peer, ntohs(a.sin_port), &d)
			   : kpeer_diag(kctl, local, kpeer_local_port(fd), peer, port, &d);
	if (rc)
		printf("  %s: no smc_diag entry\n", name);
	else
		printf("  %s: %s, fallback %#x, peer diagnosis %#x\n", name, d.mode, d.fallback,
		       d.peer_diagnosis);
}

/* ---- the contexts ---- */

static struct usmc_ctx *make_ctx(void)
{
	struct usmc_ctx *ctx;

	setenv("USMC_KERNEL_COMPAT", "1", 1);
	CHECK(!usmc_ctx_create(&ctx), "usmc_ctx_create");
	unsetenv("USMC_KERNEL_COMPAT");
	CHECK(!usmc_ctx_set_ueid(ctx, UEID), "usmc_ctx_set_ueid");
	return ctx;
}

static struct usmc_listener *usmc_listen_b(struct usmc_ctx *ctx, int *port)
{
	struct sockaddr_in b = kpeer_addr(host_b, 0);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct usmc_listener *l;

	CHECK(!usmc_listen(ctx, (struct sockaddr *)&b, sizeof(b), 16, 0, &l), "usmc_listen");
	CHECK(!usmc_listener_addr(l, &ss, &len), "usmc_listener_addr");
	*port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return l;
}

/* A blocking connect in a thread: a usmc one (ctx set) or a kernel one. */
struct connector {
	struct usmc_ctx *ctx;
	int port;
	struct usmc_conn *c;
	int fd, rc;
	double secs;
};

static void *connect_thread(void *arg)
{
	struct connector *k = arg;
	struct sockaddr_in b = kpeer_addr(host_b, k->port);
	double t0 = mono_s();

	if (k->ctx)
		k->rc = usmc_connect(k->ctx, (struct sockaddr *)&b, sizeof(b), 0, &k->c);
	else
		k->rc = (k->fd = kpeer_connect(host_a, host_b, k->port)) < 0 ? k->fd : 0;
	k->secs = mono_s() - t0;
	return NULL;
}

static void judge(int rc, const char *why)
{
	CHECK(!rc, "%s", why);
	printf("  every byte intact both ways\n");
}

static void fc_end_close(struct fc_end *e)
{
	if (e->c)
		usmc_close(e->c);
	else if (e->fd >= 0)
		close(e->fd);
}

/* ---- one row of the matrix ---- */

enum who { USMC, KERNEL, HOSTILE };

struct row {
	enum who cli, srv;
	int hold_host, hold_ms; /* whose TCP is held, how long (0: none) */
	bool lost;		/* RoCE lost on the way, not refused at once */
	bool report_kernel;	/* the kernel's ends are reported, not judged */
};

static const char *who_name(enum who w, bool client)
{
	static const char *n[3][2] = {{"usmc server", "usmc client"},
				      {"kernel server", "kernel client"},
				      {"hostile server", "hostile client"}};

	return n[w][client];
}

/*
 * The hostile peer's TCP sockets marked as a kernel-compatible SMC peer's
 * (its SYN or SYN-ACK carries the SMC option, kcompat.h), with the
 * kernel-compat state of a context of its own: the kernel's SMC, and usmc
 * in that mode, then speak CLC with it.
 */
struct hostile_kc {
	struct usmc_ctx *ctx;
	struct kcompat_lsn lsn;
	uint32_t ticket;
};

static void hostile_sock(int fd, enum hp_sock_stage stage, void *arg)
{
	struct hostile_kc *h = arg;

	if (stage == HP_SOCK_CONNECT)
		h->ticket = kcompat_mark_client(h->ctx->kc, fd);
	else if (stage == HP_SOCK_LISTEN)
		kcompat_listener_prepare(h->ctx->kc, fd, &h->lsn);
	else
		kcompat_listener_started(h->ctx->kc, fd, &h->lsn);
}

static void hostile_open(struct hp_link *lk, struct hostile_kc *h, bool server)
{
	struct sockaddr_in a = kpeer_addr(server ? host_b : host_a, 0);

	memset(h, 0, sizeof(*h));
	h->ctx = make_ctx();
	CHECK(h->ctx->kc, "kernel-compat mode is off");
	hp_link_open(lk, getenv(server ? "USMC_TEST_RXE_B" : "USMC_TEST_RXE_A"), &a);
	lk->sock_hook = hostile_sock;
	lk->sock_hook_arg = h;
}

static void hostile_close(struct hp_link *lk, struct hostile_kc *h)
{
	hp_link_close(lk);
	kcompat_client_forget(h->ctx->kc, &h->ticket);
	if (h->lsn.active)
		kcompat_listener_forget(h->ctx->kc, &h->lsn);
	CHECK(!usmc_ctx_destroy(h->ctx), "usmc_ctx_destroy (hostile)");
}

/* The servers' side of a row: one of three listeners on host B. */
struct server {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	int lfd, port;
	struct hp_link lk;
	struct hostile_kc hk;
	struct hp_conn hc;
};

static void server_open(const struct row *r, struct server *sv)
{
	struct sockaddr_in bound;

	memset(sv, 0, sizeof(*sv));
	sv->lfd = -1;
	if (r->srv == USMC) {
		sv->ctx = make_ctx();
		sv->l = usmc_listen_b(sv->ctx, &sv->port);
	} else if (r->srv == KERNEL) {
		sv->lfd = kpeer_listen(host_b, 0, 16);
		CHECK(sv->lfd >= 0, "kernel listen");
		sv->port = kpeer_local_port(sv->lfd);
	} else {
		hostile_open(&sv->lk, &sv->hk, true);
		sv->lfd = hp_listen(&sv->lk, &bound);
		sv->port = ntohs(bound.sin_port);
	}
}

static void server_close(const struct row *r, struct server *sv)
{
	if (sv->l)
		usmc_listener_close(sv->l);
	if (sv->lfd >= 0)
		close(sv->lfd);
	if (r->srv == HOSTILE)
		hostile_close(&sv->lk, &sv->hk);
	if (sv->ctx)
		CHECK(!usmc_ctx_destroy(sv->ctx), "usmc_ctx_destroy (server)");
}

/* The hostile client: PROPOSAL, CONFIRM, then silence (no CONFIRM_LINK
 * answer, no DECLINE); it takes the server's DECLINE as an SMC stack in
 * its handshake would. */
static void hostile_client(int port, struct hp_link *lk, struct hostile_kc *hk, struct hp_conn *c)
{
	struct sockaddr_in srv = kpeer_addr(host_b, port);
	uint8_t buf[CLC_ACCEPT_MAX_LEN];
	int len, rc;

	hostile_open(lk, hk, false);
	hp_propose(lk, c, &srv, NULL, NULL);
	rc = hp_await_accept(c, 8000);
	CHECK(rc == 0, "no ACCEPT for the hostile client: %d (diagnosis %#x)", rc, c->decline_diag);
	len = hp_confirm_bytes(c, buf, sizeof(buf));
	CHECK(len > 0 && send(c->fd, buf, (size_t)len, 0) == len, "send the CONFIRM");
}

/* Both ends' handshakes; the seconds each took into @cs, @ss. */
static void handshake(const struct row *r, struct server *sv, struct fc_end *cli,
		      struct fc_end *srv, struct hp_link *hlk, struct hostile_kc *hk,
		      struct hp_conn *hc, double *cs, double *ss)
{
	struct connector k = {.port = sv->port, .fd = -1};
	double t0 = mono_s();
	pthread_t th;
	int rc;

	if (r->cli == HOSTILE)
		hostile_client(sv->port, hlk, hk, hc);
	else {
		k.ctx = r->cli == USMC ? make_ctx() : NULL;
		pthread_create(&th, NULL, connect_thread, &k);
	}
	if (r->srv == USMC)
		CHECK(!usmc_accept(sv->l, 0, &srv->c), "usmc_accept");
	else if (r->srv == KERNEL)
		CHECK((srv->fd = accept(sv->lfd, NULL, NULL)) >= 0, "kernel accept");
	else {
		rc = hp_serve(&sv->lk, &sv->hc, sv->lfd, false);
		CHECK(!rc, "hostile server: no CONFIRM: %d", rc);
		srv->fd = sv->hc.fd;
	}
	*ss = mono_s() - t0;
	if (r->cli == HOSTILE) {
		cli->fd = hc->fd;
		*cs = *ss;
		return;
	}
	pthread_join(th, NULL);
	CHECK(!k.rc, "%s: connect: %s", cli->name, usmc_strerror(k.rc));
	cli->c = k.c;
	cli->fd = k.fd;
	cli->ctx = k.ctx;
	*cs = k.secs;
}

static void verdicts(const struct row *r, const struct server *sv, const struct fc_end *cli,
		     const struct fc_end *srv, double cs, double ss)
{
	if (r->cli == USMC)
		usmc_verdict(cli, cs);
	else if (r->cli == KERNEL) {
		printf("  %s: connect returned after %.2f s\n", cli->name, cs);
		kernel_verdict(cli->name, cli->fd, host_a, host_b, false, sv->port);
	}
	if (r->srv == USMC)
		usmc_verdict(srv, ss);
	else if (r->srv == KERNEL)
		kernel_verdict(srv->name, srv->fd, host_b, host_a, true, sv->port);
}

/*
 * One row: RoCE cut, the hold if any, both handshakes, their verdicts,
 * then 1 MiB each way. A usmc end (and, unless @r says to report them,
 * the kernel's) must read every byte of the other's. The seconds the
 * client's and the server's handshakes took into @cs and @ss.
 */
static void run_row(const struct row *r, double *cs, double *ss)
{
	struct fc_end cli = {.name = who_name(r->cli, true),
			     .fd = -1,
			     .smc_peer_fd = r->cli == HOSTILE},
		      srv = {.name = who_name(r->srv, false),
			     .fd = -1,
			     .smc_peer_fd = r->srv == HOSTILE};
	struct hold h = {.host = r->hold_host, .ms = r->hold_ms, .lost = r->lost};
	struct hostile_kc hk;
	struct hp_link hlk;
	struct hp_conn hc;
	struct server sv;
	char why[200] = "";
	int rc;

	server_open(r, &sv);
	net_cut(&h);
	handshake(r, &sv, &cli, &srv, &hlk, &hk, &hc, cs, ss);
	verdicts(r, &sv, &cli, &srv, *cs, *ss);
	hold_release(&h);
	rc = fc_exchange(&cli, &srv, why, sizeof(why));
	if (rc && r->report_kernel) {
		bool usmc_hurt = (r->cli == USMC && cli.rx_bad) || (r->srv == USMC && srv.rx_bad);

		printf("  %s (Linux's own, reported)\n", why);
		CHECK(!usmc_hurt, "a usmc end: %s",
		      r->cli == USMC && cli.rx_bad ? cli.rx_err : srv.rx_err);
	} else
		judge(rc, why);
	fc_end_close(&cli);
	fc_end_close(&srv);
	if (cli.ctx)
		CHECK(!usmc_ctx_destroy(cli.ctx), "usmc_ctx_destroy (client)");
	if (r->cli == HOSTILE)
		hostile_close(&hlk, &hk);
	server_close(r, &sv);
}

/* ---- Linux's timing, against the order our constants rely on ---- */

/* Seconds from @t0 until a whole DECLINE starts @fd's stream (taken; its
 * diagnosis into *@diag), or -1 if none in 15 s. */
static double time_decline(int fd, double t0, uint32_t *diag)
{
	uint8_t buf[CLC_DECLINE_V2_LEN];
	struct clc_decline d;
	struct clc_hdr hdr;

	if (poll(&(struct pollfd){.fd = fd, .events = POLLIN}, 1, 15000) != 1 ||
	    recv(fd, buf, CLC_HDR_LEN, MSG_PEEK | MSG_WAITALL) != CLC_HDR_LEN ||
	    clc_hdr_decode(buf, CLC_HDR_LEN, &hdr) || hdr.type != CLC_DECLINE ||
	    hdr.length > sizeof(buf) || recv(fd, buf, hdr.length, MSG_WAITALL) != hdr.length ||
	    clc_decline_decode(buf, hdr.length, &d))
		return -1;
	*diag = d.diagnosis;
	return mono_s() - t0;
}

/*
 * The hostile client sends its CONFIRM and never answers CONFIRM_LINK: the
 * kernel server's DECLINE must come while our client still waits for it
 * (SMCR_CL_WAIT_MS + SMCR_CL_DECLINE_WAIT_MS after its CONFIRM).
 */
static void ktime_server_on(bool lost)
{
	double ours = (SMCR_CL_WAIT_MS + SMCR_CL_DECLINE_WAIT_MS) / 1e3, t;
	struct hold h = {.lost = lost};
	struct hostile_kc hk;
	struct hp_link lk;
	struct hp_conn c;
	struct server sv;
	uint32_t diag = 0;
	int kfd;

	server_open(&(struct row){.srv = KERNEL}, &sv);
	net_cut(&h);
	hostile_client(sv.port, &lk, &hk, &c);
	t = time_decline(c.fd, mono_s(), &diag);
	kfd = accept(sv.lfd, NULL, NULL);
	printf("  the kernel server declined (%#x) %.2f s after the CONFIRM; our client waits "
	       "for that DECLINE until %.2f s\n",
	       diag, t, ours);
	CHECK(t > 0, "no DECLINE from the kernel server within 15 s");
	CHECK(t < ours - ORDER_MARGIN_MS / 1e3,
	      "the kernel server declines %.2f s after the CONFIRM: too close to the end of our "
	      "client's wait (%.2f s)",
	      t, ours);
	if (kfd >= 0)
		close(kfd);
	hp_conn_drop(&c);
	hostile_close(&lk, &hk);
	server_close(&(struct row){.srv = KERNEL}, &sv);
}

static void ktime_server(void)
{
	ktime_server_on(false);
}

static void ktime_server_lost(void)
{
	ktime_server_on(true);
}

/*
 * The hostile server never sends CONFIRM_LINK nor a DECLINE: the kernel
 * client gives up and declines. That must be well after our server would
 * have declined (SMCR_LLC_WAIT_MS + CLC_WAIT_SHORT_MS after the CONFIRM),
 * and within the window in which our server takes a crossing DECLINE.
 */
static void ktime_client_on(bool lost)
{
	const struct row r = {.cli = KERNEL, .srv = HOSTILE};
	double ours = (SMCR_LLC_WAIT_MS + CLC_WAIT_SHORT_MS) / 1e3, t0, t;
	double cross = SMCR_SRV_CROSS_WAIT_MS / 1e3;
	struct connector k = {.fd = -1};
	struct hold h = {.lost = lost};
	struct server sv;
	uint32_t diag = 0;
	pthread_t th;
	int rc;

	server_open(&r, &sv);
	net_cut(&h);
	k.port = sv.port;
	pthread_create(&th, NULL, connect_thread, &k);
	rc = hp_serve(&sv.lk, &sv.hc, sv.lfd, false);
	t0 = mono_s();
	CHECK(!rc, "hostile server: no CONFIRM from the kernel client: %d", rc);
	t = time_decline(sv.hc.fd, t0, &diag);
	pthread_join(th, NULL);
	printf("  the kernel client declined (%#x) %.2f s after its CONFIRM came; our server "
	       "declines at the latest %.2f s after it and takes a crossing DECLINE until "
	       "%.2f s\n",
	       diag, t, ours, cross);
	CHECK(t > 0, "no DECLINE from the kernel client within 15 s");
	CHECK(t > ours + ORDER_MARGIN_MS / 1e3,
	      "the kernel client gives up %.2f s after its CONFIRM: before our server declines "
	      "(%.2f s)",
	      t, ours);
	CHECK(t < cross - ORDER_MARGIN_MS / 1e3,
	      "the kernel client declines %.2f s after its CONFIRM: too close to the end of our "
	      "server's crossing window (%.2f s)",
	      t, cross);
	if (k.fd >= 0)
		close(k.fd);
	hp_conn_drop(&sv.hc);
	server_close(&r, &sv);
}

static void ktime_client(void)
{
	ktime_client_on(false);
}

static void ktime_client_lost(void)
{
	ktime_client_on(true);
}

#define ROW(fn, ...)                                \
	static void fn(void)                        \
	{                                           \
		const struct row r = {__VA_ARGS__}; \
		double cs, ss;                      \
                                                    \
		run_row(&r, &cs, &ss);              \
	}

ROW(u2k_early, .cli = USMC, .srv = KERNEL)
ROW(u2k_late, .cli = USMC, .srv = KERNEL, .hold_host = 1, .hold_ms = HOLD_MS)
ROW(u2k_absent, .cli = USMC, .srv = HOSTILE)
ROW(k2u_early, .cli = KERNEL, .srv = USMC)
ROW(k2u_late, .cli = KERNEL, .srv = USMC, .hold_host = 0, .hold_ms = HOLD_MS)
ROW(k2u_crossed, .cli = KERNEL, .srv = USMC, .hold_host = 1, .hold_ms = KCLIENT_HOLD_MS,
    .report_kernel = true)
ROW(k2u_absent, .cli = HOSTILE, .srv = USMC)
ROW(u2u_early, .cli = USMC, .srv = USMC)
ROW(u2u_late, .cli = USMC, .srv = USMC, .hold_host = 1, .hold_ms = USMC_HOLD_MS)
ROW(k2k_early, .cli = KERNEL, .srv = KERNEL, .report_kernel = true)
ROW(u2k_lost, .cli = USMC, .srv = KERNEL, .lost = true)
ROW(k2u_lost, .cli = KERNEL, .srv = USMC, .lost = true)
ROW(u2u_lost, .cli = USMC, .srv = USMC, .lost = true)
ROW(k2k_lost, .cli = KERNEL, .srv = KERNEL, .lost = true, .report_kernel = true)
ROW(k2k_crossed, .cli = KERNEL, .srv = KERNEL, .hold_host = 1, .hold_ms = CROSS_HOLD_MS,
    .report_kernel = true)

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*run)(void);
	} scen[] = {
		{"ktime_server", ktime_server},
		{"ktime_client", ktime_client},
		{"ktime_server_lost", ktime_server_lost},
		{"ktime_client_lost", ktime_client_lost},
		{"u2k_lost", u2k_lost},
		{"k2u_lost", k2u_lost},
		{"u2u_lost", u2u_lost},
		{"k2k_lost", k2k_lost},
		{"u2k_early", u2k_early},
		{"u2k_late", u2k_late},
		{"u2k_absent", u2k_absent},
		{"k2u_early", k2u_early},
		{"k2u_late", k2u_late},
		{"k2u_crossed", k2u_crossed},
		{"k2u_absent", k2u_absent},
		{"u2u_early", u2u_early},
		{"u2u_late", u2u_late},
		{"k2k_early", k2k_early},
		{"k2k_crossed", k2k_crossed},
	};
	const char *sc = argc > 2 ? argv[2] : "";
	char cmd[512];

	kctl = argc > 1 ? argv[1] : NULL;
	host_a = getenv("USMC_TEST_HOST_A");
	host_b = getenv("USMC_TEST_HOST_B");
	if (!kctl || !host_a || !host_b || !strcmp(host_a, host_b))
		die("usage: test_fc_decline <smc_kctl> <scenario>, in the guest:\n"
		    "  tests/rxe/vm-run.sh --smc --setup two -- <this> <smc_kctl> <scenario>");
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(cmd, sizeof(cmd), "'%s' ueid flush && '%s' ueid add %s", kctl, kctl, UEID);
	CHECK(!system(cmd), "the kernel's UEID");
	for (size_t i = 0; i < sizeof(scen) / sizeof(scen[0]); i++)
		if (!strcmp(sc, scen[i].name)) {
			printf("scenario %s\n", sc);
			scen[i].run();
			net_restore();
			printf("PASS %s\n", sc);
			return 0;
		}
	die("unknown scenario '%s'", sc);
}
