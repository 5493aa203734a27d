// SPDX-License-Identifier: MIT
/*
 * API behaviour over loopback TCP: send flags, TCP options on a
 * connection, adopting a listening socket, fork, sized info and stats,
 * errors after a peer reset, environment diagnostics.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "common/loopback.h"

/* A context, a listener on 127.0.0.1, and one usmc-to-usmc pair. */
struct pair {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	struct sockaddr_storage addr;
	socklen_t alen;
	struct usmc_conn *c, *s; /* client, server end */
};

static int pair_setup(void **state)
{
	struct pair *p = calloc(1, sizeof(*p));

	assert_non_null(p);
	assert_int_equal(usmc_ctx_create(&p->ctx), 0);
	p->l = lo_listen(p->ctx, 16, 0, &p->addr, &p->alen);
	assert_int_equal(usmc_connect(p->ctx, (struct sockaddr *)&p->addr, p->alen, 0, &p->c), 0);
	assert_int_equal(usmc_accept(p->l, 0, &p->s), 0);
	*state = p;
	return 0;
}

static int pair_teardown(void **state)
{
	struct pair *p = *state;

	if (p->c)
		usmc_close(p->c);
	if (p->s)
		usmc_close(p->s);
	assert_int_equal(usmc_listener_close(p->l), 0);
	assert_int_equal(usmc_ctx_destroy(p->ctx), 0);
	free(p);
	return 0;
}

/* MSG_NOSIGNAL and MSG_MORE are accepted; anything else is not. */
static void test_send_flags(void **state)
{
	struct pair *p = *state;
	struct iovec iov[2] = {{.iov_base = "de", .iov_len = 2}, {.iov_base = "f", .iov_len = 1}};
	char buf[6];

	assert_int_equal(usmc_send(p->c, "abc", 3, MSG_NOSIGNAL | MSG_MORE), 3);
	assert_int_equal(usmc_sendv(p->c, iov, 2, MSG_NOSIGNAL | MSG_DONTWAIT), 3);
	conn_read_exact(p->s, buf, 6);
	assert_memory_equal(buf, "abcdef", 6);
	assert_int_equal(usmc_send(p->c, "x", 1, MSG_OOB), -EINVAL);
	assert_int_equal(usmc_send(p->c, "x", 1, MSG_CONFIRM), -EINVAL);
}

/* TCP options reach the connection's TCP socket. */
static void test_sockopts(void **state)
{
	struct pair *p = *state;
	struct usmc_conn *fresh;
	int one = 1, v = 0;
	socklen_t len = sizeof(v);

	assert_int_equal(usmc_conn_setsockopt(p->c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)),
			 0);
	assert_int_equal(usmc_conn_getsockopt(p->c, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	assert_int_equal(len, sizeof(v));
	assert_int_equal(v, 1);
	assert_int_equal(usmc_conn_setsockopt(p->s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)),
			 0);
	v = 0;
	assert_int_equal(usmc_conn_getsockopt(p->s, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
	assert_int_equal(v, 1);
	v = 7;
	assert_int_equal(usmc_conn_getsockopt(p->s, SOL_SOCKET, SO_ERROR, &v, &len), 0);
	assert_int_equal(v, 0);
	assert_int_equal(usmc_conn_getsockopt(p->s, SOL_SOCKET, SO_RCVBUF, &v, &len), 0);
	assert_true(v > 0);
	/* the kernel's errors come back negated; bad arguments */
	assert_int_equal(usmc_conn_setsockopt(p->c, IPPROTO_TCP, TCP_NODELAY, &one, 1), -EINVAL);
	assert_int_equal(usmc_conn_setsockopt(p->c, SOL_SOCKET, 12345, &one, sizeof(one)),
			 -ENOPROTOOPT);
	assert_int_equal(usmc_conn_setsockopt(NULL, SOL_SOCKET, SO_KEEPALIVE, &one, 4), -EINVAL);
	assert_int_equal(usmc_conn_setsockopt(p->c, SOL_SOCKET, SO_KEEPALIVE, NULL, 4), -EINVAL);
	assert_int_equal(usmc_conn_getsockopt(p->c, SOL_SOCKET, SO_KEEPALIVE, &v, NULL), -EINVAL);
	/* no TCP socket before usmc_conn_connect() */
	assert_int_equal(usmc_conn_create(p->ctx, &fresh), 0);
	assert_int_equal(usmc_conn_setsockopt(fresh, SOL_SOCKET, SO_KEEPALIVE, &one, 4), -ENOTCONN);
	assert_int_equal(usmc_conn_getsockopt(fresh, SOL_SOCKET, SO_KEEPALIVE, &v, &len),
			 -ENOTCONN);
	usmc_close(fresh);
}

/* A socket bound and listening elsewhere (socket activation) is adopted. */
static void test_listen_fd(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage la;
	socklen_t alen = sizeof(a), llen = sizeof(la);
	struct usmc_listener *l;
	struct usmc_conn *c, *s;
	struct usmc_ctx *ctx;
	int fd = socket(AF_INET, SOCK_STREAM, 0), udp = socket(AF_INET, SOCK_DGRAM, 0);
	int unbound = socket(AF_INET6, SOCK_STREAM, 0), pipefd[2];
	char buf[2];

	(void)state;
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_true(fd >= 0 && udp >= 0 && unbound >= 0);
	assert_int_equal(pipe(pipefd), 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	/* not listening yet, not TCP, not a socket, not a descriptor */
	assert_int_equal(usmc_listen_fd(ctx, fd, 0, 0, &l), -EINVAL);
	assert_int_equal(usmc_listen_fd(ctx, udp, 0, 0, &l), -EINVAL);
	assert_int_equal(usmc_listen_fd(ctx, unbound, 0, 0, &l), -EINVAL);
	assert_int_equal(usmc_listen_fd(ctx, pipefd[0], 0, 0, &l), -ENOTSOCK);
	assert_int_equal(usmc_listen_fd(ctx, -1, 0, 0, &l), -EBADF);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(usmc_listen_fd(ctx, fd, 0, USMC_LISTEN_REUSEPORT, &l), -EINVAL);
	assert_int_equal(usmc_listen_fd(ctx, fd, -1, 0, &l), -EINVAL);
	assert_int_equal(usmc_listen_fd(NULL, fd, 0, 0, &l), -EINVAL);

	assert_int_equal(usmc_listen_fd(ctx, fd, 0, 0, &l), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	assert_int_equal(usmc_listener_addr(l, &la, &llen), 0);
	assert_int_equal(((struct sockaddr_in *)&la)->sin_port, a.sin_port);
	assert_int_equal(usmc_connect(ctx, (struct sockaddr *)&a, sizeof(a), 0, &c), 0);
	assert_int_equal(usmc_accept(l, 0, &s), 0);
	assert_int_equal(usmc_send(c, "hi", 2, 0), 2);
	conn_read_exact(s, buf, 2);
	assert_memory_equal(buf, "hi", 2);
	usmc_close(c);
	usmc_close(s);
	assert_int_equal(usmc_listener_close(l), 0);
	/* the listener closed the adopted socket */
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	assert_int_equal(errno, EBADF);
	close(udp);
	close(unbound);
	close(pipefd[0]);
	close(pipefd[1]);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* usmc_conn_connect_fd() connects the caller's socket: its bind and its
 * options before the connect stay; bad sockets stay the caller's. */
static void test_connect_fd(void **state)
{
	struct pair *p = *state;
	struct sockaddr_in local = {.sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_in got, peer;
	struct usmc_conn_info info;
	socklen_t len = sizeof(local);
	struct usmc_conn *c, *s;
	int fd = socket(AF_INET, SOCK_STREAM, 0), udp = socket(AF_INET, SOCK_DGRAM, 0);
	int fd6 = socket(AF_INET6, SOCK_STREAM, 0), v = 0, pipefd[2];
	char buf[2];

	assert_true(fd >= 0 && udp >= 0 && fd6 >= 0);
	assert_int_equal(pipe(pipefd), 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&local, sizeof(local)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&local, &len), 0);
	assert_int_equal(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int)), 0);
	assert_int_equal(usmc_conn_create(p->ctx, &c), 0);
	/* refused before it takes the descriptor */
	assert_int_equal(usmc_conn_connect_fd(c, udp, (struct sockaddr *)&p->addr, p->alen, 0),
			 -EINVAL);
	assert_int_equal(usmc_conn_connect_fd(c, fd6, (struct sockaddr *)&p->addr, p->alen, 0),
			 -EAFNOSUPPORT);
	assert_int_equal(
		usmc_conn_connect_fd(c, pipefd[0], (struct sockaddr *)&p->addr, p->alen, 0),
		-ENOTSOCK);
	assert_int_equal(usmc_conn_connect_fd(c, -1, (struct sockaddr *)&p->addr, p->alen, 0),
			 -EBADF);
	assert_int_equal(usmc_conn_connect_fd(c, fd, (struct sockaddr *)&p->addr, p->alen, 8),
			 -EINVAL);
	assert_int_equal(fcntl(udp, F_GETFD), 0); /* untouched */
	assert_int_equal(usmc_conn_connect_fd(c, fd, (struct sockaddr *)&p->addr, p->alen, 0), 0);
	assert_int_equal(usmc_accept(p->l, 0, &s), 0);
	/* the server sees the client's bound port; the option stayed */
	assert_int_equal(usmc_conn_info(s, &info), 0);
	memcpy(&peer, &info.peer, sizeof(peer));
	assert_int_equal(peer.sin_port, local.sin_port);
	len = sizeof(v);
	assert_int_equal(usmc_conn_getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	assert_int_equal(v, 1);
	assert_int_equal(usmc_conn_fd(c), fd);
	assert_int_equal(fcntl(fd, F_GETFD), FD_CLOEXEC);
	len = sizeof(got);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&got, &len), 0);
	assert_int_equal(got.sin_port, local.sin_port);
	assert_int_equal(usmc_send(c, "ok", 2, 0), 2);
	conn_read_exact(s, buf, 2);
	assert_memory_equal(buf, "ok", 2);
	/* a connected socket is refused */
	{
		struct usmc_conn *c2;

		assert_int_equal(usmc_conn_create(p->ctx, &c2), 0);
		assert_int_equal(
			usmc_conn_connect_fd(c2, fd, (struct sockaddr *)&p->addr, p->alen, 0),
			-EINVAL);
		usmc_close(c2);
	}
	usmc_close(s);
	usmc_close(c); /* closed the adopted socket */
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	close(udp);
	close(fd6);
	close(pipefd[0]);
	close(pipefd[1]);
}

/* After fork() a child gets USMC_EFORKED from an inherited listener or
 * context at once, instead of blocking on an accept queue that no thread
 * of its own fills. The parent's listener keeps working. @forker: fork(),
 * or _Fork(), which runs no atfork handler (the check must not rely on
 * one). */
static void fork_child_refused(struct pair *p, pid_t (*forker)(void))
{
	int status, res = -1, pfd[2];
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	pid = forker();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct usmc_conn *c;
		struct usmc_listener *l;
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		int bad = 0;

		alarm(10); /* a hang is a failure, not a stuck test */
		bad |= usmc_accept(p->l, 0, &c) != USMC_EFORKED;
		bad |= (usmc_listener_fd(p->l) != USMC_EFORKED) << 1;
		bad |= (usmc_connect(p->ctx, (struct sockaddr *)&p->addr, p->alen, 0, &c) !=
			USMC_EFORKED)
		       << 2;
		bad |= (usmc_listen(p->ctx, (struct sockaddr *)&a, sizeof(a), 8, 0, &l) !=
			USMC_EFORKED)
		       << 3;
		bad |= (usmc_listener_close(p->l) != USMC_EFORKED) << 4;
		bad |= (usmc_ctx_destroy(p->ctx) != USMC_EFORKED) << 5;
		/* the child's copy of a connection: closed here, alive in the parent */
		bad |= (usmc_close(p->s) != 0) << 6;
		/* the answer goes through a pipe and the child ends by SIGKILL: no
		 * exit handlers, and no leak report of the parent's objects when
		 * the test runs under valgrind */
		if (write(pfd[1], &bad, sizeof(bad)) != sizeof(bad))
			_exit(1);
		raise(SIGKILL);
	}
	close(pfd[1]);
	assert_int_equal(read(pfd[0], &res, sizeof(res)), sizeof(res));
	close(pfd[0]);
	assert_int_equal(res, 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	assert_string_equal(usmc_strerror(USMC_EFORKED),
			    "object belongs to the parent process (used after fork)");
	/* the parent's objects are untouched */
	assert_true(usmc_listener_fd(p->l) >= 0);
	assert_int_equal(usmc_send(p->c, "ok", 2, 0), 2);
	{
		char buf[2];

		conn_read_exact(p->s, buf, 2);
		assert_memory_equal(buf, "ok", 2);
	}
}

static void test_fork_child_refused(void **state)
{
	fork_child_refused(*state, fork);
}

static void test_fork_child_refused_no_atfork(void **state)
{
	fork_child_refused(*state, _Fork);
}

/* The *_sized calls fill min(size, sizeof) bytes and zero the rest. */
static void test_sized_structs(void **state)
{
	struct pair *p = *state;
	union {
		struct usmc_conn_info info;
		struct usmc_ctx_stats cs;
		struct usmc_listener_stats ls;
		/* room past the biggest struct for each "newer, larger" case */
		unsigned char b[sizeof(struct usmc_listener_stats) + sizeof(struct usmc_conn_info) +
				sizeof(struct usmc_ctx_stats) + 64];
	} u;
	size_t small = offsetof(struct usmc_conn_info, lgr_id), big;

	/* an older, smaller struct: nothing past its end is written */
	memset(&u, 0xab, sizeof(u));
	assert_int_equal(usmc_conn_info_sized(p->c, &u.info, small), 0);
	assert_int_equal(u.info.mode, USMC_MODE_TCP);
	assert_int_equal(u.info.is_server, 0);
	for (size_t i = small; i < sizeof(u); i++)
		assert_int_equal(u.b[i], 0xab);
	/* a newer, larger struct: the fields the library does not know are 0 */
	big = sizeof(struct usmc_conn_info) + 40;
	memset(&u, 0xab, sizeof(u));
	assert_int_equal(usmc_conn_info_sized(p->s, &u.info, big), 0);
	assert_int_equal(u.info.is_server, 1);
	for (size_t i = sizeof(struct usmc_conn_info); i < big; i++)
		assert_int_equal(u.b[i], 0);
	assert_int_equal(u.b[big], 0xab);

	memset(&u, 0xab, sizeof(u));
	big = sizeof(struct usmc_ctx_stats) + 16;
	assert_int_equal(usmc_ctx_stats_sized(p->ctx, &u.cs, big), 0);
	assert_int_equal(u.cs.open_conns, 2);
	for (size_t i = sizeof(struct usmc_ctx_stats); i < big; i++)
		assert_int_equal(u.b[i], 0);
	memset(&u, 0xab, sizeof(u));
	assert_int_equal(usmc_ctx_stats_sized(p->ctx, &u.cs, sizeof(uint64_t)), 0);
	assert_int_equal(u.cs.connects, 1);
	assert_int_equal(u.b[sizeof(uint64_t)], 0xab);

	memset(&u, 0xab, sizeof(u));
	big = sizeof(struct usmc_listener_stats) + 64;
	assert_int_equal(usmc_listener_stats_sized(p->l, &u.ls, big), 0);
	assert_int_equal(u.ls.accepted, 1);
	for (size_t i = sizeof(struct usmc_listener_stats); i < big; i++)
		assert_int_equal(u.b[i], 0);
	memset(&u, 0xab, sizeof(u));
	small = offsetof(struct usmc_listener_stats, in_handshake);
	assert_int_equal(usmc_listener_stats_sized(p->l, &u.ls, small), 0);
	assert_int_equal(u.ls.fallbacks, 1);
	assert_int_equal(u.b[small], 0xab);

	/* the wrappers pass sizeof; bad arguments */
	assert_int_equal(usmc_conn_info(p->c, &u.info), 0);
	assert_int_equal(usmc_conn_info_sized(p->c, &u.info, 0), -EINVAL);
	assert_int_equal(usmc_conn_info_sized(p->c, NULL, 8), -EINVAL);
	assert_int_equal(usmc_ctx_stats_sized(NULL, &u.cs, sizeof(u.cs)), -EINVAL);
	assert_int_equal(usmc_listener_stats_sized(p->l, NULL, sizeof(u.ls)), -EINVAL);
}

/* Wait until the peer's RST arrived at @c. */
static void wait_reset(struct usmc_conn *c)
{
	struct pollfd pfd = {.fd = usmc_conn_fd(c), .events = POLLIN};

	assert_int_equal(poll(&pfd, 1, 5000), 1);
	assert_true(pfd.revents & (POLLERR | POLLHUP));
}

/* A peer reset: -ECONNRESET once, to the first call that sees it, then
 * -EPIPE to sends (usmc.h usmc_send()). */
static void test_reset_errors(void **state)
{
	struct pair *p = *state;
	struct usmc_conn *c2, *s2;
	char buf[4];

	/* the first send sees it */
	assert_int_equal(usmc_abort(p->s), 0);
	p->s = NULL;
	wait_reset(p->c);
	assert_int_equal(usmc_send(p->c, "x", 1, 0), -ECONNRESET);
	assert_int_equal(usmc_send(p->c, "x", 1, 0), -EPIPE);
	assert_int_equal(usmc_send(p->c, "x", 1, MSG_NOSIGNAL), -EPIPE);

	/* a receive sees it first: sends get -EPIPE */
	assert_int_equal(usmc_connect(p->ctx, (struct sockaddr *)&p->addr, p->alen, 0, &c2), 0);
	assert_int_equal(usmc_accept(p->l, 0, &s2), 0);
	assert_int_equal(usmc_abort(c2), 0);
	wait_reset(s2);
	assert_int_equal(usmc_recv(s2, buf, sizeof(buf), 0), -ECONNRESET);
	assert_int_equal(usmc_send(s2, "x", 1, 0), -EPIPE);
	assert_int_equal(usmc_recv(s2, buf, sizeof(buf), 0), 0);
	usmc_close(s2);

	/* after our own SHUT_WR: -EPIPE */
	assert_int_equal(usmc_connect(p->ctx, (struct sockaddr *)&p->addr, p->alen, 0, &c2), 0);
	assert_int_equal(usmc_accept(p->l, 0, &s2), 0);
	assert_int_equal(usmc_shutdown(c2, SHUT_WR), 0);
	assert_int_equal(usmc_send(c2, "x", 1, 0), -EPIPE);
	usmc_close(c2);
	usmc_close(s2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_send_flags, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_sockopts, pair_setup, pair_teardown),
		cmocka_unit_test(test_listen_fd),
		cmocka_unit_test_setup_teardown(test_connect_fd, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_reset_errors, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_sized_structs, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_fork_child_refused, pair_setup, pair_teardown),
		cmocka_unit_test_setup_teardown(test_fork_child_refused_no_atfork, pair_setup,
						pair_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
