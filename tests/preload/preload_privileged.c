// SPDX-License-Identifier: MIT
/*
 * preload_privileged - a plain-socket program linked with
 * libusmc-preload.so (a privileged process ignores LD_PRELOAD outside the
 * system's directories), for test_preload_privileged.sh, which runs a
 * set-group-ID copy of it. It makes one loopback connection (a -vv line
 * each side) and one non-blocking connect that stays in progress (the
 * listener's accept queue is full), and prints on one line
 *   secure=<AT_SECURE> gate=<0|1>
 * gate=1: that connect's descriptor is the preload's gate, an AF_UNIX
 * socket (USMC_PRELOAD_TEST_GATE).
 */
#include <netinet/in.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	_exit(1);
}

static void loopback(struct sockaddr_in *a)
{
	*a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
}

/* A loopback listener of the preload, its address in @a. */
static int lo_listener(struct sockaddr_in *a)
{
	socklen_t len = sizeof(*a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	loopback(a);
	if (fd < 0 || bind(fd, (struct sockaddr *)a, sizeof(*a)) || listen(fd, 4) ||
	    getsockname(fd, (struct sockaddr *)a, &len))
		die("listener");
	return fd;
}

/* A listener the preload does not see (system calls) whose accept queue
 * is full (backlog 1, two connections in it): a connect to it stays in
 * progress, as the kernel drops its SYNs. */
static void full_listener(struct sockaddr_in *a)
{
	socklen_t len = sizeof(*a);
	int fd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);

	loopback(a);
	if (fd < 0 || syscall(SYS_bind, fd, a, sizeof(*a)) || syscall(SYS_listen, fd, 1) ||
	    syscall(SYS_getsockname, fd, a, &len))
		die("full listener");
	for (int i = 0; i < 2; i++) {
		int q = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);

		if (q < 0 || syscall(SYS_connect, q, a, sizeof(*a)))
			die("a queued connection");
	}
}

int main(void)
{
	struct sockaddr_in a;
	int l = lo_listener(&a), c = socket(AF_INET, SOCK_STREAM, 0), s, domain = 0;
	socklen_t len = sizeof(domain);
	char b;

	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)))
		die("connect");
	s = accept(l, NULL, NULL);
	if (s < 0 || write(c, "x", 1) != 1 || read(s, &b, 1) != 1)
		die("the loopback connection");
	full_listener(&a);
	c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (c < 0 || !connect(c, (struct sockaddr *)&a, sizeof(a)))
		die("a connect in progress");
	if (syscall(SYS_getsockopt, c, SOL_SOCKET, SO_DOMAIN, &domain, &len))
		die("SO_DOMAIN");
	printf("secure=%lu gate=%d\n", getauxval(AT_SECURE), domain == AF_UNIX);
	return 0;
}
