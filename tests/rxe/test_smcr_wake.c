// SPDX-License-Identifier: MIT
/*
 * What must wake a thread that waits on an SMC-R connection, one scenario
 * per run (two usmc ends on the guest's two hosts):
 *
 *   killed_poll      a usmc server reads a usmc client's stream, waiting in
 *                    poll() on usmc_conn_fd() before each receive; the
 *                    client process is SIGKILLed: the server's receive
 *                    fails within KILLED_MAX_S (the peer's TCP hang-up, the
 *                    LLC barrier behind it unanswered: about 2 s)
 *   killed_busypoll  the same with USMC_OPT_BUSY_POLL on both ends: the
 *                    readiness descriptor keeps the token with the server's
 *                    progress thread, which busy-polls; it must still read
 *                    the hang-up (not wait ~30 s for TEST_LINK)
 *   etedge           an event loop on EPOLLET that reads one small buffer
 *                    per edge: data that comes after a read that did not
 *                    drain gives a new edge, as TCP's does (an application
 *                    written for TCP hangs otherwise)
 *   cancel           a thread blocked in usmc_recv() is cancelled: it ends
 *                    within CANCEL_JOIN_MS and leaves nothing behind: the
 *                    other connection of its link group still receives, and
 *                    so does its own
 *   copyunlocked     a receive whose copy into the user's buffer is stopped
 *                    midway (the buffer's page is a userfaultfd's, not yet
 *                    there): the connection's lock is free meanwhile, so a
 *                    send on it goes through, and the link group's dispatch,
 *                    which takes that lock, would not wait for the copy;
 *                    the same for a send whose copy out of the user's
 *                    buffer is stopped
 *
 * Every scenario requires SMC-R: a TCP fallback fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "smcr_common.h"

#define KILLED_MAX_S	5.0   /* a killed peer seen within (test_smcr_killed's bound) */
#define KILLED_STREAM_S 1.5   /* the stream runs this long first: its TCP socket is watched */
#define KILLED_POLL_MS	60000 /* one poll() on the readiness descriptor at most */
#define KILLED_CHUNK	65536

/* A context with busy-polling on or off. */
static struct usmc_ctx *ctx_busy(bool busy)
{
	struct usmc_ctx *ctx;

	CHECK(!usmc_ctx_create(&ctx), "ctx");
	CHECK(!usmc_ctx_setopt(ctx, USMC_OPT_BUSY_POLL, busy), "busy-poll option");
	return ctx;
}

/* The client process: connect, stream until killed. */
static void __attribute__((noreturn)) killed_client(const struct sockaddr_in *srv, bool busy)
{
	static uint8_t buf[KILLED_CHUNK];
	struct usmc_ctx *ctx = ctx_busy(busy);
	struct usmc_conn *c;
	int rc;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rc = usmc_connect(ctx, (const struct sockaddr *)srv, sizeof(*srv), 0, &c);
	CHECK(!rc, "client connect: %s", usmc_strerror(rc));
	for (;;)
		send_all(c, buf, sizeof(buf));
}

/* One receive, after poll() on the readiness descriptor said readable. */
static ssize_t poll_then_recv(struct usmc_conn *c, int fd, uint8_t *buf, size_t len)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t n;

	while ((n = usmc_recv(c, buf, len, MSG_DONTWAIT)) == -EAGAIN) {
		int r = poll(&p, 1, KILLED_POLL_MS);

		CHECK(r == 1, "poll on the readiness descriptor: %d after %d ms", r,
		      KILLED_POLL_MS);
	}
	return n;
}

static void run_killed(bool busy)
{
	static uint8_t buf[KILLED_CHUNK];
	struct usmc_ctx *cs = ctx_busy(busy);
	struct sockaddr_in srv;
	struct usmc_listener *lst = listen_b(cs, 4, &srv);
	struct usmc_conn *s;
	uint64_t got = 0;
	double t0, t_kill;
	ssize_t n;
	pid_t pid;
	int fd, rc;

	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0)
		killed_client(&srv, busy);
	rc = usmc_accept(lst, 0, &s);
	CHECK(!rc, "accept: %s", usmc_strerror(rc));
	expect_smcr(s, "server");
	printf("accepted over SMC-R\n");
	fd = usmc_conn_fd(s);
	CHECK(fd >= 0, "usmc_conn_fd: %s", usmc_strerror(fd));
	for (t0 = mono_s(); mono_s() - t0 < KILLED_STREAM_S;) {
		n = poll_then_recv(s, fd, buf, sizeof(buf));
		CHECK(n > 0, "the stream ended early: %s", n ? usmc_strerror((int)n) : "EOF");
		got += (uint64_t)n;
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	t_kill = mono_s();
	printf("client killed after %.1f MiB\n", (double)got / (1 << 20));
	while ((n = poll_then_recv(s, fd, buf, sizeof(buf))) > 0)
		got += (uint64_t)n;
	printf("busy-poll %s: %.1f MiB read, then %s %.2f s after the kill\n", busy ? "on" : "off",
	       (double)got / (1 << 20), n ? usmc_strerror((int)n) : "EOF", mono_s() - t_kill);
	CHECK(n < 0, "EOF from a killed peer: an error expected");
	CHECK(mono_s() - t_kill < KILLED_MAX_S, "the killed peer was seen after %.1f s",
	      mono_s() - t_kill);
	CHECK(!usmc_close(s), "close");
	CHECK(!usmc_listener_close(lst), "listener close");
	printf("closed; destroying the context\n");
	CHECK(!usmc_ctx_destroy(cs), "ctx destroy");
}

/* ---- edge-triggered readiness ---- */

#define ET_ROUNDS  20
#define ET_MSG	   100 /* bytes the client sends per round */
#define ET_READ	   10  /* bytes the server reads per edge: never drains */
#define ET_EDGE_MS 2000

/* A client and a server connection of one context pair, SMC-R. */
static void pair_connect(struct usmc_ctx **cs, struct usmc_ctx **cc, struct usmc_listener **lst,
			 struct usmc_conn **c, struct usmc_conn **s)
{
	struct sockaddr_in srv;
	int rc;

	CHECK(!usmc_ctx_create(cs) && !usmc_ctx_create(cc), "ctx");
	*lst = listen_b(*cs, 4, &srv);
	rc = usmc_connect(*cc, (struct sockaddr *)&srv, sizeof(srv), 0, c);
	CHECK(!rc, "connect: %s", usmc_strerror(rc));
	rc = usmc_accept(*lst, 0, s);
	CHECK(!rc, "accept: %s", usmc_strerror(rc));
	expect_smcr(*c, "client");
	expect_smcr(*s, "server");
}

static void pair_close(struct usmc_ctx *cs, struct usmc_ctx *cc, struct usmc_listener *lst,
		       struct usmc_conn *c, struct usmc_conn *s)
{
	CHECK(!usmc_close(c) && !usmc_close(s), "close");
	CHECK(!usmc_listener_close(lst), "listener close");
	CHECK(!usmc_ctx_destroy(cc) && !usmc_ctx_destroy(cs), "ctx destroy");
}

static void run_etedge(void)
{
	struct usmc_ctx *cs, *cc;
	struct usmc_listener *lst;
	struct usmc_conn *c, *s;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET};
	uint8_t msg[ET_MSG] = {0}, buf[ET_MSG * ET_ROUNDS];
	size_t got = 0;
	ssize_t n;
	int ep, fd;

	pair_connect(&cs, &cc, &lst, &c, &s);
	fd = usmc_conn_fd(s);
	CHECK(fd >= 0, "usmc_conn_fd: %s", usmc_strerror(fd));
	ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0 && !epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), "epoll");
	for (int r = 0; r < ET_ROUNDS; r++) {
		send_all(c, msg, sizeof(msg));
		CHECK(epoll_wait(ep, &ev, 1, ET_EDGE_MS) == 1,
		      "round %d: no edge within %d ms for new data, %zu bytes unread before it", r,
		      ET_EDGE_MS, (size_t)r * (ET_MSG - ET_READ));
		n = usmc_recv(s, buf, ET_READ, MSG_DONTWAIT);
		CHECK(n == ET_READ, "round %d: read %zd", r, n);
		got += (size_t)n;
	}
	while ((n = usmc_recv(s, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		got += (size_t)n;
	CHECK(n == -EAGAIN && got == sizeof(msg) * ET_ROUNDS, "read %zu of %zu bytes, then %zd",
	      got, sizeof(msg) * ET_ROUNDS, n);
	printf("%d edges for %d sends, each read %d of %d bytes\n", ET_ROUNDS, ET_ROUNDS, ET_READ,
	       ET_MSG);
	close(ep);
	pair_close(cs, cc, lst, c, s);
}

/* ---- pthread_cancel() of a blocked reader ---- */

#define CANCEL_ASLEEP_MS 300  /* the reader blocks this long first */
#define CANCEL_JOIN_MS	 3000 /* it acts on the request within a wait (1 s) */
#define CANCEL_RECV_MS	 3000

static void *blocked_reader(void *arg)
{
	uint8_t b;

	usmc_recv(arg, &b, 1, 0); /* nothing comes */
	die("the cancelled reader's receive returned");
}

/* @len bytes sent on @c must be read on @s within CANCEL_RECV_MS, with
 * non-blocking receives (a stuck engine fails the test, it does not hang it). */
static void expect_data(struct usmc_conn *c, struct usmc_conn *s, const char *which)
{
	uint8_t buf[64] = {0};
	double t0 = mono_s();
	ssize_t n;

	send_all(c, buf, sizeof(buf));
	while ((n = usmc_recv(s, buf, sizeof(buf), MSG_DONTWAIT)) == -EAGAIN &&
	       mono_s() - t0 < CANCEL_RECV_MS / 1e3)
		usleep(1000);
	CHECK(n == sizeof(buf), "%s: received %zd within %d ms", which, n, CANCEL_RECV_MS);
	printf("%s: data received %.1f ms after the send\n", which, (mono_s() - t0) * 1e3);
}

static void run_cancel(void)
{
	struct usmc_ctx *cs, *cc;
	struct usmc_listener *lst;
	struct usmc_conn *c1, *s1, *c2, *s2;
	struct usmc_conn_info i1, i2;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct timespec ts;
	double t0;
	pthread_t th;
	void *res;
	int rc;

	pair_connect(&cs, &cc, &lst, &c1, &s1);
	CHECK(!usmc_listener_addr(lst, &ss, &len), "listener addr");
	rc = usmc_connect(cc, (struct sockaddr *)&ss, len, 0, &c2);
	CHECK(!rc, "second connect: %s", usmc_strerror(rc));
	rc = usmc_accept(lst, 0, &s2);
	CHECK(!rc, "second accept: %s", usmc_strerror(rc));
	usmc_conn_info(s1, &i1);
	usmc_conn_info(s2, &i2);
	CHECK(i1.lgr_id && i1.lgr_id == i2.lgr_id, "both connections on one link group expected");
	pthread_create(&th, NULL, blocked_reader, s1);
	usleep(CANCEL_ASLEEP_MS * 1000);
	t0 = mono_s();
	CHECK(!pthread_cancel(th), "pthread_cancel");
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += CANCEL_JOIN_MS / 1000;
	rc = pthread_timedjoin_np(th, &res, &ts);
	CHECK(!rc, "the cancelled reader did not end within %d ms", CANCEL_JOIN_MS);
	CHECK(res == PTHREAD_CANCELED, "the reader was not cancelled");
	printf("the blocked reader ended %.0f ms after pthread_cancel()\n", (mono_s() - t0) * 1e3);
	expect_data(c2, s2, "the other connection of its link group");
	expect_data(c1, s1, "the cancelled reader's connection");
	CHECK(!usmc_close(c2) && !usmc_close(s2), "close");
	pair_close(cs, cc, lst, c1, s1);
}

/* ---- copies without the connection's lock ---- */

#define COPY_LEN     4096 /* one page: the user's buffer, not there until released */
#define COPY_WAIT_MS 3000

/* A page of a userfaultfd (user-mode faults only: no privilege needed),
 * missing until copy_release() fills it. */
struct stopped_page {
	int uffd;
	uint8_t *page;
};

static void page_stop(struct stopped_page *sp)
{
	struct uffdio_api api = {.api = UFFD_API};
	struct uffdio_register reg = {.mode = UFFDIO_REGISTER_MODE_MISSING};

	sp->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
	CHECK(sp->uffd >= 0, "userfaultfd: %s", strerror(errno));
	CHECK(!ioctl(sp->uffd, UFFDIO_API, &api), "UFFDIO_API: %s", strerror(errno));
	sp->page = mmap(NULL, COPY_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(sp->page != MAP_FAILED, "mmap");
	reg.range = (struct uffdio_range){.start = (uintptr_t)sp->page, .len = COPY_LEN};
	CHECK(!ioctl(sp->uffd, UFFDIO_REGISTER, &reg), "UFFDIO_REGISTER: %s", strerror(errno));
}

/* A thread touched the page: it is stopped in its copy. */
static void page_await_fault(struct stopped_page *sp, const char *who)
{
	struct pollfd p = {.fd = sp->uffd, .events = POLLIN};

	CHECK(poll(&p, 1, COPY_WAIT_MS) == 1, "%s never touched the page", who);
}

/* The page arrives with @fill: the stopped copy goes on. */
static void page_release(struct stopped_page *sp, const uint8_t *fill)
{
	struct uffdio_copy cp = {
		.dst = (uintptr_t)sp->page, .src = (uintptr_t)fill, .len = COPY_LEN};

	CHECK(!ioctl(sp->uffd, UFFDIO_COPY, &cp), "UFFDIO_COPY: %s", strerror(errno));
}

static void page_free(struct stopped_page *sp)
{
	munmap(sp->page, COPY_LEN);
	close(sp->uffd);
}

struct copy_op {
	struct usmc_conn *c;
	uint8_t *buf;
	bool send;
	ssize_t n;
	atomic_bool done;
};

static void *copy_op_run(void *arg)
{
	struct copy_op *op = arg;

	op->n = op->send ? usmc_send(op->c, op->buf, COPY_LEN, 0)
			 : usmc_recv(op->c, op->buf, COPY_LEN, MSG_WAITALL);
	atomic_store(&op->done, true);
	return NULL;
}

static bool op_done_within(struct copy_op *op, int ms)
{
	double t0 = mono_s();

	while (!atomic_load(&op->done) && mono_s() - t0 < ms / 1e3)
		usleep(1000);
	return atomic_load(&op->done);
}

/*
 * @stopped's copy (a receive into, or a send out of, a stopped page) is
 * stopped; @probe, another call on the same connection that takes its
 * lock, must complete meanwhile. Then the page is released and both end.
 */
static void copy_while_stopped(struct copy_op *stopped, struct copy_op *probe,
			       struct stopped_page *sp, const uint8_t *fill, const char *what)
{
	pthread_t ts, tp;
	bool probe_ok;

	pthread_create(&ts, NULL, copy_op_run, stopped);
	page_await_fault(sp, what);
	pthread_create(&tp, NULL, copy_op_run, probe);
	probe_ok = op_done_within(probe, COPY_WAIT_MS);
	page_release(sp, fill);
	pthread_join(ts, NULL);
	pthread_join(tp, NULL);
	printf("%s stopped in its copy: a %s on the connection %s\n", what,
	       probe->send ? "send" : "receive", probe_ok ? "went through" : "waited for it");
	CHECK(probe_ok, "%s held the connection's lock through its copy", what);
	CHECK(stopped->n == COPY_LEN && probe->n == COPY_LEN, "%s: %zd, the other call %zd", what,
	      stopped->n, probe->n);
}

static void run_copyunlocked(void)
{
	static uint8_t data[COPY_LEN], other[COPY_LEN], in[COPY_LEN];
	struct usmc_ctx *cs, *cc;
	struct usmc_listener *lst;
	struct usmc_conn *c, *s;
	struct stopped_page sp;
	struct copy_op rd, wr;

	for (int i = 0; i < COPY_LEN; i++)
		data[i] = (uint8_t)(i * 7 + 1);
	pair_connect(&cs, &cc, &lst, &c, &s);
	/* the server's receive stops in its copy; the server sends meanwhile */
	page_stop(&sp);
	send_all(c, data, COPY_LEN);
	rd = (struct copy_op){.c = s, .buf = sp.page};
	wr = (struct copy_op){.c = s, .buf = other, .send = true};
	copy_while_stopped(&rd, &wr, &sp, other, "a receive");
	CHECK(!memcmp(sp.page, data, COPY_LEN), "the stopped receive copied other bytes");
	CHECK(usmc_recv(c, in, COPY_LEN, MSG_WAITALL) == COPY_LEN, "the client's receive");
	page_free(&sp);
	/* the server's send stops in its copy; the server receives meanwhile */
	page_stop(&sp);
	send_all(c, data, COPY_LEN);
	wr = (struct copy_op){.c = s, .buf = sp.page, .send = true};
	rd = (struct copy_op){.c = s, .buf = in};
	copy_while_stopped(&wr, &rd, &sp, data, "a send");
	CHECK(!memcmp(in, data, COPY_LEN), "the receive beside the stopped send got other bytes");
	CHECK(usmc_recv(c, in, COPY_LEN, MSG_WAITALL) == COPY_LEN && !memcmp(in, data, COPY_LEN),
	      "the stopped send's bytes");
	page_free(&sp);
	pair_close(cs, cc, lst, c, s);
}

int main(int argc, char **argv)
{
	const char *sc = argc > 1 ? argv[1] : "";

	signal(SIGPIPE, SIG_IGN);
	/* a line as it is printed: a run that hangs shows how far it got */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(sc, "killed_poll"))
		run_killed(false);
	else if (!strcmp(sc, "killed_busypoll"))
		run_killed(true);
	else if (!strcmp(sc, "etedge"))
		run_etedge();
	else if (!strcmp(sc, "cancel"))
		run_cancel();
	else if (!strcmp(sc, "copyunlocked"))
		run_copyunlocked();
	else
		die("unknown scenario '%s'", sc);
	printf("PASS %s\n", sc);
	return 0;
}
