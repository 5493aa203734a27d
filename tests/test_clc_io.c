// SPDX-License-Identifier: MIT
/*
 * clc_io over a loopback TCP pair: one CLC message is read by its length
 * and nothing after it (the bytes behind a DECLINE belong to the
 * application), a message in pieces is waited for, every wait ends at its
 * deadline, and SO_RCVLOWAT is as it was afterwards. clc_io_peeked() is
 * the pure rule they share.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "clc_io.h"
#include "wire_err.h"

#define TRAILER "app data"

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* A connected TCP pair over 127.0.0.1: fds[0] sends, fds[1] reads. */
static int setup(void **state)
{
	static int fds[2];
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 1), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
	fds[0] = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(fds[0], (struct sockaddr *)&a, sizeof(a)), 0);
	fds[1] = accept(lfd, NULL, NULL);
	assert_true(fds[1] >= 0);
	close(lfd);
	*state = fds;
	return 0;
}

static int teardown(void **state)
{
	int *fds = *state;

	close(fds[0]);
	close(fds[1]);
	return 0;
}

/* A DECLINE v2 (44 bytes) in @buf. */
static size_t decline(uint8_t *buf)
{
	int len = clc_decline_build(buf, CLC_DECLINE_V2_LEN, CLC_V2, NULL, 0x03030000, false);

	assert_int_equal(len, CLC_DECLINE_V2_LEN);
	return (size_t)len;
}

static void send_all(int fd, const void *buf, size_t len)
{
	assert_int_equal(send(fd, buf, len, 0), (ssize_t)len);
}

/* What is left on @fd after the message: exactly TRAILER. */
static void assert_trailer_left(int fd)
{
	char rest[sizeof(TRAILER)] = "";

	assert_int_equal(recv(fd, rest, sizeof(rest), MSG_DONTWAIT), sizeof(TRAILER) - 1);
	assert_string_equal(rest, TRAILER);
}

static int rcvlowat(int fd)
{
	int v = 0;
	socklen_t len = sizeof(v);

	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &len), 0);
	return v;
}

static void test_peeked_rule(void **state)
{
	uint8_t buf[CLC_DECLINE_V2_LEN];
	struct clc_hdr hdr;
	size_t len = decline(buf), need = 0;

	(void)state;
	assert_int_equal(clc_io_peeked(buf, -EAGAIN, sizeof(buf), &hdr, &need), -EAGAIN);
	assert_int_equal(need, 1);
	assert_int_equal(clc_io_peeked(buf, 3, sizeof(buf), &hdr, &need), -EAGAIN);
	assert_int_equal(need, CLC_HDR_LEN);
	assert_int_equal(clc_io_peeked(buf, 20, sizeof(buf), &hdr, &need), -EAGAIN);
	assert_int_equal(need, len);
	assert_int_equal(clc_io_peeked(buf, (ssize_t)len, sizeof(buf), &hdr, &need), (int)len);
	assert_int_equal(hdr.type, CLC_DECLINE);
	/* longer than the reader's buffer: an error, not a wait */
	assert_int_equal(clc_io_peeked(buf, 20, 20, &hdr, &need), WIRE_E_LENGTH);
	assert_int_equal(clc_io_peeked(buf, -ECONNRESET, sizeof(buf), &hdr, &need), -ECONNRESET);
	buf[0] = 'G'; /* not a CLC header */
	assert_true(wire_is_err(clc_io_peeked(buf, (ssize_t)len, sizeof(buf), &hdr, &need)));
}

/* The message and application data in one segment: only the message. */
static void test_recv_leaves_trailer(void **state)
{
	int *fds = *state;
	uint8_t msg[CLC_DECLINE_V2_LEN + sizeof(TRAILER)], buf[CLC_MAX_LEN];
	size_t len = decline(msg);
	struct clc_hdr hdr;

	memcpy(msg + len, TRAILER, sizeof(TRAILER) - 1);
	send_all(fds[0], msg, len + sizeof(TRAILER) - 1);
	assert_int_equal(clc_io_recv(fds[1], buf, sizeof(buf), 1000, 0, &hdr), (int)len);
	assert_int_equal(hdr.type, CLC_DECLINE);
	assert_memory_equal(buf, msg, len);
	assert_trailer_left(fds[1]);
}

/* clc_io_wait() consumes nothing; its length lets clc_io_recv() take the
 * message at once, and nothing after it. */
static void test_wait_then_take(void **state)
{
	int *fds = *state;
	uint8_t msg[CLC_DECLINE_V2_LEN + sizeof(TRAILER)], buf[CLC_MAX_LEN];
	size_t len = decline(msg);
	struct clc_hdr hdr;
	int waiting;

	memcpy(msg + len, TRAILER, sizeof(TRAILER) - 1);
	send_all(fds[0], msg, len + sizeof(TRAILER) - 1);
	waiting = clc_io_wait(fds[1], sizeof(buf), 1000);
	assert_int_equal(waiting, (int)len);
	assert_int_equal(clc_io_ready(fds[1], sizeof(buf), &(size_t){0}), (int)len);
	assert_int_equal(clc_io_recv(fds[1], buf, sizeof(buf), 0, (size_t)waiting, &hdr), (int)len);
	assert_memory_equal(buf, msg, len);
	assert_trailer_left(fds[1]);
}

struct late {
	int fd;
	const uint8_t *buf;
	size_t len;
};

static void *send_late(void *arg)
{
	struct late *l = arg;

	usleep(100 * 1000);
	send_all(l->fd, l->buf, l->len);
	return NULL;
}

/* A message in two pieces: the reader waits for the rest (SO_RCVLOWAT),
 * takes only the message, and leaves SO_RCVLOWAT as it was. */
static void test_recv_in_pieces(void **state)
{
	int *fds = *state;
	uint8_t msg[CLC_DECLINE_V2_LEN + sizeof(TRAILER)], buf[CLC_MAX_LEN];
	size_t len = decline(msg);
	struct late rest = {.fd = fds[0], .buf = msg + 10, .len = len - 10 + sizeof(TRAILER) - 1};
	struct clc_hdr hdr;
	size_t need = 0;
	pthread_t t;
	long t0;

	memcpy(msg + len, TRAILER, sizeof(TRAILER) - 1);
	send_all(fds[0], msg, 10);
	usleep(20 * 1000);
	assert_int_equal(clc_io_ready(fds[1], sizeof(buf), &need), -EAGAIN);
	assert_int_equal(need, len);
	assert_int_equal(pthread_create(&t, NULL, send_late, &rest), 0);
	t0 = now_ms();
	assert_int_equal(clc_io_recv(fds[1], buf, sizeof(buf), 5000, 0, &hdr), (int)len);
	assert_true(now_ms() - t0 < 4000);
	pthread_join(t, NULL);
	assert_memory_equal(buf, msg, len);
	assert_int_equal(rcvlowat(fds[1]), 1);
	assert_trailer_left(fds[1]);
}

/* Part of a message and then silence: the wait ends at its deadline with
 * nothing consumed and SO_RCVLOWAT as it was. */
static void test_partial_times_out(void **state)
{
	int *fds = *state;
	uint8_t msg[CLC_DECLINE_V2_LEN], buf[CLC_MAX_LEN];
	struct clc_hdr hdr;
	long t0;

	decline(msg);
	send_all(fds[0], msg, 20);
	t0 = now_ms();
	assert_int_equal(clc_io_recv(fds[1], buf, sizeof(buf), 150, 0, &hdr), -ETIMEDOUT);
	assert_true(now_ms() - t0 >= 140);
	assert_true(now_ms() - t0 < 2000);
	assert_int_equal(clc_io_wait(fds[1], sizeof(buf), 50), -ETIMEDOUT);
	assert_int_equal(rcvlowat(fds[1]), 1);
	assert_int_equal(recv(fds[1], buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT), 20);
}

/* A deadline already past still looks once: a message there is taken. */
static void test_past_deadline_looks_once(void **state)
{
	int *fds = *state;
	uint8_t msg[CLC_DECLINE_V2_LEN], buf[CLC_MAX_LEN];
	size_t len = decline(msg);
	struct clc_hdr hdr;

	assert_int_equal(clc_io_recv(fds[1], buf, sizeof(buf), 0, 0, &hdr), -ETIMEDOUT);
	send_all(fds[0], msg, len);
	usleep(20 * 1000);
	assert_int_equal(clc_io_recv(fds[1], buf, sizeof(buf), 0, 0, &hdr), (int)len);
}

/* EOF inside a message is a reset, not a wait to the deadline. */
static void test_eof_inside(void **state)
{
	int *fds = *state;
	uint8_t msg[CLC_DECLINE_V2_LEN], buf[CLC_MAX_LEN];
	struct clc_hdr hdr;
	long t0;

	decline(msg);
	send_all(fds[0], msg, 20);
	shutdown(fds[0], SHUT_WR);
	t0 = now_ms();
	assert_int_equal(clc_io_recv(fds[1], buf, sizeof(buf), 5000, 0, &hdr), -ECONNRESET);
	assert_true(now_ms() - t0 < 2000);
}

/* clc_io_read(): a message in pieces builds up in the carry-over buffer,
 * one recv() per call, and nothing after it is read. */
static void test_read_carry_over(void **state)
{
	int *fds = *state;
	uint8_t msg[CLC_DECLINE_V2_LEN + sizeof(TRAILER)], buf[CLC_ACCEPT_MAX_LEN];
	size_t len = decline(msg), have = 0;
	struct clc_hdr hdr;

	memcpy(msg + len, TRAILER, sizeof(TRAILER) - 1);
	assert_int_equal(clc_io_read(fds[1], buf, sizeof(buf), &have, CLC_DECLINE_V1_LEN, &hdr),
			 -EAGAIN);
	assert_int_equal(have, 0);
	send_all(fds[0], msg, 5); /* not even a header */
	usleep(20000);
	assert_int_equal(clc_io_read(fds[1], buf, sizeof(buf), &have, CLC_DECLINE_V1_LEN, &hdr),
			 -EAGAIN);
	assert_int_equal(have, 5);
	send_all(fds[0], msg + 5, 30); /* the header and more, not all */
	usleep(20000);
	assert_int_equal(clc_io_read(fds[1], buf, sizeof(buf), &have, CLC_DECLINE_V1_LEN, &hdr),
			 -EAGAIN);
	assert_int_equal(have, 35);
	/* the end, with the application's bytes right behind it */
	send_all(fds[0], msg + 35, len - 35 + sizeof(TRAILER) - 1);
	usleep(20000);
	assert_int_equal(clc_io_read(fds[1], buf, sizeof(buf), &have, CLC_DECLINE_V1_LEN, &hdr),
			 (int)len);
	assert_int_equal(hdr.type, CLC_DECLINE);
	assert_memory_equal(buf, msg, len);
	assert_trailer_left(fds[1]);
}

/* A whole message at once; a v1 DECLINE as long as @min, data after it. */
static void test_read_whole(void **state)
{
	int *fds = *state;
	uint8_t msg[CLC_DECLINE_V2_LEN + sizeof(TRAILER)], buf[CLC_ACCEPT_MAX_LEN];
	size_t have = 0;
	struct clc_hdr hdr;
	int len = clc_decline_build(msg, sizeof(msg), CLC_V1, NULL, 0x03030000, false);

	assert_int_equal(len, CLC_DECLINE_V1_LEN);
	memcpy(msg + len, TRAILER, sizeof(TRAILER) - 1);
	send_all(fds[0], msg, (size_t)len + sizeof(TRAILER) - 1);
	usleep(20000);
	assert_int_equal(clc_io_read(fds[1], buf, sizeof(buf), &have, CLC_DECLINE_V1_LEN, &hdr),
			 len);
	assert_int_equal(hdr.type, CLC_DECLINE);
	assert_trailer_left(fds[1]);
}

/* EOF inside, and a header that is no CLC header. */
static void test_read_errors(void **state)
{
	int *fds = *state;
	uint8_t msg[CLC_DECLINE_V2_LEN], buf[CLC_ACCEPT_MAX_LEN];
	size_t have = 0;
	struct clc_hdr hdr;

	assert_int_equal(clc_io_read(fds[1], buf, sizeof(buf), &have, 4, &hdr), -EINVAL);
	decline(msg);
	msg[0] = 'G';
	send_all(fds[0], msg, CLC_HDR_LEN);
	usleep(20000);
	assert_true(wire_is_err(clc_io_read(fds[1], buf, sizeof(buf), &have, CLC_HDR_LEN, &hdr)));
	have = 0;
	shutdown(fds[0], SHUT_WR);
	assert_int_equal(clc_io_read(fds[1], buf, sizeof(buf), &have, CLC_DECLINE_V1_LEN, &hdr),
			 -ECONNRESET);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_peeked_rule),
		cmocka_unit_test_setup_teardown(test_recv_leaves_trailer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_then_take, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recv_in_pieces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_past_deadline_looks_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eof_inside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_carry_over, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_whole, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_errors, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
