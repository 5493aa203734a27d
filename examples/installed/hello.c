// SPDX-License-Identifier: MIT
/*
 * hello - the smallest libusmc program, built against an installed libusmc:
 * listens on 127.0.0.1 (port 0), connects to itself, sends "hello" and
 * prints what arrived and how the connection runs ("TCP NOSMCRDEV" on a
 * machine without an RDMA device, "SMC-R NONE" with one).
 *
 *   cc hello.c $(pkg-config --cflags --libs usmc)     or CMakeLists.txt here
 */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <usmc/usmc.h>

static void check(int rc, const char *what)
{
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", what, usmc_strerror(rc));
		exit(1);
	}
}

int main(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage bound;
	socklen_t len = sizeof(bound);
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	struct usmc_conn *client, *server;
	struct usmc_conn_info info;
	char buf[16] = "";

	check(usmc_ctx_create(&ctx), "usmc_ctx_create");
	check(usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 16, 0, &l), "usmc_listen");
	check(usmc_listener_addr(l, &bound, &len), "usmc_listener_addr");
	check(usmc_connect(ctx, (struct sockaddr *)&bound, len, 0, &client), "usmc_connect");
	check(usmc_accept(l, 0, &server), "usmc_accept");
	check(usmc_send(client, "hello", 5, 0), "usmc_send");
	check(usmc_recv(server, buf, 5, MSG_WAITALL), "usmc_recv");
	check(usmc_conn_info(server, &info), "usmc_conn_info");
	printf("libusmc %s: received \"%s\" over %s (%s)\n", usmc_version(), buf,
	       usmc_mode_name(info.mode), usmc_reason_name(info.reason));
	usmc_close(client);
	usmc_close(server);
	usmc_listener_close(l);
	return usmc_ctx_destroy(ctx) ? 1 : 0;
}
