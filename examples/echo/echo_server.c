// SPDX-License-Identifier: MIT
/*
 * echo_server - echoes every connection back, one thread per connection,
 * and says how each connection runs (SMC-R or TCP, and why).
 *
 * usage: echo_server [-a ADDR] [-p PORT] [-n CONNS] [-t]
 *   -n CONNS  exit after serving CONNS connections (default: forever)
 *   -t        TCP only (no SMC-R)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <usmc/usmc.h>

#define BUF_SIZE (256 * 1024)

static void print_conn(const char *who, struct usmc_conn *c)
{
	struct usmc_conn_info info;
	char peer[INET6_ADDRSTRLEN] = "?";

	if (usmc_conn_info(c, &info))
		return;
	if (info.peer.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&info.peer)->sin_addr, peer,
			  sizeof(peer));
	printf("%s %s: mode %s", who, peer, usmc_mode_name(info.mode));
	if (info.mode == USMC_MODE_SMCR)
		printf(" lgr %08x v%u", info.lgr_id, info.smc_version);
	else
		printf(" reason %s (%s)%s", usmc_reason_name(info.reason),
		       usmc_reason_text(info.reason), info.peer_declined ? " [peer]" : "");
	printf(" sent %llu received %llu\n", (unsigned long long)info.bytes_sent,
	       (unsigned long long)info.bytes_received);
	fflush(stdout);
}

static void *serve(void *arg)
{
	struct usmc_conn *c = arg;
	char *b = malloc(BUF_SIZE);
	ssize_t n;

	print_conn("accepted", c);
	while ((n = usmc_recv(c, b, BUF_SIZE, 0)) > 0) {
		for (ssize_t off = 0; off < n;) {
			ssize_t w = usmc_send(c, b + off, (size_t)(n - off), 0);

			if (w < 0) {
				fprintf(stderr, "send: %s\n", usmc_strerror((int)w));
				goto out;
			}
			off += w;
		}
	}
	if (n < 0)
		fprintf(stderr, "recv: %s\n", usmc_strerror((int)n));
out:
	print_conn("closed", c);
	usmc_close(c);
	free(b);
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(7777)};
	struct usmc_listener *l;
	struct usmc_ctx *ctx;
	char msg[160];
	unsigned int flags = 0;
	long limit = -1;
	int opt, rc;

	a.sin_addr.s_addr = htonl(INADDR_ANY);
	while ((opt = getopt(argc, argv, "a:p:n:t")) != -1) {
		switch (opt) {
		case 'a':
			if (inet_pton(AF_INET, optarg, &a.sin_addr) != 1) {
				fprintf(stderr, "bad address %s\n", optarg);
				return 2;
			}
			break;
		case 'p':
			a.sin_port = htons((uint16_t)atoi(optarg));
			break;
		case 'n':
			limit = atol(optarg);
			break;
		case 't':
			flags |= USMC_LISTEN_TCP_ONLY;
			break;
		default:
			fprintf(stderr, "usage: %s [-a ADDR] [-p PORT] [-n CONNS] [-t]\n", argv[0]);
			return 2;
		}
	}
	rc = usmc_ctx_create(&ctx);
	if (rc == -EINVAL && usmc_env_check(msg, sizeof(msg))) {
		fprintf(stderr, "usmc_ctx_create: %s\n", msg);
		return 1;
	}
	if (!rc)
		rc = usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 128, flags, &l);
	if (rc) {
		fprintf(stderr, "listen: %s\n", usmc_strerror(rc));
		return 1;
	}
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	usmc_listener_addr(l, &ss, &len);
	printf("listening on port %u\n", ntohs(((struct sockaddr_in *)&ss)->sin_port));
	fflush(stdout);
	pthread_t *threads = calloc(limit > 0 ? (size_t)limit : 1, sizeof(*threads));

	for (long served = 0; limit < 0 || served < limit; served++) {
		struct usmc_conn *c;
		pthread_t t;

		rc = usmc_accept(l, 0, &c);
		if (rc) {
			fprintf(stderr, "accept: %s\n", usmc_strerror(rc));
			return 1;
		}
		pthread_create(&t, NULL, serve, c);
		if (limit > 0)
			threads[served] = t;
		else
			pthread_detach(t);
	}
	for (long i = 0; i < limit; i++)
		pthread_join(threads[i], NULL);
	free(threads);
	usmc_listener_close(l);
	return usmc_ctx_destroy(ctx) ? 1 : 0;
}
