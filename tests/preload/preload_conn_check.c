// SPDX-License-Identifier: MIT
/*
 * A plain-socket program (it links nothing of libusmc) that checks, under
 * usmc_run on both ends, what the socket API promises about one
 * connection (docs/preload.md):
 *
 *   rdhup-server ADDR PORT / rdhup-client ADDR PORT BIND
 *     the peer's shutdown(SHUT_WR) arrives as EPOLLIN | EPOLLRDHUP (edge:
 *     once; level: every time; poll(): POLLRDHUP) with a readable EOF,
 *     nothing of it before; a half-closed connection still carries data
 *     the other way; our own SHUT_WR after the peer's gives POLLHUP
 *   fork-server ADDR PORT MODE / fork-client ADDR PORT MODE BIND
 *     children of fork() that inherit the connection (one closes it, one
 *     exits with it open, one is killed) leave the parent's stream intact:
 *     4 MiB echoed and checked afterwards. MODE smcr: a child's data calls,
 *     shutdown and options on the inherited SMC-R connection fail with
 *     ENOTCONN, and raw system calls find a dead socket (EOF, EPIPE);
 *     MODE tcp (a plain socket): the child only closes its copy
 *   evloop-server ADDR PORT ROUNDS / evloop-client ADDR PORT BIND ROUNDS
 *     ROUNDS round trips of a 64-byte request and reply (every byte its
 *     round and offset, checked); the server waits in epoll_wait()
 *     (edge-triggered), its registration deleted and added again every
 *     other round and its epoll set a new one twice every 100 (closed and
 *     made again, or dup2()ed over), the client
 *     alternately in epoll_wait() and in a blocking read() of its
 *     epoll-registered descriptor. Each end's
 *     link group threads (usmc-lgr/...) must have woken fewer than
 *     ROUNDS / 4 times meanwhile: under usmc_run the program's own waits
 *     run the SMC-R completions (docs/preload.md), where the library's
 *     thread would wake for every message
 *
 * Over loopback without a device every connection is plain TCP, so the
 * same checks hold for the kernel's TCP; in the soft-RoCE guest they hold
 * for SMC-R. Exit 0 and one "ok" line, or a "FAIL" line and exit 1.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_S     60 /* the whole program */
#define WAIT_MS	       10000
#define FIN_WAKEUPS_MS 100 /* one FIN's two wake-ups, however late the second */

static const char *prog = "?";

static void fail(const char *fmt, ...)
{
	va_list ap;
	int err = errno;

	fprintf(stderr, "FAIL %s [%d]: ", prog, (int)getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (errno %s)\n", strerrorname_np(err) ? strerrorname_np(err) : "0");
	exit(1);
}

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		fail("bad address %s", ip);
	return a;
}

static int accept_one(const char *ip, int port)
{
	struct sockaddr_in a = addr_of(ip, port);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), c;

	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4))
		fail("listen on %s:%d", ip, port);
	printf("listening\n");
	fflush(stdout);
	c = accept(l, NULL, NULL);
	if (c < 0)
		fail("accept");
	close(l);
	return c;
}

/* The client retries while the server is not listening yet. */
static int connect_to(const char *ip, int port, const char *bind_ip)
{
	struct sockaddr_in a = addr_of(ip, port), b = addr_of(bind_ip, 0);

	for (int i = 0; i < 100; i++) {
		int c = socket(AF_INET, SOCK_STREAM, 0);

		if (c < 0 || bind(c, (struct sockaddr *)&b, sizeof(b)))
			fail("socket/bind %s", bind_ip);
		if (connect(c, (struct sockaddr *)&a, sizeof(a)) == 0)
			return c;
		if (errno != ECONNREFUSED)
			fail("connect %s:%d", ip, port);
		close(c);
		usleep(100 * 1000);
	}
	fail("connect %s:%d: refused for 10 s", ip, port);
	return -1;
}

static void write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail("write");
		p += n;
		len -= (size_t)n;
	}
}

/* Exactly @len bytes from a blocking descriptor. */
static void read_exact(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail("read: %zd with %zu bytes to go", n, len);
		p += n;
		len -= (size_t)n;
	}
}

static short poll_now(int fd, short events, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = events};
	int n = poll(&p, 1, timeout_ms);

	if (n < 0)
		fail("poll");
	return n ? p.revents : 0;
}

static void set_rcvtimeo(int fd)
{
	struct timeval tv = {.tv_sec = WAIT_MS / 1000};

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)))
		fail("SO_RCVTIMEO");
}

/* ---- EPOLLRDHUP ------------------------------------------------------------------ */

static int epoll_on(int fd, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.fd = fd};
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
		fail("epoll_ctl");
	return ep;
}

/* The events of one epoll_wait(), 0 after @timeout_ms. */
static uint32_t ep_wait(int ep, int timeout_ms)
{
	struct epoll_event ev;
	int n;

	do
		n = epoll_wait(ep, &ev, 1, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		fail("epoll_wait");
	return n ? ev.events : 0;
}

static int rdhup_server(const char *ip, int port)
{
	int c = accept_one(ip, port), et, lt;
	char buf[16];
	uint32_t ev;
	short re;

	set_rcvtimeo(c);
	et = epoll_on(c, EPOLLIN | EPOLLRDHUP | EPOLLET);
	lt = epoll_on(c, EPOLLIN | EPOLLRDHUP);
	ev = ep_wait(lt, WAIT_MS);
	if (!(ev & EPOLLIN) || (ev & EPOLLRDHUP))
		fail("first data: epoll events %#x, want EPOLLIN without EPOLLRDHUP", ev);
	read_exact(c, buf, 5);
	if (memcmp(buf, "hello", 5))
		fail("got %.5s, want hello", buf);
	re = poll_now(c, POLLIN | POLLRDHUP, 0);
	if (re)
		fail("after the data: poll revents %#x, want none", re);
	(void)ep_wait(et, 0); /* the data's edge */
	write_all(c, "ack", 3);
	/* the client shuts its write side down now */
	ev = ep_wait(et, WAIT_MS);
	if ((ev & (EPOLLIN | EPOLLRDHUP)) != (EPOLLIN | EPOLLRDHUP) || (ev & EPOLLHUP))
		fail("peer's SHUT_WR: edge-triggered events %#x, want EPOLLIN|EPOLLRDHUP", ev);
	/*
	 * The kernel wakes a TCP socket's waiters twice for one FIN (tcp_fin()'s
	 * sk_state_change(), then tcp_data_queue()'s sk_data_ready()): a waiter
	 * that took the first wake-up before the second ran sees a second edge.
	 * Let it come now; after the EOF is read none may come.
	 */
	(void)ep_wait(et, FIN_WAKEUPS_MS);
	ev = ep_wait(lt, 0);
	if ((ev & (EPOLLIN | EPOLLRDHUP)) != (EPOLLIN | EPOLLRDHUP))
		fail("peer's SHUT_WR: level-triggered events %#x", ev);
	if (read(c, buf, sizeof(buf)) != 0)
		fail("peer's SHUT_WR: read does not give EOF");
	ev = ep_wait(lt, 0);
	if ((ev & (EPOLLIN | EPOLLRDHUP)) != (EPOLLIN | EPOLLRDHUP))
		fail("after EOF: level-triggered events %#x, want them again", ev);
	ev = ep_wait(et, 200);
	if (ev)
		fail("after EOF: edge-triggered events %#x again, want none", ev);
	re = poll_now(c, POLLIN | POLLRDHUP | POLLOUT, 0);
	if ((re & (POLLIN | POLLRDHUP | POLLOUT)) != (POLLIN | POLLRDHUP | POLLOUT) ||
	    (re & POLLHUP))
		fail("half closed: poll revents %#x, want POLLIN|POLLRDHUP|POLLOUT", re);
	write_all(c, "bye", 3); /* the half-closed connection still carries data */
	if (shutdown(c, SHUT_WR))
		fail("shutdown");
	re = poll_now(c, POLLIN | POLLRDHUP, WAIT_MS);
	if (!(re & POLLHUP))
		fail("both sides shut: poll revents %#x, want POLLHUP", re);
	close(c);
	printf("ok: rdhup-server: EPOLLIN|EPOLLRDHUP with EOF (edge once, level again), "
	       "POLLRDHUP, data on the half-closed connection, POLLHUP\n");
	return 0;
}

static int rdhup_client(const char *ip, int port, const char *bind_ip)
{
	int c = connect_to(ip, port, bind_ip);
	char buf[16];
	size_t got = 0;
	short re;

	set_rcvtimeo(c);
	write_all(c, "hello", 5);
	read_exact(c, buf, 3);
	if (memcmp(buf, "ack", 3))
		fail("got %.3s, want ack", buf);
	re = poll_now(c, POLLIN | POLLRDHUP, 0);
	if (re & (POLLIN | POLLRDHUP | POLLHUP))
		fail("before any shutdown: poll revents %#x", re);
	if (shutdown(c, SHUT_WR))
		fail("shutdown");
	/* "bye", then the server's SHUT_WR: POLLRDHUP, and POLLHUP (ours is shut too) */
	for (;;) {
		ssize_t n;

		re = poll_now(c, POLLIN | POLLRDHUP, WAIT_MS);
		if (!re)
			fail("no POLLRDHUP within %d ms (%zu bytes read)", WAIT_MS, got);
		if (!(re & POLLIN))
			fail("poll revents %#x without POLLIN", re);
		if (re & POLLRDHUP)
			break;
		n = read(c, buf + got, sizeof(buf) - got);
		if (n <= 0)
			fail("read %zd before POLLRDHUP", n);
		got += (size_t)n;
	}
	if ((re & (POLLIN | POLLRDHUP | POLLHUP)) != (POLLIN | POLLRDHUP | POLLHUP))
		fail("server's SHUT_WR after ours: poll revents %#x, want POLLIN|POLLRDHUP|POLLHUP",
		     re);
	for (ssize_t n; (n = read(c, buf + got, sizeof(buf) - got)) != 0; got += (size_t)n)
		if (n < 0)
			fail("read after POLLRDHUP");
	if (got != 3 || memcmp(buf, "bye", 3))
		fail("got %zu bytes (%.*s), want bye", got, (int)got, buf);
	close(c);
	printf("ok: rdhup-client: POLLRDHUP|POLLHUP with the data before it and EOF\n");
	return 0;
}

/* ---- fork --------------------------------------------------------------------------- */

#define ECHO_TOTAL (4u << 20)
#define ECHO_CHUNK (64u << 10)

/* In a child: the inherited SMC-R connection is the parent's. */
static void child_calls_fail(int c)
{
	char b = 'X';
	int v;
	socklen_t len = sizeof(v);

	prog = "fork child";
	if (write(c, &b, 1) != -1 || errno != ENOTCONN)
		fail("write on the inherited connection");
	if (read(c, &b, 1) != -1 || errno != ENOTCONN)
		fail("read on the inherited connection");
	if (recv(c, &b, 1, MSG_DONTWAIT | MSG_PEEK) != -1 || errno != ENOTCONN)
		fail("recv on the inherited connection");
	if (send(c, &b, 1, MSG_NOSIGNAL) != -1 || errno != ENOTCONN)
		fail("send on the inherited connection");
	if (shutdown(c, SHUT_RDWR) != -1 || errno != ENOTCONN)
		fail("shutdown of the inherited connection");
	if (getsockopt(c, SOL_SOCKET, SO_ERROR, &v, &len) != -1 || errno != ENOTCONN)
		fail("getsockopt of the inherited connection");
	/* what bypasses the preload (a program exec'd with it) finds a dead
	 * socket, not the parent's readiness descriptor */
	if (syscall(SYS_read, c, &b, 1) != 0)
		fail("a raw read of the inherited descriptor: want EOF");
	if (syscall(SYS_write, c, &b, 1) != -1 || errno != EPIPE)
		fail("a raw write to the inherited descriptor: want EPIPE");
}

/* Three children inherit @c: one checks its calls and closes its copy,
 * one exits with it open, one is killed while it sleeps. */
static void fork_children(int c, bool smcr)
{
	pid_t kids[3];
	int st;

	for (int i = 0; i < 3; i++) {
		kids[i] = fork();
		if (kids[i] < 0)
			fail("fork");
		if (kids[i] == 0) {
			if (i == 0) {
				if (smcr)
					child_calls_fail(c);
				if (close(c))
					fail("close in the child");
			} else if (i == 2) {
				pause();
			}
			exit(0); /* atexit handlers run, as a program's would */
		}
	}
	if (waitpid(kids[0], &st, 0) != kids[0] || !WIFEXITED(st) || WEXITSTATUS(st))
		fail("the closing child: status %#x", st);
	if (waitpid(kids[1], &st, 0) != kids[1] || !WIFEXITED(st) || WEXITSTATUS(st))
		fail("the exiting child: status %#x", st);
	kill(kids[2], SIGKILL);
	if (waitpid(kids[2], &st, 0) != kids[2] || !WIFSIGNALED(st))
		fail("the killed child: status %#x", st);
}

static bool mode_smcr(const char *mode)
{
	if (strcmp(mode, "smcr") && strcmp(mode, "tcp"))
		fail("MODE is smcr or tcp, not %s", mode);
	return !strcmp(mode, "smcr");
}

/* Echo until EOF, after children inherited the accepted connection. */
static int fork_server(const char *ip, int port, const char *mode)
{
	int c = accept_one(ip, port);
	static char buf[ECHO_CHUNK];
	size_t total = 0;
	ssize_t n;

	fork_children(c, mode_smcr(mode));
	while ((n = read(c, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			fail("echo read");
		write_all(c, buf, (size_t)n);
		total += (size_t)n;
	}
	close(c);
	if (total != ECHO_TOTAL)
		fail("echoed %zu bytes, want %u", total, ECHO_TOTAL);
	printf("ok: fork-server: 3 children inherited the accepted connection, %zu bytes echoed "
	       "afterwards\n",
	       total);
	return 0;
}

static int fork_client(const char *ip, int port, const char *mode, const char *bind_ip)
{
	int c = connect_to(ip, port, bind_ip);
	static unsigned char out[ECHO_CHUNK], in[ECHO_CHUNK];
	unsigned int seed = 7;

	set_rcvtimeo(c);
	fork_children(c, mode_smcr(mode));
	for (size_t done = 0; done < ECHO_TOTAL; done += ECHO_CHUNK) {
		for (size_t i = 0; i < ECHO_CHUNK; i++)
			out[i] = (unsigned char)(rand_r(&seed) >> 7);
		write_all(c, out, ECHO_CHUNK);
		read_exact(c, in, ECHO_CHUNK);
		if (memcmp(in, out, ECHO_CHUNK))
			fail("echo differs in the chunk at %zu", done);
	}
	if (shutdown(c, SHUT_WR) || read(c, in, 1) != 0)
		fail("EOF after the echo");
	close(c);
	printf("ok: fork-client: 3 children inherited the connection, %u bytes echoed and "
	       "checked afterwards\n",
	       ECHO_TOTAL);
	return 0;
}

/* ---- who runs the completions: the program's waits -------------------------------- */

#define EVLOOP_MSG 64

/* The voluntary context switches of this process's link group threads
 * (usmc-lgr/ID): how often they slept and were woken. */
static unsigned long lgr_thread_switches(void)
{
	unsigned long sum = 0;
	char path[300], line[128]; /* a d_name is 255 bytes at most */
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	if (!d)
		fail("/proc/self/task");
	while ((e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue; /* gone meanwhile */
		line[0] = '\0';
		if (!fgets(line, sizeof(line), f) || strncmp(line, "usmc-lgr/", 9)) {
			fclose(f);
			continue;
		}
		fclose(f);
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f)) {
			unsigned long v;

			if (sscanf(line, "voluntary_ctxt_switches: %lu", &v) == 1)
				sum += v;
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	return sum;
}

static void evloop_msg(char *m, int round)
{
	for (int i = 0; i < EVLOOP_MSG; i++)
		m[i] = (char)(round * 31 + i);
}

static void evloop_check(const char *m, int round, const char *what)
{
	char want[EVLOOP_MSG];

	evloop_msg(want, round);
	if (memcmp(m, want, EVLOOP_MSG))
		fail("%s of round %d differs", what, round);
}

/* The whole message of @round, waiting in epoll_wait() on @ep (edge-
 * triggered: read until EAGAIN) or, with @ep < 0, in a blocking read. */
static void evloop_read(int fd, int ep, char *m, int round, const char *what)
{
	size_t got = 0;

	while (got < EVLOOP_MSG) {
		ssize_t n = recv(fd, m + got, EVLOOP_MSG - got, ep >= 0 ? MSG_DONTWAIT : 0);

		if (n > 0) {
			got += (size_t)n;
		} else if (n < 0 && errno == EAGAIN && ep >= 0) {
			if (!(ep_wait(ep, WAIT_MS) & EPOLLIN))
				fail("round %d: no EPOLLIN in %d ms", round, WAIT_MS);
		} else {
			fail("round %d: read %zd", round, n);
		}
	}
	evloop_check(m, round, what);
}

/* How the server's registration changes between requests, as event loops
 * change theirs: every other round deleted and added again (redis's does
 * it at every reply), and twice every EVLOOP_NEW_SET rounds a new epoll
 * set in place of the old one, with the old number: the old one closed
 * without a delete and a new one made, or a new empty one dup2()ed onto
 * it. Each set must still run the completions. */
#define EVLOOP_NEW_SET 100

static int evloop_reregister(int fd, int ep, int round)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = fd};

	if (round % EVLOOP_NEW_SET == EVLOOP_NEW_SET / 2) {
		close(ep);
		return epoll_on(fd, EPOLLIN | EPOLLET);
	}
	if (round % EVLOOP_NEW_SET == EVLOOP_NEW_SET * 3 / 4) {
		int empty = epoll_create1(EPOLL_CLOEXEC);

		if (empty < 0 || dup2(empty, ep) != ep || close(empty) ||
		    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
			fail("round %d: a new set by dup2()", round);
		return ep;
	}
	if (round % 2 &&
	    (epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)))
		fail("round %d: epoll_ctl", round);
	return ep;
}

/* The round trips; the switches of the link group threads after the
 * first (its connection's setup may still have had the thread run one). */
static unsigned long evloop_rounds(int fd, bool server, int rounds)
{
	int ep = epoll_on(fd, EPOLLIN | EPOLLET);
	unsigned long before = 0;
	char m[EVLOOP_MSG];

	for (int r = 0; r < rounds; r++) {
		if (r == 1)
			before = lgr_thread_switches();
		if (server) {
			ep = evloop_reregister(fd, ep, r);
			evloop_read(fd, ep, m, r, "request");
			evloop_msg(m, r + rounds);
			write_all(fd, m, EVLOOP_MSG);
		} else {
			evloop_msg(m, r);
			write_all(fd, m, EVLOOP_MSG);
			evloop_read(fd, r % 2 ? -1 : ep, m, r + rounds, "reply");
		}
	}
	close(ep);
	return lgr_thread_switches() - before;
}

static int evloop_end(int c, bool server, int rounds)
{
	unsigned long sw;
	char b;

	if (rounds < 8)
		fail("ROUNDS %d: 8 at least", rounds);
	sw = evloop_rounds(c, server, rounds);
	if (shutdown(c, SHUT_WR) || read(c, &b, 1) != 0)
		fail("EOF after the round trips");
	close(c);
	if (sw >= (unsigned long)rounds / 4)
		fail("the link group threads woke %lu times in %d round trips", sw, rounds);
	printf("ok: %s: %d round trips, the link group threads woke %lu times\n",
	       server ? "evloop-server" : "evloop-client", rounds, sw);
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	prog = cmd;
	alarm(DEADLINE_S);
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(cmd, "rdhup-server") && argc == 4)
		return rdhup_server(argv[2], atoi(argv[3]));
	if (!strcmp(cmd, "rdhup-client") && argc == 5)
		return rdhup_client(argv[2], atoi(argv[3]), argv[4]);
	if (!strcmp(cmd, "fork-server") && argc == 5)
		return fork_server(argv[2], atoi(argv[3]), argv[4]);
	if (!strcmp(cmd, "fork-client") && argc == 6)
		return fork_client(argv[2], atoi(argv[3]), argv[4], argv[5]);
	if (!strcmp(cmd, "evloop-server") && argc == 5)
		return evloop_end(accept_one(argv[2], atoi(argv[3])), true, atoi(argv[4]));
	if (!strcmp(cmd, "evloop-client") && argc == 6)
		return evloop_end(connect_to(argv[2], atoi(argv[3]), argv[4]), false,
				  atoi(argv[5]));
	fprintf(stderr,
		"usage: %s rdhup-server ADDR PORT | rdhup-client ADDR PORT BIND |\n"
		"  fork-server ADDR PORT smcr|tcp | fork-client ADDR PORT smcr|tcp BIND |\n"
		"  evloop-server ADDR PORT ROUNDS | evloop-client ADDR PORT BIND ROUNDS\n",
		argv[0]);
	return 2;
}
