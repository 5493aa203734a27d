// SPDX-License-Identifier: MIT
/*
 * smc_pair: a kernel AF_SMC client/server pair, the Linux SMC-R peer of the
 * interop tests.
 *
 *   smc_pair server <addr> <port>
 *   smc_pair client <src> <dst> <port> <bytes> [<command>]
 *
 * The client sends <bytes> of a pattern, the server answers its checksum;
 * then 100 round trips of 64 bytes. With <command>, the client runs it
 * (sh -c) while the connection is still up, e.g. "smc_kctl diag", and exits
 * with its status. The client retries refused connections for 10 s.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mono_clock.h"

#ifndef AF_SMC
#define AF_SMC 43
#endif
#define SMCPROTO_SMC 0 /* SMC over IPv4 */
#define PINGS	     100
#define PING_LEN     64

struct hello {
	uint64_t bytes;
	uint32_t pings;
} __attribute__((packed));

static void __attribute__((noreturn)) die(const char *what)
{
	fprintf(stderr, "smc_pair: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void xfer(int fd, void *buf, size_t len, int sending)
{
	char *p = buf;

	while (len) {
		ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die(sending ? "send" : "recv");
		if (n == 0) {
			errno = ECONNRESET;
			die("peer closed early");
		}
		p += n;
		len -= (size_t)n;
	}
}

static uint64_t fnv1a64(uint64_t h, const unsigned char *p, size_t len)
{
	while (len--) {
		h ^= *p++;
		h *= 0x100000001b3ull;
	}
	return h;
}

static struct sockaddr_in addr_of(const char *ip, const char *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};

	if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) {
		fprintf(stderr, "smc_pair: bad IPv4 address %s\n", ip);
		exit(2);
	}
	return sa;
}

static int smc_socket(void)
{
	int fd = socket(AF_SMC, SOCK_STREAM | SOCK_CLOEXEC, SMCPROTO_SMC);

	if (fd < 0)
		die("socket(AF_SMC) (modprobe smc?)");
	return fd;
}

static int server(const char *ip, const char *port)
{
	struct sockaddr_in sa = addr_of(ip, port);
	static unsigned char buf[1 << 16];
	struct hello hi;
	uint64_t sum = 0xcbf29ce484222325ull;
	int one = 1, lfd = smc_socket(), fd;

	if (setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
		die("SO_REUSEADDR");
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1))
		die("bind/listen");
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept");
	xfer(fd, &hi, sizeof(hi), 0);
	for (uint64_t left = hi.bytes; left;) {
		size_t n = left < sizeof(buf) ? (size_t)left : sizeof(buf);

		xfer(fd, buf, n, 0);
		sum = fnv1a64(sum, buf, n);
		left -= n;
	}
	xfer(fd, &sum, sizeof(sum), 1);
	for (uint32_t i = 0; i < hi.pings; i++) {
		xfer(fd, buf, PING_LEN, 0);
		xfer(fd, buf, PING_LEN, 1);
	}
	while (recv(fd, buf, sizeof(buf), 0) > 0) /* until the client closes */
		;
	printf("server: received %llu bytes, %u pings\n", (unsigned long long)hi.bytes, hi.pings);
	close(fd);
	close(lfd);
	return 0;
}

static int client(const char *src, const char *dst, const char *port, uint64_t bytes,
		  const char *cmd)
{
	struct sockaddr_in from = addr_of(src, "0"), to = addr_of(dst, port);
	static unsigned char buf[1 << 16];
	struct hello hi = {.bytes = bytes, .pings = PINGS};
	uint64_t sum = 0xcbf29ce484222325ull, peer_sum;
	double t0, t_xfer, t_ping, deadline = mono_s() + 10;
	int fd, rc = 0;

	for (;;) {
		fd = smc_socket();
		if (bind(fd, (struct sockaddr *)&from, sizeof(from)))
			die("bind");
		if (!connect(fd, (struct sockaddr *)&to, sizeof(to)))
			break;
		if (errno != ECONNREFUSED || mono_s() > deadline)
			die("connect");
		close(fd);
		usleep(100000);
	}

	t0 = mono_s();
	xfer(fd, &hi, sizeof(hi), 1);
	for (uint64_t left = bytes, x = 0x5eed; left;) {
		size_t n = left < sizeof(buf) ? (size_t)left : sizeof(buf);

		for (size_t i = 0; i < n; i++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			buf[i] = (unsigned char)(x >> 56);
		}
		sum = fnv1a64(sum, buf, n);
		xfer(fd, buf, n, 1);
		left -= n;
	}
	xfer(fd, &peer_sum, sizeof(peer_sum), 0);
	t_xfer = mono_s() - t0;
	if (peer_sum != sum) {
		fprintf(stderr, "smc_pair: checksum mismatch: sent %016llx, server got %016llx\n",
			(unsigned long long)sum, (unsigned long long)peer_sum);
		return 1;
	}
	t0 = mono_s();
	for (int i = 0; i < PINGS; i++) {
		xfer(fd, buf, PING_LEN, 1);
		xfer(fd, buf, PING_LEN, 0);
	}
	t_ping = mono_s() - t0;
	printf("client: %llu bytes in %.3f s (%.1f MB/s, checksum ok), %d x %d B round trips: "
	       "%.0f us each\n",
	       (unsigned long long)bytes, t_xfer, bytes / t_xfer / 1e6, PINGS, PING_LEN,
	       t_ping / PINGS * 1e6);
	fflush(stdout);
	if (cmd) {
		int st = system(cmd);

		rc = st == -1 ? 1 : WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	}
	close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "server"))
		return server(argv[2], argv[3]);
	if ((argc == 6 || argc == 7) && !strcmp(argv[1], "client"))
		return client(argv[2], argv[3], argv[4], strtoull(argv[5], NULL, 0),
			      argc == 7 ? argv[6] : NULL);
	fprintf(stderr, "usage: smc_pair server <addr> <port>\n"
			"       smc_pair client <src> <dst> <port> <bytes> [<command>]\n");
	return 2;
}
