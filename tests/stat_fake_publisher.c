// SPDX-License-Identifier: MIT
/*
 * stat_fake_publisher - a process that answers usmc-stat as it likes, for
 * the tests of what usmc-stat trusts (tests/test_usmc_stat_*.sh).
 *
 *   stat_fake_publisher PID FIRST COUNT REPLY_FILE [TRICKLE_MS]
 *
 * binds the listening abstract sockets "@usmc-stat/<PID>/<n>" for n from
 * FIRST to FIRST + COUNT - 1 (PID "self": its own pid; another one: a
 * squatter on that process's names), prints "ready <its pid>" and answers
 * each connection with REPLY_FILE's bytes, then closes it, until stdin
 * closes. With TRICKLE_MS, one byte every TRICKLE_MS milliseconds. A
 * reader that hangs up early ends that answer only.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/check.h"

#define MAX_NAMES 128

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		die("%s: %s", path, strerror(errno));
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		die("%s: cannot read", path);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static int bind_name(long pid, long n)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int len = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "usmc-stat/%ld/%ld", pid, n);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 ||
	    bind(fd, (struct sockaddr *)&sa,
		 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len)) ||
	    listen(fd, 16))
		die("bind @%s: %s", sa.sun_path + 1, strerror(errno));
	return fd;
}

static void answer(int lfd, const char *reply, size_t len, long trickle_ms)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	while (len) {
		ssize_t w;

		if (trickle_ms)
			usleep((useconds_t)trickle_ms * 1000);
		w = send(fd, reply, trickle_ms ? 1 : len, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* the reader hung up */
		reply += w;
		len -= (size_t)w;
	}
	close(fd);
}

int main(int argc, char **argv)
{
	struct pollfd p[MAX_NAMES + 1];
	long pid, first, count, trickle_ms;
	size_t len;
	char *reply;

	if (argc != 5 && argc != 6)
		die("usage: stat_fake_publisher PID FIRST COUNT REPLY_FILE [TRICKLE_MS]");
	pid = strcmp(argv[1], "self") ? atol(argv[1]) : (long)getpid();
	first = atol(argv[2]);
	count = atol(argv[3]);
	trickle_ms = argc == 6 ? atol(argv[5]) : 0;
	if (pid <= 0 || first < 0 || count < 1 || count > MAX_NAMES)
		die("bad PID, FIRST or COUNT");
	reply = read_file(argv[4], &len);
	p[0] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
	for (long i = 0; i < count; i++)
		p[1 + i] = (struct pollfd){.fd = bind_name(pid, first + i), .events = POLLIN};
	printf("ready %ld\n", (long)getpid());
	fflush(stdout);
	for (;;) {
		if (poll(p, (nfds_t)count + 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		if (p[0].revents)
			break; /* stdin closed (or readable: either ends it) */
		for (long i = 1; i <= count; i++)
			if (p[i].revents & POLLIN)
				answer(p[i].fd, reply, len, trickle_ms);
	}
	free(reply);
	return 0;
}
