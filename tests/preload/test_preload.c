// SPDX-License-Identifier: MIT
/*
 * The socket API under libusmc-preload.so, over loopback without an RDMA
 * device (docs/preload.md). This program knows nothing of
 * libusmc: it uses plain sockets and runs under usmc_run (CMake runs it
 * so, once as it is and once with USMC_PRELOAD_TEST_GATE=1, which puts
 * non-blocking connects through the gate and helper thread that a device
 * would). What it checks is the socket API's promises: descriptor
 * numbers, dup, fork with a pre-fork server, poll/select/epoll on mixed
 * descriptors, non-blocking connect, EOF and errors. That the preload did
 * take the sockets over is checked too: a listener has libusmc's accept
 * thread, and a raw CLC PROPOSAL gets a DECLINE instead of reaching the
 * application.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "linux_proposal.h"

static int lo_listener(struct sockaddr_in *a, int backlog)
{
	socklen_t len = sizeof(*a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	*a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(bind(fd, (struct sockaddr *)a, sizeof(*a)), 0);
	assert_int_equal(listen(fd, backlog), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)a, &len), 0);
	return fd;
}

static int lo_connect(const struct sockaddr_in *a)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	if (connect(fd, (const struct sockaddr *)a, sizeof(*a)))
		fail_msg("connect: %s", strerror(errno));
	return fd;
}

static void read_exact(int fd, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n <= 0)
			fail_msg("read: %zd %s", n, n < 0 ? strerror(errno) : "EOF");
		got += (size_t)n;
	}
}

/* A thread of this process named @name (libusmc names its threads). */
static bool have_thread(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	bool found = false;

	assert_non_null(d);
	while (!found && (e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f))
			found = !strncmp(comm, name, strlen(name));
		fclose(f);
	}
	closedir(d);
	return found;
}

/* The application's descriptor numbers are its own from socket() on. */
static void test_fd_numbers(void **state)
{
	struct sockaddr_in a, peer;
	socklen_t len = sizeof(peer);
	char buf[4];
	int l, c, s, want;

	(void)state;
	alarm(30);
	l = lo_listener(&a, 16);
	want = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(want >= 0);
	assert_int_equal(connect(want, (struct sockaddr *)&a, sizeof(a)), 0);
	c = want;
	s = accept(l, (struct sockaddr *)&peer, &len);
	assert_true(s >= 0);
	assert_int_equal(len, sizeof(peer));
	assert_int_equal(peer.sin_family, AF_INET);
	assert_true(have_thread("usmc-accept")); /* the listener is libusmc's */
	/* libusmc's own descriptors (its context, the listener's eventfds,
	 * epoll set, the adopted sockets) are kept out of the low numbers the
	 * application expects: wrk sizes its event loop by them */
	{
		int probe = socket(AF_INET, SOCK_DGRAM, 0);

		assert_true(probe >= 0 && probe < s + 6);
		close(probe);
	}
	assert_int_equal(write(c, "ping", 4), 4);
	read_exact(s, buf, 4);
	assert_memory_equal(buf, "ping", 4);
	assert_int_equal(send(s, "pong", 4, MSG_NOSIGNAL), 4);
	assert_int_equal(recv(c, buf, 4, MSG_WAITALL), 4);
	assert_memory_equal(buf, "pong", 4);
	/* the names are those of the TCP connection */
	len = sizeof(peer);
	assert_int_equal(getpeername(c, (struct sockaddr *)&peer, &len), 0);
	assert_int_equal(peer.sin_port, a.sin_port);
	/* accept4 flags reach the descriptor */
	{
		int c2 = lo_connect(&a), s2 = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		assert_true(s2 >= 0);
		assert_true(fcntl(s2, F_GETFL) & O_NONBLOCK);
		assert_int_equal(fcntl(s2, F_GETFD), FD_CLOEXEC);
		assert_int_equal(read(s2, buf, 1), -1);
		assert_int_equal(errno, EAGAIN);
		close(c2);
		close(s2);
	}
	close(c);
	close(s);
	close(l);
}

/* A raw CLC PROPOSAL (sent past the preload, by system call) is answered
 * with a DECLINE, and the application sees only the bytes after it. */
static void test_proposal_declined(void **state)
{
	struct sockaddr_in a;
	uint8_t decl[44];
	char buf[4];
	int l, fd, s;

	(void)state;
	alarm(30);
	l = lo_listener(&a, 16);
	/* the usmc listener comes with the first accept or poll (a pre-fork
	 * master that never accepts never has one) */
	assert_int_equal(poll(&(struct pollfd){.fd = l, .events = POLLIN}, 1, 0), 0);
	fd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(syscall(SYS_connect, fd, &a, sizeof(a)), 0);
	assert_int_equal(
		syscall(SYS_sendto, fd, linux_v2_proposal, sizeof(linux_v2_proposal), 0, NULL, 0),
		(long)sizeof(linux_v2_proposal));
	for (size_t got = 0; got < sizeof(decl);) {
		long n = syscall(SYS_recvfrom, fd, decl + got, sizeof(decl) - got, 0, NULL, NULL);

		assert_true(n > 0);
		got += (size_t)n;
	}
	assert_int_equal(decl[4], 0x04); /* DECLINE */
	s = accept(l, NULL, NULL);
	assert_true(s >= 0);
	assert_int_equal(syscall(SYS_sendto, fd, "data", 4, 0, NULL, 0), 4);
	read_exact(s, buf, 4);
	assert_memory_equal(buf, "data", 4);
	close(s);
	syscall(SYS_close, fd);
	close(l);
}

/* dup, dup2, dup3 and F_DUPFD: the new number is the same socket; the
 * object lives while any of them is open. */
static void test_dup(void **state)
{
	struct sockaddr_in a;
	char buf[2];
	int l, l2, c, s, d;

	(void)state;
	alarm(30);
	l = lo_listener(&a, 16);
	l2 = dup(l);
	assert_true(l2 >= 0);
	assert_int_equal(close(l), 0);
	c = lo_connect(&a);
	s = accept(l2, NULL, NULL); /* through the duplicate */
	assert_true(s >= 0);
	close(c);
	close(s);
	assert_int_equal(dup2(l2, 99), 99);
	assert_int_equal(dup3(l2, 98, O_CLOEXEC), 98);
	assert_int_equal(fcntl(98, F_GETFD), FD_CLOEXEC);
	d = fcntl(l2, F_DUPFD_CLOEXEC, 200);
	assert_true(d >= 200);
	close(l2);
	close(98);
	c = lo_connect(&a);
	s = accept(99, NULL, NULL);
	assert_true(s >= 0);
	/* a connection's duplicate writes to the same stream */
	assert_int_equal(dup2(c, 97), 97);
	assert_int_equal(write(97, "ab", 2), 2);
	close(97);
	assert_int_equal(write(c, "cd", 2), 2);
	read_exact(s, buf, 2);
	assert_memory_equal(buf, "ab", 2);
	read_exact(s, buf, 2);
	assert_memory_equal(buf, "cd", 2);
	/* dup2 over a listener closes it */
	assert_int_equal(dup2(c, d), d);
	close(c);
	close(d);
	close(s);
	close(99);
	/* every descriptor closed: the port is free again */
	l = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	close(l);
}

/* A pre-fork server: the master listens and never accepts; each worker
 * accepts with epoll on its own libusmc listener. */
static void test_prefork(void **state)
{
	enum { WORKERS = 3, CONNS = 30 };
	struct sockaddr_in a;
	pid_t pids[WORKERS];
	int l, served[WORKERS] = {0};

	(void)state;
	alarm(60);
	l = lo_listener(&a, 64);
	for (int w = 0; w < WORKERS; w++) {
		pids[w] = fork();
		assert_true(pids[w] >= 0);
		if (pids[w] == 0) {
			int ep = epoll_create1(EPOLL_CLOEXEC);
			struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u32 = 7};

			alarm(60);
			if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev))
				_exit(2);
			for (;;) {
				struct epoll_event got;
				uint8_t msg[5];
				char req;
				int s, n = epoll_wait(ep, &got, 1, -1);

				if (n < 0 && errno == EINTR)
					continue;
				if (n != 1 || got.data.u32 != 7)
					_exit(3);
				s = accept4(l, NULL, NULL, SOCK_NONBLOCK);
				if (s < 0) {
					if (errno == EAGAIN)
						continue;
					_exit(4);
				}
				fcntl(s, F_SETFL, 0);
				if (read(s, &req, 1) != 1)
					_exit(5);
				msg[0] = (uint8_t)w;
				msg[1] = have_thread("usmc-accept");
				if (write(s, msg, 2) != 2)
					_exit(6);
				close(s);
			}
		}
	}
	for (int i = 0; i < CONNS; i++) {
		int c = lo_connect(&a);
		uint8_t msg[2];

		assert_int_equal(write(c, "x", 1), 1);
		read_exact(c, msg, 2);
		assert_true(msg[0] < WORKERS);
		assert_int_equal(msg[1], 1); /* the worker accepted through libusmc */
		served[msg[0]]++;
		close(c);
	}
	/* the master never took a connection from the kernel */
	assert_false(have_thread("usmc-accept"));
	for (int w = 0; w < WORKERS; w++) {
		int st;

		kill(pids[w], SIGKILL);
		assert_int_equal(waitpid(pids[w], &st, 0), pids[w]);
		assert_true(WIFSIGNALED(st)); /* not an _exit() of a failure */
	}
	close(l);
}

/* poll, select and epoll on a listener, a pipe, a UDP socket, a UNIX
 * socketpair and a connection at once. */
static void test_poll_mixed(void **state)
{
	struct sockaddr_in a,
		ua = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct epoll_event ev, got[8];
	int l, p[2], u, us[2], c, s, ep, n;
	struct pollfd pf[4];
	fd_set rs;
	char b;

	(void)state;
	alarm(30);
	l = lo_listener(&a, 16);
	assert_int_equal(pipe(p), 0);
	u = socket(AF_INET, SOCK_DGRAM, 0);
	assert_int_equal(bind(u, (struct sockaddr *)&ua, sizeof(ua)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, us), 0);
	pf[0] = (struct pollfd){.fd = l, .events = POLLIN};
	pf[1] = (struct pollfd){.fd = p[0], .events = POLLIN};
	pf[2] = (struct pollfd){.fd = u, .events = POLLIN};
	pf[3] = (struct pollfd){.fd = us[0], .events = POLLIN};
	assert_int_equal(poll(pf, 4, 0), 0);
	c = lo_connect(&a);
	assert_int_equal(poll(pf, 4, 5000), 1);
	assert_int_equal(pf[0].revents, POLLIN);
	assert_int_equal(pf[0].fd, l); /* the caller's array keeps its numbers */
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(poll(pf, 4, 5000), 2);
	assert_int_equal(pf[1].revents, POLLIN);
	/* select: the listener and the pipe */
	FD_ZERO(&rs);
	FD_SET(l, &rs);
	FD_SET(p[0], &rs);
	FD_SET(u, &rs);
	FD_SET(us[0], &rs);
	n = select(FD_SETSIZE > 1000 ? 1000 : FD_SETSIZE, &rs, NULL, NULL,
		   &(struct timeval){.tv_sec = 5});
	assert_int_equal(n, 2);
	assert_true(FD_ISSET(l, &rs) && FD_ISSET(p[0], &rs));
	assert_false(FD_ISSET(u, &rs) || FD_ISSET(us[0], &rs));
	assert_int_equal(read(p[0], &b, 1), 1);
	/* epoll, level triggered: the listener stays ready until accepted */
	ep = epoll_create1(0);
	/* EPOLLEXCLUSIVE as the kernel takes it for a socket: alone (whatever
	 * the preload polls in its place), not with EPOLLONESHOT */
	ev = (struct epoll_event){.events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT, .data.fd = l};
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev), -1);
	assert_int_equal(errno, EINVAL);
	ev = (struct epoll_event){.events = EPOLLIN | EPOLLEXCLUSIVE, .data.fd = l};
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev), 0);
	assert_int_equal(epoll_wait(ep, got, 8, 5000), 1);
	assert_int_equal(got[0].data.fd, l);
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_DEL, l, NULL), 0);
	ev = (struct epoll_event){.events = EPOLLIN, .data.fd = l};
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev), 0);
	ev = (struct epoll_event){.events = EPOLLIN, .data.fd = us[0]};
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, us[0], &ev), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(epoll_wait(ep, got, 8, 5000), 1);
		assert_int_equal(got[0].data.fd, l);
	}
	s = accept(l, NULL, NULL);
	assert_true(s >= 0);
	assert_int_equal(epoll_wait(ep, got, 8, 0), 0);
	/* edge triggered: two connections, one edge; drained to EAGAIN */
	ev = (struct epoll_event){.events = EPOLLIN | EPOLLET, .data.fd = l};
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_MOD, l, &ev), 0);
	{
		int c2 = lo_connect(&a), c3 = lo_connect(&a), k = 0, t;

		usleep(200 * 1000);
		assert_int_equal(epoll_wait(ep, got, 8, 5000), 1);
		assert_int_equal(fcntl(l, F_SETFL, O_NONBLOCK), 0);
		while ((t = accept(l, NULL, NULL)) >= 0) {
			close(t);
			k++;
		}
		assert_int_equal(errno, EAGAIN);
		assert_int_equal(k, 2);
		assert_int_equal(epoll_wait(ep, got, 8, 200), 0);
		close(c2);
		close(c3);
	}
	/* a connection: EPOLLONESHOT fires once until re-armed */
	ev = (struct epoll_event){.events = EPOLLIN | EPOLLONESHOT | EPOLLRDHUP, .data.fd = s};
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev), 0);
	assert_int_equal(write(c, "1", 1), 1);
	assert_int_equal(epoll_wait(ep, got, 8, 5000), 1);
	assert_int_equal(got[0].data.fd, s);
	assert_int_equal(write(c, "2", 1), 1);
	assert_int_equal(epoll_wait(ep, got, 8, 200), 0);
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev), 0);
	assert_int_equal(epoll_wait(ep, got, 8, 5000), 1);
	assert_int_equal(read(s, &b, 1), 1);
	assert_int_equal(read(s, &b, 1), 1);
	/* EPOLLRDHUP when the peer shuts its side down; then EOF */
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev), 0);
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	assert_int_equal(epoll_wait(ep, got, 8, 5000), 1);
	assert_true(got[0].events & EPOLLRDHUP);
	assert_int_equal(read(s, &b, 1), 0);
	/* a closed listener leaves the epoll set, even with a client waiting */
	ev = (struct epoll_event){.events = EPOLLIN, .data.fd = l};
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_MOD, l, &ev), 0);
	{
		int c4 = lo_connect(&a);

		usleep(200 * 1000);
		close(l);
		assert_int_equal(epoll_wait(ep, got, 8, 300), 0);
		close(c4);
	}
	close(ep);
	close(c);
	close(s);
	close(p[0]);
	close(p[1]);
	close(u);
	close(us[0]);
	close(us[1]);
}

/* connect() on a non-blocking socket: EINPROGRESS, writable when done,
 * SO_ERROR, a second connect(); and the error of a refused one. */
static void test_nonblock_connect(void **state)
{
	struct sockaddr_in a, dead;
	struct epoll_event ev, got;
	socklen_t len = sizeof(int);
	int l, c, s, err = -1, ep, r;
	struct pollfd pf;
	char b;

	(void)state;
	alarm(30);
	l = lo_listener(&a, 16);
	c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), -1);
	assert_int_equal(errno, EINPROGRESS);
	/* registered before the connect is done: the event still comes */
	ep = epoll_create1(0);
	ev = (struct epoll_event){.events = EPOLLOUT | EPOLLET, .data.u64 = 42};
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev), 0);
	assert_int_equal(epoll_wait(ep, &got, 1, 5000), 1);
	assert_int_equal(got.data.u64, 42);
	assert_true(got.events & EPOLLOUT);
	pf = (struct pollfd){.fd = c, .events = POLLOUT};
	assert_int_equal(poll(&pf, 1, 5000), 1);
	assert_int_equal(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	assert_int_equal(err, 0);
	r = connect(c, (struct sockaddr *)&a, sizeof(a));
	assert_true(r == 0 || errno == EISCONN);
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), -1);
	assert_int_equal(errno, EISCONN);
	assert_true(fcntl(c, F_GETFL) & O_NONBLOCK);
	s = accept(l, NULL, NULL);
	assert_true(s >= 0);
	assert_int_equal(write(c, "z", 1), 1);
	read_exact(s, &b, 1);
	assert_int_equal(read(c, &b, 1), -1);
	assert_int_equal(errno, EAGAIN);
	close(s);
	close(c);
	close(ep);
	/* refused: a port nobody listens on */
	dead = a;
	close(l);
	c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&dead, sizeof(dead)), -1);
	assert_int_equal(errno, EINPROGRESS);
	pf = (struct pollfd){.fd = c, .events = POLLOUT};
	assert_int_equal(poll(&pf, 1, 5000), 1);
	len = sizeof(int);
	assert_int_equal(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	assert_int_equal(err, ECONNREFUSED);
	len = sizeof(int);
	assert_int_equal(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	assert_int_equal(err, 0); /* reported once */
	close(c);
	/* a blocking connect reports it at once */
	c = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&dead, sizeof(dead)), -1);
	assert_int_equal(errno, ECONNREFUSED);
	close(c);
}

static void *blocked_accept(void *arg)
{
	int *fd = arg, r = accept(*fd, NULL, NULL);

	return (void *)(intptr_t)(r < 0 ? -errno : r);
}

/* EOF and errors as the socket API gives them. */
static void test_eof_errors(void **state)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(int);
	char buf[16];
	int l, c, s, v = -1, fl;
	pthread_t t;
	void *res;
	ssize_t n = 0;

	(void)state;
	alarm(30);
	signal(SIGPIPE, SIG_IGN);
	l = lo_listener(&a, 16);
	/* an empty non-blocking listener; the blocking view is the caller's */
	fl = fcntl(l, F_GETFL);
	assert_false(fl & O_NONBLOCK);
	assert_int_equal(ioctl(l, FIONBIO, &(int){1}), 0);
	assert_true(fcntl(l, F_GETFL) & O_NONBLOCK);
	assert_int_equal(accept(l, NULL, NULL), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(fcntl(l, F_SETFL, fl), 0);
	assert_false(fcntl(l, F_GETFL) & O_NONBLOCK);
	assert_int_equal(recv(l, buf, 1, 0), -1);
	assert_int_equal(errno, ENOTCONN);
	c = lo_connect(&a);
	s = accept(l, NULL, NULL);
	assert_true(s >= 0);
	assert_int_equal(accept(s, NULL, NULL), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(getsockopt(s, SOL_SOCKET, SO_ERROR, &v, &len), 0);
	assert_int_equal(v, 0);
	/* MSG_PEEK, FIONREAD, MSG_WAITALL across two writes */
	assert_int_equal(write(c, "hello", 5), 5);
	assert_int_equal(recv(s, buf, 5, MSG_PEEK | MSG_WAITALL), 5);
	assert_int_equal(ioctl(s, FIONREAD, &v), 0);
	assert_int_equal(v, 5);
	assert_int_equal(write(c, "world", 5), 5);
	assert_int_equal(recv(s, buf, 10, MSG_WAITALL), 10);
	assert_memory_equal(buf, "helloworld", 10);
	/* the peer closes: EOF, then writes fail with EPIPE or ECONNRESET */
	close(c);
	assert_int_equal(read(s, buf, sizeof(buf)), 0);
	for (int i = 0; i < 100 && n >= 0; i++) {
		n = send(s, "x", 1, MSG_NOSIGNAL);
		usleep(1000);
	}
	assert_int_equal(n, -1);
	assert_true(errno == EPIPE || errno == ECONNRESET);
	close(s);
	/* shutdown() wakes an accept blocked in another thread */
	assert_int_equal(pthread_create(&t, NULL, blocked_accept, &l), 0);
	usleep(200 * 1000);
	assert_int_equal(shutdown(l, SHUT_RD), 0);
	assert_int_equal(pthread_join(t, &res), 0);
	assert_int_equal((intptr_t)res, -EINVAL);
	close(l);
	signal(SIGPIPE, SIG_DFL);
}

/* ---- descriptors closed where the preload does not see it --------------- */

/* A loopback listener the preload never sees (system calls) with a full
 * accept queue (backlog 1, two connections in it): the kernel drops the
 * SYNs of the next clients, whose connects stay in progress. */
static int full_listener(struct sockaddr_in *a, int queued[2])
{
	socklen_t len = sizeof(*a);
	int fd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	*a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(syscall(SYS_bind, fd, a, sizeof(*a)), 0);
	assert_int_equal(syscall(SYS_listen, fd, 1), 0);
	assert_int_equal(syscall(SYS_getsockname, fd, a, &len), 0);
	for (int i = 0; i < 2; i++) {
		queued[i] = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
		assert_int_equal(syscall(SYS_connect, queued[i], a, sizeof(*a)), 0);
	}
	return fd;
}

/* A descriptor of the preload's table: a connect that stays in progress. */
static int pending_connect(const struct sockaddr_in *full)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (const struct sockaddr *)full, sizeof(*full)), -1);
	assert_int_equal(errno, EINPROGRESS);
	return fd;
}

#define MAX_FILL 256

/* Fill the holes below @hi but @lo (system calls): @lo and @hi are the
 * two lowest free descriptors then (@lo = @hi: the lowest); the fillers
 * in @fill, their number returned. */
static int holes_filled(int lo, int hi, int *fill)
{
	int n = 0, t;

	while ((t = (int)syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY | O_CLOEXEC)) != hi) {
		assert_true(t >= 0 && t < hi && n < MAX_FILL);
		if (t != lo)
			fill[n++] = t;
	}
	syscall(SYS_close, hi);
	if (lo != hi)
		syscall(SYS_close, lo);
	return n;
}

static void fill_close(const int *fill, int n)
{
	while (n--)
		syscall(SYS_close, fill[n]);
}

/* close_range(), then open(): the bytes go to the file */
static void closed_then_open(const struct sockaddr_in *full)
{
	int fill[MAX_FILL], n, c = pending_connect(full), fd;
	char path[64], buf[8];

	snprintf(path, sizeof(path), "/tmp/test_preload.%d", (int)getpid());
	assert_int_equal(close_range((unsigned int)c, (unsigned int)c, 0), 0);
	n = holes_filled(c, c, fill);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_int_equal(fd, c);
	assert_int_equal(write(fd, "file", 4), 4);
	assert_int_equal(pread(fd, buf, sizeof(buf), 0), 4);
	assert_memory_equal(buf, "file", 4);
	close(fd);
	unlink(path);
	fill_close(fill, n);
}

/* a raw close() of two, then pipe(): the bytes go through the pipe */
static void closed_then_pipe(const struct sockaddr_in *full)
{
	int fill[MAX_FILL], n, c = pending_connect(full), c2 = pending_connect(full), p[2];
	char buf[8];

	syscall(SYS_close, c);
	syscall(SYS_close, c2);
	n = holes_filled(c, c2, fill);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(p[0], c);
	assert_int_equal(p[1], c2);
	assert_int_equal(write(p[1], "pipe", 4), 4);
	assert_int_equal(read(p[0], buf, sizeof(buf)), 4);
	assert_memory_equal(buf, "pipe", 4);
	close(p[0]);
	close(p[1]);
	fill_close(fill, n);
}

/* close_range(), then accept() of a client the preload's listener runs
 * over TCP: the bytes go to the client */
static void closed_then_accept(const struct sockaddr_in *full)
{
	int fill[MAX_FILL], n, l, k, c, s;
	struct sockaddr_in a;
	char buf[4];

	l = lo_listener(&a, 16);
	k = lo_connect(&a);
	assert_int_equal(poll(&(struct pollfd){.fd = l, .events = POLLIN}, 1, 5000), 1);
	c = pending_connect(full);
	assert_int_equal(close_range((unsigned int)c, (unsigned int)c, 0), 0);
	n = holes_filled(c, c, fill);
	s = accept(l, NULL, NULL);
	assert_int_equal(s, c);
	assert_int_equal(write(s, "tcp!", 4), 4);
	read_exact(k, buf, 4);
	assert_memory_equal(buf, "tcp!", 4);
	close(s);
	close(k);
	close(l);
	fill_close(fill, n);
}

/* In a child, as closefrom() takes libusmc's descriptors too: closefrom(@c),
 * then accept() of @plain, a listener the preload does not manage. */
static void closefrom_child(int c, int plain)
{
	int fill[MAX_FILL], s;

	closefrom(c);
	holes_filled(c, c, fill);
	s = accept(plain, NULL, NULL);
	if (s != c)
		_exit(2);
	_exit(write(s, "from", 4) == 4 ? 0 : 3);
}

/* closefrom(), then accept() (in a child): the bytes go to the client */
static void closefrom_then_accept(const struct sockaddr_in *full)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int l = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0), k, c, hi, st;
	char buf[4];
	pid_t pid;

	assert_int_equal(syscall(SYS_bind, l, &a, sizeof(a)), 0);
	assert_int_equal(syscall(SYS_listen, l, 4), 0);
	assert_int_equal(syscall(SYS_getsockname, l, &a, &(socklen_t){sizeof(a)}), 0);
	k = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
	assert_int_equal(syscall(SYS_connect, k, &a, sizeof(a)), 0);
	c = pending_connect(full);
	hi = fcntl(c, F_DUPFD, (l > k ? l : k) + 1); /* above what the child keeps */
	assert_true(hi > 0);
	close(c);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		closefrom_child(hi, l);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	read_exact(k, buf, 4);
	assert_memory_equal(buf, "from", 4);
	close(hi);
	syscall(SYS_close, k);
	syscall(SYS_close, l);
}

/*
 * A managed descriptor closed where the preload does not see it (a raw
 * close, and close_range() and closefrom() before they were wrapped) and
 * handed out again by open(), pipe() or accept(): the bytes written to it
 * go to the new file, not to the old connection (here a connect in
 * progress, over SMC-R a peer).
 */
static void test_closed_behind(void **state)
{
	struct sockaddr_in full;
	int q[2], fl;

	(void)state;
	alarm(60);
	fl = full_listener(&full, q);
	closed_then_open(&full);
	closed_then_pipe(&full);
	closed_then_accept(&full);
	closefrom_then_accept(&full);
	syscall(SYS_close, q[0]);
	syscall(SYS_close, q[1]);
	syscall(SYS_close, fl);
}

/* Whether @name is one of the @n names of the command line (none: all). */
static bool wanted(const char *name, int n, char **names)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(name, names[i]))
			return true;
	return n == 0;
}

/* usage: test_preload [TEST...]: the tests named (test_prefork, ...), or
 * all; test_preload_kc.sh runs those that hold in kernel-compatible mode */
int main(int argc, char **argv)
{
	const struct CMUnitTest all[] = {
		cmocka_unit_test(test_fd_numbers), cmocka_unit_test(test_proposal_declined),
		cmocka_unit_test(test_dup),	   cmocka_unit_test(test_prefork),
		cmocka_unit_test(test_poll_mixed), cmocka_unit_test(test_nonblock_connect),
		cmocka_unit_test(test_eof_errors), cmocka_unit_test(test_closed_behind),
	};
	struct CMUnitTest tests[sizeof(all) / sizeof(all[0])];
	size_t n = 0;

	if (!getenv("LD_PRELOAD")) {
		fprintf(stderr, "run me under usmc_run\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (wanted(all[i].name, argc - 1, argv + 1))
			tests[n++] = all[i];
	if (n == 0) {
		fprintf(stderr, "no such test\n");
		return 2;
	}
	return _cmocka_run_group_tests("test_preload", tests, n, NULL, NULL);
}
