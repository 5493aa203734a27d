// SPDX-License-Identifier: MIT
/*
 * echo_client - sends BYTES to an echo server while reading the echo back,
 * checks every byte, and prints the mode, the reason and the throughput.
 *
 * usage: echo_client [-b BYTES] [-t] ADDR PORT
 *   -t  TCP only (no SMC-R)
 * Exit status 0 only if every byte came back intact.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <usmc/usmc.h>

#define CHUNK (256 * 1024)

struct job {
	struct usmc_conn *c;
	unsigned long long bytes;
	int rc;
};

static uint8_t byte_at(unsigned long long off)
{
	return (uint8_t)((off * 2654435761ull) >> 13);
}

static void *sender(void *arg)
{
	struct job *j = arg;
	uint8_t *buf = malloc(CHUNK);

	for (unsigned long long off = 0; off < j->bytes;) {
		size_t n = j->bytes - off < CHUNK ? (size_t)(j->bytes - off) : CHUNK;
		ssize_t w;

		for (size_t i = 0; i < n; i++)
			buf[i] = byte_at(off + i);
		w = usmc_send(j->c, buf, n, 0);
		if (w < 0) {
			fprintf(stderr, "send: %s\n", usmc_strerror((int)w));
			j->rc = 1;
			break;
		}
		off += (unsigned long long)w;
	}
	usmc_shutdown(j->c, SHUT_WR);
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	struct job j = {.bytes = 16ull << 20};
	struct usmc_conn_info info;
	struct usmc_ctx *ctx;
	char msg[160];
	struct timespec t0, t1;
	unsigned long long got = 0;
	uint8_t *buf;
	pthread_t t;
	int opt, rc, tcp_only = 0;

	while ((opt = getopt(argc, argv, "b:t")) != -1) {
		if (opt == 'b')
			j.bytes = strtoull(optarg, NULL, 0);
		else if (opt == 't')
			tcp_only = 1;
		else
			goto usage;
	}
	if (argc - optind != 2 || inet_pton(AF_INET, argv[optind], &a.sin_addr) != 1)
		goto usage;
	a.sin_port = htons((uint16_t)atoi(argv[optind + 1]));

	rc = usmc_ctx_create(&ctx);
	if (rc == -EINVAL && usmc_env_check(msg, sizeof(msg))) {
		fprintf(stderr, "usmc_ctx_create: %s\n", msg);
		return 1;
	}
	if (!rc && tcp_only)
		rc = usmc_ctx_setopt(ctx, USMC_OPT_SMC, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (!rc)
		rc = usmc_connect(ctx, (struct sockaddr *)&a, sizeof(a), 0, &j.c);
	if (rc) {
		fprintf(stderr, "connect: %s\n", usmc_strerror(rc));
		return 1;
	}
	pthread_create(&t, NULL, sender, &j);
	buf = malloc(CHUNK);
	for (;;) {
		ssize_t n = usmc_recv(j.c, buf, CHUNK, 0);

		if (n <= 0) {
			if (n < 0)
				fprintf(stderr, "recv: %s\n", usmc_strerror((int)n));
			break;
		}
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != byte_at(got + (unsigned long long)i)) {
				fprintf(stderr, "wrong byte at offset %llu\n",
					got + (unsigned long long)i);
				return 1;
			}
		}
		got += (unsigned long long)n;
	}
	pthread_join(t, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	usmc_conn_info(j.c, &info);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

	printf("mode %s", usmc_mode_name(info.mode));
	if (info.mode == USMC_MODE_SMCR)
		printf(" lgr %08x SMC-Rv%u", info.lgr_id, info.smc_version);
	else
		printf(" reason %s (%s)", usmc_reason_name(info.reason),
		       usmc_reason_text(info.reason));
	printf(" echoed %llu of %llu bytes in %.3f s (%.1f MB/s each way)\n", got, j.bytes, s,
	       (double)got / s / 1e6);
	usmc_close(j.c);
	free(buf);
	usmc_ctx_destroy(ctx);
	return (got == j.bytes && !j.rc) ? 0 : 1;
usage:
	fprintf(stderr, "usage: %s [-b BYTES] [-t] ADDR PORT\n", argv[0]);
	return 2;
}
