// SPDX-License-Identifier: MIT
/*
 * Asynchronous client handshakes (USMC_CONNECT_ASYNC) in the
 * soft-RoCE guest, one ctest per scenario:
 *
 *   many     USMC_TEST_ASYNC_N (64) connects opened at once from ONE
 *            thread, driven by poll() as usmc_connect_events() says, to a
 *            usmc listener on host B: each runs SMC-R and echoes its own
 *            16 KiB stream, checked end to end.
 *   threads  2 threads, each opening 32 asynchronous connects at once to a
 *            fresh listener (no link group yet): one first contact, the
 *            other thread's reuse ACCEPTs may name its link group while it
 *            is still being set up (retried, never waited for): every
 *            connect ends SMC-R on one link group, streams checked.
 *   silent   a plain TCP server that accepts and never answers the
 *            PROPOSAL: at the deadline (USMC_OPT_CLC_TIMEOUT_MS 300) the
 *            connect fails with -ETIMEDOUT, not before; a second finish
 *            returns the same error and nothing more is sent.
 *   decline  a plain TCP server that reads the PROPOSAL and answers a
 *            DECLINE (NOUEID) with its own data right behind it, in one
 *            segment, then (second connection) in two pieces: TCP with
 *            that reason, declined by the peer, the data intact (not a
 *            byte of it taken by the handshake).
 *   nosmc    a plain TCP server (no SMC): TCP PEERNOSMC, no CLC byte sent
 *            (kernel-compat mode, on in the guest, sees no SMC option on
 *            the SYN-ACK).
 *   kernel   (argument: smc_kctl) 32 connects from one thread to the Linux
 *            kernel's AF_SMC server (--smc): each SMC-R, stream checked.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/connect_async.h"
#include "clc.h"
#include "kernel_peer.h"
#include "smcr_common.h"

#define STREAM	   16384
#define SILENT_MS  300
#define TRAILER	   "server data after the DECLINE"
#define CLIENT_MSG "client data"

/* ---- many ------------------------------------------------------------ */

static void scenario_many(void)
{
	int n = (int)env_long("USMC_TEST_ASYNC_N", 64);
	struct usmc_ctx *cs, *cc;
	struct usmc_listener *l;
	struct sockaddr_in sa;
	struct echo_server srv;
	struct usmc_conn **c = calloc((size_t)n, sizeof(*c));
	int *rc = calloc((size_t)n, sizeof(int));
	long *at = calloc((size_t)n, sizeof(long)), t0;
	struct drive_stats st;

	CHECK(c && rc && at, "calloc");
	CHECK(!usmc_ctx_create(&cs) && !usmc_ctx_create(&cc), "ctx");
	l = listen_b(cs, 2 * n, &sa);
	echo_server_start(&srv, l, n, USMC_MODE_SMCR);
	t0 = mono_ms();
	for (int i = 0; i < n; i++)
		c[i] = async_connect(cc, (struct sockaddr *)&sa, sizeof(sa), 30000);
	drive_connects(c, n, rc, at, 120000, &st);
	printf("many: %d async connects from one thread in %ld ms (%ld polls, %ld finishes, "
	       "%d waited for POLLIN)\n",
	       n, mono_ms() - t0, st.polls, st.finishes, st.pollin);
	for (int i = 0; i < n; i++) {
		char who[32];

		CHECK(!rc[i], "connect %d: %s", i, usmc_strerror(rc[i]));
		CHECK(usmc_connect_finish(c[i]) == 0, "connect %d: a second finish", i);
		snprintf(who, sizeof(who), "client %d", i);
		expect_smcr(c[i], who);
	}
	/* all of them answered asynchronously: none was finished by blocking */
	CHECK(st.pollin == n, "only %d of %d connects waited for the answer with POLLIN", st.pollin,
	      n);
	for (int i = 0; i < n; i++)
		exchange_checked(c[i], 0xa5c0000 + (uint64_t)i, STREAM);
	for (int i = 0; i < n; i++)
		CHECK(!usmc_close(c[i]), "close");
	echo_server_join(&srv);
	usmc_listener_close(l);
	CHECK(!usmc_ctx_destroy(cc) && !usmc_ctx_destroy(cs), "ctx destroy");
	free(c);
	free(rc);
	free(at);
}

/* ---- threads ---------------------------------------------------------- */

struct driver {
	pthread_t t;
	struct usmc_ctx *ctx;
	struct sockaddr_in sa;
	int n, base;
	struct usmc_conn **c;
	pthread_barrier_t *go;
};

static void *driver_main(void *arg)
{
	struct driver *d = arg;
	int *rc = calloc((size_t)d->n, sizeof(int));
	struct drive_stats st;

	CHECK(rc, "calloc");
	pthread_barrier_wait(d->go);
	for (int i = 0; i < d->n; i++)
		d->c[i] = async_connect(d->ctx, (struct sockaddr *)&d->sa, sizeof(d->sa), 30000);
	drive_connects(d->c, d->n, rc, NULL, 120000, &st);
	for (int i = 0; i < d->n; i++) {
		char who[32];

		CHECK(!rc[i], "thread %d connect %d: %s", d->base, i, usmc_strerror(rc[i]));
		snprintf(who, sizeof(who), "client %d", d->base + i);
		expect_smcr(d->c[i], who);
	}
	for (int i = 0; i < d->n; i++)
		exchange_checked(d->c[i], 0x7e40000 + (uint64_t)(d->base + i), STREAM);
	free(rc);
	return NULL;
}

static void scenario_threads(void)
{
	enum { T = 2, PER = 32 };
	struct usmc_conn *c[T * PER];
	struct driver d[T];
	pthread_barrier_t go;
	struct usmc_ctx *cs, *cc;
	struct usmc_listener *l;
	struct echo_server srv;
	struct sockaddr_in sa;
	struct usmc_conn_info info;
	uint32_t lgr = 0;

	CHECK(!usmc_ctx_create(&cs) && !usmc_ctx_create(&cc), "ctx");
	l = listen_b(cs, 2 * T * PER, &sa);
	echo_server_start(&srv, l, T * PER, USMC_MODE_SMCR);
	pthread_barrier_init(&go, NULL, T);
	for (int t = 0; t < T; t++) {
		d[t] = (struct driver){.ctx = cc,
				       .sa = sa,
				       .n = PER,
				       .base = t * PER,
				       .c = c + t * PER,
				       .go = &go};
		CHECK(!pthread_create(&d[t].t, NULL, driver_main, &d[t]), "pthread_create");
	}
	for (int t = 0; t < T; t++)
		pthread_join(d[t].t, NULL);
	for (int i = 0; i < T * PER; i++) {
		CHECK(!usmc_conn_info(c[i], &info), "info");
		CHECK(!lgr || info.lgr_id == lgr, "connect %d on link group %x, others on %x", i,
		      info.lgr_id, lgr);
		lgr = info.lgr_id;
	}
	for (int i = 0; i < T * PER; i++)
		CHECK(!usmc_close(c[i]), "close");
	echo_server_join(&srv);
	usmc_listener_close(l);
	pthread_barrier_destroy(&go);
	CHECK(usmc_ctx_fallback_count(cc, USMC_REASON_SYNCERR) == 0, "SYNCERR fallbacks");
	CHECK(!usmc_ctx_destroy(cc) && !usmc_ctx_destroy(cs), "ctx destroy");
}

/* ---- plain TCP servers ------------------------------------------------ */

enum plain_kind { PLAIN_SILENT, PLAIN_DECLINE, PLAIN_NOSMC };

struct plain_server {
	int lfd;
	enum plain_kind kind;
	bool pieces; /* DECLINE: in two pieces, else with the data in one send() */
	pthread_t thread;
	size_t clc_bytes; /* CLC bytes read (PROPOSAL) */
	size_t after;	  /* bytes that came after them, until EOF */
	char first[64];	  /* the first bytes after the CLC (NOSMC, DECLINE) */
};

static int plain_listen(struct sockaddr_in *bound)
{
	struct sockaddr_in sa = host_addr("USMC_TEST_HOST_B", 0);
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	CHECK(fd >= 0, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(!bind(fd, (struct sockaddr *)&sa, sizeof(sa)) && !listen(fd, 8), "bind/listen");
	CHECK(!getsockname(fd, (struct sockaddr *)&sa, &len), "getsockname");
	*bound = sa;
	return fd;
}

static void read_exact(int fd, void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = recv(fd, (uint8_t *)buf + off, len - off, 0);

		CHECK(n > 0, "server read: %s", n ? strerror(errno) : "EOF");
		off += (size_t)n;
	}
}

/* The PROPOSAL, read by its length. */
static size_t read_proposal(int fd)
{
	uint8_t buf[CLC_MAX_LEN];
	struct clc_hdr hdr;

	read_exact(fd, buf, CLC_HDR_LEN);
	CHECK(!clc_hdr_decode(buf, CLC_HDR_LEN, &hdr) && hdr.type == CLC_PROPOSAL,
	      "the client's first bytes are no PROPOSAL");
	read_exact(fd, buf + CLC_HDR_LEN, hdr.length - CLC_HDR_LEN);
	return hdr.length;
}

static void *plain_main(void *arg)
{
	struct plain_server *s = arg;
	int fd = accept(s->lfd, NULL, NULL);
	char buf[4096];
	ssize_t n;

	CHECK(fd >= 0, "accept");
	if (s->kind == PLAIN_SILENT) {
		s->clc_bytes = read_proposal(fd); /* and never a word back */
	} else if (s->kind == PLAIN_DECLINE) {
		uint8_t d[CLC_DECLINE_V2_LEN + sizeof(TRAILER)];
		int len = clc_decline_build(d, sizeof(d), CLC_V2, NULL, USMC_REASON_NOUEID, false);

		CHECK(len == CLC_DECLINE_V2_LEN, "clc_decline_build");
		s->clc_bytes = read_proposal(fd);
		memcpy(d + len, TRAILER, sizeof(TRAILER) - 1);
		if (s->pieces) {
			/* the client keeps the first piece between its reads */
			CHECK(send(fd, d, 20, 0) == 20, "send");
			usleep(100000);
			CHECK(send(fd, d + 20, (size_t)len - 20 + sizeof(TRAILER) - 1, 0) > 0,
			      "send");
		} else {
			CHECK(send(fd, d, (size_t)len + sizeof(TRAILER) - 1, 0) > 0, "send");
		}
	}
	/* whatever comes next, until the client's EOF (echoed for NOSMC and
	 * DECLINE: the client checks it) */
	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
		if (!s->after)
			memcpy(s->first, buf,
			       (size_t)n < sizeof(s->first) ? (size_t)n : sizeof(s->first));
		s->after += (size_t)n;
		if (s->kind != PLAIN_SILENT)
			CHECK(send(fd, buf, (size_t)n, MSG_NOSIGNAL) == n, "echo");
	}
	close(fd);
	return NULL;
}

static void plain_start(struct plain_server *s, enum plain_kind kind, bool pieces,
			struct sockaddr_in *sa)
{
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->pieces = pieces;
	s->lfd = plain_listen(sa);
	CHECK(!pthread_create(&s->thread, NULL, plain_main, s), "pthread_create");
}

static void plain_join(struct plain_server *s)
{
	pthread_join(s->thread, NULL);
	close(s->lfd);
}

static void expect_tcp(struct usmc_conn *c, uint32_t reason, bool declined)
{
	struct usmc_conn_info info;

	CHECK(!usmc_conn_info(c, &info), "usmc_conn_info");
	CHECK(info.mode == USMC_MODE_TCP && info.reason == reason && info.peer_declined == declined,
	      "runs %s %s%s, expected TCP %s%s", usmc_mode_name(info.mode),
	      usmc_reason_name(info.reason), info.peer_declined ? " (declined by the peer)" : "",
	      usmc_reason_name(reason), declined ? " (declined by the peer)" : "");
}

/* Send @msg and read it back (the plain server echoes). */
static void echo_plain(struct usmc_conn *c, const char *msg)
{
	char back[64] = "";
	size_t len = strlen(msg), got = 0;

	CHECK(usmc_send(c, msg, len, 0) == (ssize_t)len, "send");
	while (got < len) {
		ssize_t n = usmc_recv(c, back + got, len - got, 0);

		if (n == -EAGAIN) {
			await_fd(c, POLLIN, 5000, "echo");
			continue;
		}
		CHECK(n > 0, "recv: %s", n ? usmc_strerror((int)n) : "EOF");
		got += (size_t)n;
	}
	CHECK(!memcmp(back, msg, len), "echo differs");
}

static void scenario_silent(void)
{
	struct plain_server s;
	struct sockaddr_in sa;
	struct usmc_ctx *cc;
	struct usmc_conn *c;
	struct drive_stats st;
	long at;
	int rc, ms = -2, ev;

	/* the userspace-only rule: kernel-compat mode would see no SMC option
	 * on the plain server's SYN-ACK and send no PROPOSAL at all */
	setenv("USMC_KERNEL_COMPAT", "0", 1);
	plain_start(&s, PLAIN_SILENT, false, &sa);
	CHECK(!usmc_ctx_create(&cc), "ctx");
	c = async_connect(cc, (struct sockaddr *)&sa, sizeof(sa), SILENT_MS);
	drive_connects(&c, 1, &rc, &at, 10000, &st);
	printf("silent: %s after %ld ms (%ld polls, %ld finishes)\n", usmc_strerror(rc), at,
	       st.polls, st.finishes);
	CHECK(rc == -ETIMEDOUT, "silent server: %s, expected -ETIMEDOUT", usmc_strerror(rc));
	CHECK(at >= SILENT_MS - 5 && at < SILENT_MS + 1500,
	      "the deadline fired after %ld ms, expected %d", at, SILENT_MS);
	CHECK(st.pollin == 1, "it did not wait for the answer with POLLIN");
	/* a few polls, not a busy loop: the deadline is the poll's timeout */
	CHECK(st.finishes < 20, "%ld finishes for one silent server", st.finishes);
	/* the stored error, and nothing more on the wire */
	CHECK(usmc_connect_finish(c) == -ETIMEDOUT, "a second finish: not the same error");
	CHECK(usmc_connect_finish(c) == -ETIMEDOUT, "a third finish: not the same error");
	ev = usmc_connect_events(c, &ms);
	CHECK(ev == 0 && ms == 0, "events after the failure: %d, %d ms", ev, ms);
	CHECK(usmc_send(c, "x", 1, 0) == -ETIMEDOUT, "send after the failure");
	usmc_close(c);
	plain_join(&s);
	CHECK(s.clc_bytes > 0 && s.after == 0,
	      "the server got %zu bytes after the PROPOSAL (a second PROPOSAL?)", s.after);
	CHECK(!usmc_ctx_destroy(cc), "ctx destroy");
}

static void decline_one(bool pieces)
{
	char trailer[sizeof(TRAILER)] = "";
	struct plain_server s;
	struct sockaddr_in sa;
	struct usmc_ctx *cc;
	struct usmc_conn *c;
	struct drive_stats st;
	size_t got = 0;
	int rc;

	setenv("USMC_KERNEL_COMPAT", "0", 1); /* as silent */
	plain_start(&s, PLAIN_DECLINE, pieces, &sa);
	CHECK(!usmc_ctx_create(&cc), "ctx");
	c = async_connect(cc, (struct sockaddr *)&sa, sizeof(sa), 5000);
	drive_connects(&c, 1, &rc, NULL, 10000, &st);
	CHECK(!rc, "declined connect: %s", usmc_strerror(rc));
	printf("decline%s: %ld polls, %ld finishes\n", pieces ? " in pieces" : "", st.polls,
	       st.finishes);
	CHECK(!pieces || st.finishes >= 3, "the DECLINE in two pieces took only %ld finishes",
	      st.finishes);
	expect_tcp(c, USMC_REASON_NOUEID, true);
	/* the server's data right behind its DECLINE: all of it, in order */
	while (got < sizeof(TRAILER) - 1) {
		ssize_t n = usmc_recv(c, trailer + got, sizeof(TRAILER) - 1 - got, 0);

		if (n == -EAGAIN) {
			await_fd(c, POLLIN, 5000, "trailer");
			continue;
		}
		CHECK(n > 0, "recv: %s", n ? usmc_strerror((int)n) : "EOF");
		got += (size_t)n;
	}
	CHECK(!strcmp(trailer, TRAILER), "the data after the DECLINE reads \"%s\"", trailer);
	echo_plain(c, CLIENT_MSG);
	usmc_close(c);
	plain_join(&s);
	CHECK(!memcmp(s.first, CLIENT_MSG, strlen(CLIENT_MSG)),
	      "the server's first bytes after the PROPOSAL are not the client's data");
	CHECK(usmc_ctx_fallback_count(cc, USMC_REASON_NOUEID) == 1, "fallback counter");
	CHECK(!usmc_ctx_destroy(cc), "ctx destroy");
}

static void scenario_decline(void)
{
	decline_one(false);
	decline_one(true);
}

static void scenario_nosmc(void)
{
	struct plain_server s;
	struct sockaddr_in sa;
	struct usmc_ctx *cc;
	struct usmc_conn *c;
	struct drive_stats st;
	int rc;

	plain_start(&s, PLAIN_NOSMC, false, &sa);
	CHECK(!usmc_ctx_create(&cc), "ctx");
	CHECK(usmc_ctx_kernel_compat(cc) > 0,
	      "kernel-compat mode is off: a plain server cannot say it has no SMC");
	c = async_connect(cc, (struct sockaddr *)&sa, sizeof(sa), 5000);
	drive_connects(&c, 1, &rc, NULL, 10000, &st);
	CHECK(!rc, "connect: %s", usmc_strerror(rc));
	expect_tcp(c, USMC_REASON_PEERNOSMC, false);
	CHECK(st.pollin == 0, "it waited for a CLC answer from a server without SMC");
	echo_plain(c, CLIENT_MSG);
	usmc_close(c);
	plain_join(&s);
	CHECK(!memcmp(s.first, CLIENT_MSG, strlen(CLIENT_MSG)),
	      "the server's first bytes are not the client's data (a CLC byte was sent)");
	CHECK(!usmc_ctx_destroy(cc), "ctx destroy");
}

/* ---- kernel: the Linux kernel's AF_SMC server ------------------------ */

#define KERNEL_UEID "USMC-ASYNC-TEST"

struct kserver {
	int lfd, n;
	pthread_t thread, *echo;
};

static void *kecho_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[16384];
	ssize_t n;

	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
		for (ssize_t off = 0; off < n;) {
			ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);

			CHECK(w > 0, "kernel echo send: %s", strerror(errno));
			off += w;
		}
	CHECK(n == 0, "kernel echo recv: %s", strerror(errno));
	close(fd);
	return NULL;
}

static void *kserver_main(void *arg)
{
	struct kserver *k = arg;

	for (int i = 0; i < k->n; i++) {
		int fd = accept(k->lfd, NULL, NULL);

		CHECK(fd >= 0, "AF_SMC accept: %s", strerror(errno));
		CHECK(!pthread_create(&k->echo[i], NULL, kecho_main, (void *)(intptr_t)fd),
		      "pthread_create");
	}
	return NULL;
}

static void scenario_kernel(const char *kctl)
{
	int n = (int)env_long("USMC_TEST_ASYNC_KN", 32);
	const char *b = getenv("USMC_TEST_HOST_B");
	struct usmc_conn **c = calloc((size_t)n, sizeof(*c));
	int *rc = calloc((size_t)n, sizeof(int));
	struct kserver k = {.n = n};
	struct drive_stats st;
	struct sockaddr_in sa;
	struct usmc_ctx *cc;
	char cmd[512];

	CHECK(kctl && b && c && rc, "usage: test_connect_async kernel <smc_kctl>, in the guest");
	snprintf(cmd, sizeof(cmd), "'%s' ueid flush && '%s' ueid add %s", kctl, kctl, KERNEL_UEID);
	CHECK(system(cmd) == 0, "%s", cmd);
	k.lfd = kpeer_listen(b, 0, 128);
	CHECK(k.lfd >= 0, "AF_SMC listen: %s (vm-run.sh --smc?)", strerror(-k.lfd));
	sa = kpeer_addr(b, kpeer_local_port(k.lfd));
	k.echo = calloc((size_t)n, sizeof(*k.echo));
	CHECK(k.echo && !pthread_create(&k.thread, NULL, kserver_main, &k), "kernel server");
	setenv("USMC_KERNEL_COMPAT", "1", 1);
	CHECK(!usmc_ctx_create(&cc), "ctx");
	CHECK(usmc_ctx_kernel_compat(cc) == 1, "kernel-compat mode did not load");
	CHECK(!usmc_ctx_set_ueid(cc, KERNEL_UEID), "ueid");
	for (int i = 0; i < n; i++)
		c[i] = async_connect(cc, (struct sockaddr *)&sa, sizeof(sa), 30000);
	drive_connects(c, n, rc, NULL, 120000, &st);
	printf("kernel: %d async connects, %ld polls, %ld finishes\n", n, st.polls, st.finishes);
	for (int i = 0; i < n; i++) {
		char who[32];

		CHECK(!rc[i], "connect %d: %s", i, usmc_strerror(rc[i]));
		snprintf(who, sizeof(who), "client %d", i);
		expect_smcr(c[i], who);
	}
	CHECK(st.pollin == n, "only %d of %d waited for the answer", st.pollin, n);
	for (int i = 0; i < n; i++)
		exchange_checked(c[i], 0xc0e0000 + (uint64_t)i, STREAM);
	for (int i = 0; i < n; i++)
		CHECK(!usmc_close(c[i]), "close");
	pthread_join(k.thread, NULL);
	for (int i = 0; i < n; i++)
		pthread_join(k.echo[i], NULL);
	close(k.lfd);
	CHECK(!usmc_ctx_destroy(cc), "ctx destroy");
	free(k.echo);
	free(c);
	free(rc);
}

int main(int argc, char **argv)
{
	const char *s = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(s, "many"))
		scenario_many();
	else if (!strcmp(s, "threads"))
		scenario_threads();
	else if (!strcmp(s, "silent"))
		scenario_silent();
	else if (!strcmp(s, "decline"))
		scenario_decline();
	else if (!strcmp(s, "nosmc"))
		scenario_nosmc();
	else if (!strcmp(s, "kernel"))
		scenario_kernel(argc > 2 ? argv[2] : NULL);
	else
		die("usage: %s many|threads|silent|decline|nosmc|kernel [smc_kctl]", argv[0]);
	printf("%s: ok\n", s);
	return 0;
}
