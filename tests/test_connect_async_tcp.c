// SPDX-License-Identifier: MIT
/*
 * Asynchronous client connects (USMC_CONNECT_ASYNC) where no RDMA device
 * exists: over loopback, against a usmc listener. What the host can show
 * (the CLC itself runs in the guest: tests/rxe/test_connect_async.c):
 *   many     64 connects opened at once from one thread, driven by poll()
 *            as usmc_connect_events() says; each ends TCP (NOSMCRDEV
 *            without a device) and echoes its own stream, checked.
 *   refused  a refused connect fails once with -ECONNREFUSED and every
 *            later finish says the same (the error is kept).
 *   args     usmc_connect_events() on NULL, a server connection, a
 *            connection that never connected: -EINVAL; a non-blocking
 *            connect without the flag asks for POLLOUT with no timeout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/connect_async.h"

#define N_DEFAULT 64
#define STREAM	  8192

static struct usmc_listener *listen_lo(struct usmc_ctx *ctx, int backlog, struct sockaddr_in *sa)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct usmc_listener *l;
	int rc = usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), backlog, 0, &l);

	CHECK(!rc, "usmc_listen: %s", usmc_strerror(rc));
	CHECK(!usmc_listener_addr(l, &ss, &len), "usmc_listener_addr");
	memcpy(sa, &ss, sizeof(*sa));
	return l;
}

static void scenario_many(int n)
{
	struct usmc_ctx *cs, *cc;
	struct usmc_listener *l;
	struct sockaddr_in sa;
	struct echo_server srv;
	struct usmc_conn **c = calloc((size_t)n, sizeof(*c));
	int *rc = calloc((size_t)n, sizeof(int)), ndev;
	struct drive_stats st;

	CHECK(c && rc, "calloc");
	CHECK(!usmc_ctx_create(&cs) && !usmc_ctx_create(&cc), "ctx");
	ndev = usmc_ctx_devices(cc, NULL, 0);
	l = listen_lo(cs, 2 * n, &sa);
	echo_server_start(&srv, l, n, USMC_MODE_TCP);
	for (int i = 0; i < n; i++)
		c[i] = async_connect(cc, (struct sockaddr *)&sa, sizeof(sa), 0);
	drive_connects(c, n, rc, NULL, 60000, &st);
	printf("many: %d connects, %ld polls, %ld finishes, %d waited for POLLOUT\n", n, st.polls,
	       st.finishes, st.pollout);
	for (int i = 0; i < n; i++) {
		struct usmc_conn_info info;

		CHECK(!rc[i], "connect %d: %s", i, usmc_strerror(rc[i]));
		CHECK(!usmc_conn_info(c[i], &info), "usmc_conn_info");
		CHECK(info.mode == USMC_MODE_TCP, "connect %d runs %s", i,
		      usmc_mode_name(info.mode));
		CHECK(ndev > 0 || info.reason == USMC_REASON_NOSMCRDEV,
		      "connect %d: reason %s without a device", i, usmc_reason_name(info.reason));
		CHECK(usmc_connect_finish(c[i]) == 0, "a second finish");
	}
	for (int i = 0; i < n; i++)
		exchange_checked(c[i], 0x7cb000 + (uint64_t)i, STREAM);
	for (int i = 0; i < n; i++)
		CHECK(!usmc_close(c[i]), "close");
	echo_server_join(&srv);
	usmc_listener_close(l);
	if (!ndev)
		CHECK(usmc_ctx_fallback_count(cc, USMC_REASON_NOSMCRDEV) == (uint64_t)n,
		      "fallback counter");
	CHECK(!usmc_ctx_destroy(cc) && !usmc_ctx_destroy(cs), "ctx destroy");
	free(c);
	free(rc);
}

/* A port nobody listens on: bound, not listening. */
static struct sockaddr_in closed_port(int *keep)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);

	*keep = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(*keep >= 0 && !bind(*keep, (struct sockaddr *)&a, sizeof(a)) &&
		      !getsockname(*keep, (struct sockaddr *)&a, &len),
	      "bind");
	return a;
}

static void scenario_refused(void)
{
	struct usmc_ctx *cc;
	struct usmc_conn *c;
	struct drive_stats st;
	int keep, rc, ms = -2;
	struct sockaddr_in sa = closed_port(&keep);

	CHECK(!usmc_ctx_create(&cc), "ctx");
	c = async_connect(cc, (struct sockaddr *)&sa, sizeof(sa), 0);
	drive_connects(&c, 1, &rc, NULL, 10000, &st);
	CHECK(rc == -ECONNREFUSED, "refused connect: %s", usmc_strerror(rc));
	for (int i = 0; i < 3; i++)
		CHECK(usmc_connect_finish(c) == -ECONNREFUSED, "finish %d: not the same error", i);
	CHECK(usmc_connect_events(c, &ms) == 0 && ms == 0, "events after the failure");
	CHECK(usmc_recv(c, &rc, 1, 0) == -ECONNREFUSED, "recv after the failure");
	usmc_close(c);
	close(keep);
	CHECK(!usmc_ctx_destroy(cc), "ctx destroy");
}

static void scenario_args(void)
{
	struct usmc_ctx *cs, *cc;
	struct usmc_listener *l;
	struct usmc_conn *c, *s;
	struct sockaddr_in sa;
	int ms = -2, rc, ev;

	CHECK(!usmc_ctx_create(&cs) && !usmc_ctx_create(&cc), "ctx");
	CHECK(usmc_connect_events(NULL, &ms) == -EINVAL, "NULL");
	CHECK(!usmc_conn_create(cc, &c), "create");
	CHECK(usmc_connect_events(c, &ms) == -EINVAL, "not connected");
	CHECK(usmc_conn_connect(c, NULL, 0, USMC_CONNECT_ASYNC) == -EINVAL, "no address");
	usmc_close(c);
	l = listen_lo(cs, 4, &sa);
	/* without the flag: the TCP connect, no timeout of its own */
	rc = usmc_connect(cc, (struct sockaddr *)&sa, sizeof(sa), USMC_NONBLOCK, &c);
	CHECK(!rc, "connect: %s", usmc_strerror(rc));
	ev = usmc_connect_events(c, &ms);
	CHECK((ev == POLLOUT && ms == -1) || (ev == 0 && ms == 0), "events %d, %d ms", ev, ms);
	while ((rc = usmc_connect_finish(c)) == -EINPROGRESS)
		await_fd(c, POLLOUT, 5000, "connect");
	CHECK(!rc, "finish: %s", usmc_strerror(rc));
	CHECK(usmc_connect_events(c, &ms) == 0 && ms == 0, "events once connected");
	CHECK(usmc_connect_events(c, NULL) == 0, "NULL timeout");
	CHECK(!usmc_accept(l, 0, &s), "accept");
	CHECK(usmc_connect_events(s, &ms) == -EINVAL, "a server connection");
	/* the flag without USMC_NONBLOCK: a blocking connect, as without it */
	usmc_close(c);
	rc = usmc_connect(cc, (struct sockaddr *)&sa, sizeof(sa), USMC_CONNECT_ASYNC, &c);
	CHECK(!rc, "blocking connect with the flag: %s", usmc_strerror(rc));
	CHECK(usmc_connect_finish(c) == 0, "finish after a blocking connect");
	usmc_close(c);
	usmc_close(s);
	CHECK(!usmc_accept(l, 0, &s), "accept");
	usmc_close(s);
	usmc_listener_close(l);
	CHECK(!usmc_ctx_destroy(cc) && !usmc_ctx_destroy(cs), "ctx destroy");
}

int main(int argc, char **argv)
{
	const char *s = argc > 1 ? argv[1] : "all";
	bool all = !strcmp(s, "all");

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (all || !strcmp(s, "args"))
		scenario_args();
	if (all || !strcmp(s, "refused"))
		scenario_refused();
	if (all || !strcmp(s, "many"))
		scenario_many(argc > 2 ? atoi(argv[2]) : N_DEFAULT);
	printf("%s: ok\n", s);
	return 0;
}
