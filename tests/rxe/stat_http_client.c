// SPDX-License-Identifier: MIT
/*
 * stat_http_client - N keep-alive HTTP clients over libusmc for
 * test_usmc_stat_rxe.sh: each connects to ADDR:PORT, sends a GET and reads
 * the start of the answer; then all stay open until stdin closes, so that
 * usmc-stat sees them on the server. Prints each connection's mode and
 * "ready".
 *
 * usage: stat_http_client ADDR PORT N
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <usmc/usmc.h>

#define MAXC 64

int main(int argc, char **argv)
{
	static const char req[] = "GET / HTTP/1.1\r\nHost: usmc\r\n\r\n";
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct usmc_conn *c[MAXC];
	struct usmc_ctx *ctx;
	int n, rc;
	char buf[4096];

	if (argc != 4 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1 ||
	    (n = atoi(argv[3])) < 1 || n > MAXC) {
		fprintf(stderr, "usage: %s ADDR PORT N (N <= %d)\n", argv[0], MAXC);
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[2]));
	rc = usmc_ctx_create(&ctx);
	if (rc) {
		fprintf(stderr, "usmc_ctx_create: %s\n", usmc_strerror(rc));
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct usmc_conn_info ci;

		rc = usmc_connect(ctx, (struct sockaddr *)&sa, sizeof(sa), 0, &c[i]);
		if (rc) {
			fprintf(stderr, "usmc_connect: %s\n", usmc_strerror(rc));
			return 1;
		}
		if (usmc_send(c[i], req, strlen(req), 0) != (ssize_t)strlen(req) ||
		    usmc_recv(c[i], buf, sizeof(buf), 0) <= 0) {
			fprintf(stderr, "request %d failed\n", i);
			return 1;
		}
		usmc_conn_info(c[i], &ci);
		printf("conn %d %s %s\n", i, usmc_mode_name(ci.mode), usmc_reason_name(ci.reason));
	}
	printf("ready\n");
	fflush(stdout);
	while (read(0, buf, sizeof(buf)) > 0)
		;
	for (int i = 0; i < n; i++)
		usmc_close(c[i]);
	rc = usmc_ctx_destroy(ctx);
	return rc ? 1 : 0;
}
