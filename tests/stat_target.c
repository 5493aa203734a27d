// SPDX-License-Identifier: MIT
/*
 * stat_target - a process for usmc-stat to look at (tests/test_usmc_stat.sh):
 * one context, a listener on 127.0.0.1, and connections that reached TCP
 * for known reasons:
 *   2 usmc clients        (no RDMA device here: NOSMCRDEV at both ends)
 *   1 usmc client with USMC_OPT_SMC = 0        (DISABLED)
 *   1 plain client that sends a Linux PROPOSAL and reads the DECLINE
 *     (the server declined it: NOSMCRDEV, decided locally)
 * Each connection carries a few bytes each way. With STAT_TARGET_CHURN=1 a
 * thread also opens and closes connections all along (for TSan: the stat
 * thread's snapshot against the registry). Prints "ready PORT" and
 * holds everything until stdin closes, then closes all and destroys the
 * context (its usmc-stat thread too: ASan and valgrind see the teardown).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <usmc/usmc.h>

#include "linux_proposal.h"

#define NCLIENTS 3

static void die(const char *what, int rc)
{
	fprintf(stderr, "stat_target: %s: %s\n", what, usmc_strerror(rc));
	exit(1);
}

static void ping(struct usmc_conn *a, struct usmc_conn *b)
{
	char buf[16];
	ssize_t n;

	if (usmc_send(a, "hello", 5, 0) != 5 || (n = usmc_recv(b, buf, sizeof(buf), 0)) != 5)
		die("ping", -EIO);
}

static struct usmc_ctx *ctx;
static struct usmc_listener *l;
static struct sockaddr_in sa = {.sin_family = AF_INET};
static atomic_bool stop;

/* Connect, accept, exchange, close, until told to stop. */
static void *churn(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		struct usmc_conn *a, *b;

		if (usmc_connect(ctx, (struct sockaddr *)&sa, sizeof(sa), 0, &a))
			die("churn connect", -EIO);
		if (usmc_accept(l, 0, &b))
			die("churn accept", -EIO);
		ping(a, b);
		usmc_close(a);
		usmc_close(b);
	}
	return NULL;
}

int main(void)
{
	struct usmc_conn *cli[NCLIENTS], *srv[NCLIENTS + 1];
	const char *ch = getenv("STAT_TARGET_CHURN");
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint8_t decl[256];
	pthread_t churner;
	char c;
	int rc, raw;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	rc = usmc_ctx_create(&ctx);
	if (rc)
		die("usmc_ctx_create", rc);
	rc = usmc_listen(ctx, (struct sockaddr *)&sa, sizeof(sa), 16, 0, &l);
	if (rc)
		die("usmc_listen", rc);
	usmc_listener_addr(l, &ss, &len);
	sa.sin_port = ((struct sockaddr_in *)&ss)->sin_port;

	for (int i = 0; i < NCLIENTS; i++) {
		rc = usmc_conn_create(ctx, &cli[i]);
		if (!rc && i == NCLIENTS - 1)
			rc = usmc_conn_setopt(cli[i], USMC_OPT_SMC, 0);
		if (!rc)
			rc = usmc_conn_connect(cli[i], (struct sockaddr *)&sa, sizeof(sa), 0);
		if (!rc)
			rc = usmc_accept(l, 0, &srv[i]);
		if (rc)
			die("connect/accept", rc);
		ping(cli[i], srv[i]);
		ping(srv[i], cli[i]);
	}
	/* an SMC client the server declines: a Linux PROPOSAL from a plain socket */
	raw = socket(AF_INET, SOCK_STREAM, 0);
	if (raw < 0 || connect(raw, (struct sockaddr *)&sa, sizeof(sa)) ||
	    write(raw, linux_v2_proposal, sizeof(linux_v2_proposal)) !=
		    (ssize_t)sizeof(linux_v2_proposal) ||
	    read(raw, decl, sizeof(decl)) <= 0)
		die("proposal", -EIO);
	rc = usmc_accept(l, 0, &srv[NCLIENTS]);
	if (rc)
		die("accept declined", rc);
	if (write(raw, "hi", 2) != 2 || usmc_recv(srv[NCLIENTS], decl, 2, MSG_WAITALL) != 2)
		die("declined data", -EIO);

	if (ch && *ch == '1' && pthread_create(&churner, NULL, churn, NULL))
		die("pthread_create", -EAGAIN);
	printf("ready %u\n", ntohs(sa.sin_port));
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	if (ch && *ch == '1') {
		atomic_store(&stop, true);
		pthread_join(churner, NULL);
	}

	for (int i = 0; i < NCLIENTS; i++) {
		usmc_close(cli[i]);
		usmc_close(srv[i]);
	}
	usmc_close(srv[NCLIENTS]);
	close(raw);
	usmc_listener_close(l);
	rc = usmc_ctx_destroy(ctx);
	if (rc)
		die("usmc_ctx_destroy", rc);
	return 0;
}
