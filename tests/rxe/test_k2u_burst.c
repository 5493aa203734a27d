// SPDX-License-Identifier: MIT
/*
 * A storm's start from the kernel's SMC-R to a usmc server (in the rxe
 * guest, --smc --setup two, as root): BURST AF_SMC clients connect at once
 * to a fresh usmc listener and, each time their connection echoed its 8
 * bytes, close it and connect again, for STORM_S. Their first connections
 * each need a new RMB, and the server a CONFIRM_RKEY flow for it on the
 * one link group, one flow at a time (docs/smcr.md "LLC flows of
 * handshakes"), while the others' next connections keep the server busy.
 * A kernel client waits for our ACCEPT until the flows before its own are
 * answered: when each flow held the link group until its handshake was
 * back on a worker, the last ones waited seconds (a storm's connect p99
 * 2-5 s; the kernel's CLC_WAIT_TIME, 6 s, fails them). Passes when every
 * connection runs SMC-R and echoes its bytes, and the slowest first
 * connect() took less than BURST_MAX_S.
 *
 *   usage: test_k2u_burst <smc_kctl>
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <usmc/usmc.h>

#include "kernel_peer.h"

#define BURST	    64
#define STORM_S	    4.0
#define BURST_MAX_S 1.5 /* the slowest first connect() */
#define UEID	    "USMC-BURST-TEST"

static const char *host_a, *host_b;
static int port;

struct client {
	pthread_t th;
	double first_s; /* its first connect() */
	double slowest_s;
	unsigned int conns;
	int err;
};

static atomic_int clients_left = BURST;

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fail(const char *what)
{
	fprintf(stderr, "FAIL: %s\n", what);
	exit(1);
}

/* One connection: connect, send 8 bytes, read them back, close. */
static int one_connection(struct client *cl, double *connect_s)
{
	uint64_t me = (uint64_t)(uintptr_t)cl ^ cl->conns, back = 0;
	double t0 = mono_s();
	int fd = kpeer_connect(host_a, host_b, port), err = 0;

	*connect_s = mono_s() - t0;
	if (fd < 0)
		return -fd;
	if (write(fd, &me, sizeof(me)) != (ssize_t)sizeof(me) ||
	    read(fd, &back, sizeof(back)) != (ssize_t)sizeof(back) || back != me)
		err = EIO;
	close(fd);
	return err;
}

static void *client(void *arg)
{
	struct client *cl = arg;
	double end = mono_s() + STORM_S, t;

	do {
		cl->err = one_connection(cl, &t);
		if (!cl->conns++)
			cl->first_s = t;
		cl->slowest_s = t > cl->slowest_s ? t : cl->slowest_s;
	} while (!cl->err && mono_s() < end);
	atomic_fetch_sub(&clients_left, 1);
	return NULL;
}

/* Serve one connection: SMC-R, and its 8 bytes echoed. */
static void serve_one(struct usmc_conn *c)
{
	struct usmc_conn_info ci;
	uint64_t v;

	if (usmc_conn_info(c, &ci) || ci.mode != USMC_MODE_SMCR) {
		fprintf(stderr, "FAIL: a connection runs %s (reason %s), not SMC-R\n",
			usmc_mode_name(ci.mode), usmc_reason_name(ci.reason));
		exit(1);
	}
	if (usmc_recv(c, &v, sizeof(v), MSG_WAITALL) != (ssize_t)sizeof(v) ||
	    usmc_send(c, &v, sizeof(v), 0) != (ssize_t)sizeof(v))
		fail("echo");
	usmc_close(c);
}

/* Serve until every client is done. */
static void serve(struct usmc_listener *l)
{
	struct pollfd p = {.fd = usmc_listener_fd(l), .events = POLLIN};

	while (atomic_load(&clients_left) > 0) {
		struct usmc_conn *c;
		int rc = usmc_accept(l, 0, &c);

		if (rc == -EAGAIN) {
			poll(&p, 1, 100);
			continue;
		}
		if (rc)
			fail("usmc_accept");
		serve_one(c);
	}
}

int main(int argc, char **argv)
{
	static struct client cl[BURST];
	struct sockaddr_in b;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct usmc_listener *l;
	struct usmc_ctx *ctx;
	double first = 0, slowest = 0;
	unsigned int conns = 0;
	char cmd[512];

	host_a = getenv("USMC_TEST_HOST_A");
	host_b = getenv("USMC_TEST_HOST_B");
	if (argc < 2 || !host_a || !host_b || !strcmp(host_a, host_b)) {
		fprintf(stderr, "usage: test_k2u_burst <smc_kctl>, in the guest:\n"
				"  tests/rxe/vm-run.sh --smc --setup two -- <this> <smc_kctl>\n");
		return 1;
	}
	snprintf(cmd, sizeof(cmd), "'%s' ueid flush && '%s' ueid add %s", argv[1], argv[1], UEID);
	if (system(cmd))
		fail("smc_kctl ueid add");
	setenv("USMC_KERNEL_COMPAT", "1", 1);
	if (usmc_ctx_create(&ctx) || usmc_ctx_kernel_compat(ctx) != 1 ||
	    usmc_ctx_set_ueid(ctx, UEID))
		fail("a kernel-compatible context");
	b = kpeer_addr(host_b, 0);
	if (usmc_listen(ctx, (struct sockaddr *)&b, sizeof(b), 4 * BURST, USMC_LISTEN_NONBLOCK,
			&l) ||
	    usmc_listener_addr(l, &ss, &len))
		fail("usmc_listen");
	port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	for (int i = 0; i < BURST; i++)
		if (pthread_create(&cl[i].th, NULL, client, &cl[i]))
			fail("pthread_create");
	serve(l);
	for (int i = 0; i < BURST; i++) {
		pthread_join(cl[i].th, NULL);
		if (cl[i].err) {
			fprintf(stderr, "FAIL: client %d, connection %u: %s\n", i, cl[i].conns,
				strerror(cl[i].err));
			return 1;
		}
		first = cl[i].first_s > first ? cl[i].first_s : first;
		slowest = cl[i].slowest_s > slowest ? cl[i].slowest_s : slowest;
		conns += cl[i].conns;
	}
	printf("%d kernel clients for %.0f s, %u connections: the slowest first connect() "
	       "%.0f ms (at most %.0f), the slowest of all %.0f ms\n",
	       BURST, STORM_S, conns, first * 1e3, BURST_MAX_S * 1e3, slowest * 1e3);
	usmc_listener_close(l);
	usmc_ctx_destroy(ctx);
	if (first >= BURST_MAX_S)
		fail("a first connect() waited too long for our ACCEPT");
	return 0;
}
