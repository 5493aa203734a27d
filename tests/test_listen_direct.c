// SPDX-License-Identifier: MIT
/*
 * Direct mode (docs/listener.md "Plain TCP"): in kernel-compat mode a
 * client whose SYN decided TCP is taken from the kernel by usmc_accept() in
 * the caller's thread, and the accept thread is not woken for it; an SMC
 * client still goes through the probe; the backlog cap still holds for
 * those; and SMC clients are served when the application stops accepting.
 * Needs the BPF program (root, cgroup v2): where it cannot load, every test
 * is reported skipped. Run twice: io_uring and accept4 mode.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "common/loopback.h"
#include "ctx.h"
#include "kcompat.h"
#include "linux_proposal.h"
#include "listen_core.h"
#include "mono_clock.h"

#define ROUNDS		 40   /* plain connections in a row */
#define WAIT_MS		 2000 /* for anything that should come at once */
#define SETTLE_ROUNDS	 20   /* usmc_accept() calls before the measure */
#define SETTLE_US	 5000
#define OTHER_ADDR	 "127.0.0.2" /* a second source: "One address" */
#define CLC_TYPE_DECLINE 0x04

/* Sockets the accept thread took from the kernel (accept_thread.c). */
static atomic_uint thread_took;

void listen_test_hook_accept_thread_took(int fd);
void listen_test_hook_accept_thread_took(int fd)
{
	(void)fd;
	atomic_fetch_add(&thread_took, 1);
}

struct fixture {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	struct sockaddr_storage addr;
	socklen_t alen;
};

static int setup_backlog(void **state, int backlog, long direct)
{
	struct fixture *f = calloc(1, sizeof(*f));

	setenv("USMC_KERNEL_COMPAT", "auto", 1);
	if (!f || usmc_ctx_create(&f->ctx))
		return -1;
	*state = f;
	if (!usmc_ctx_kernel_compat(f->ctx))
		return 0; /* the tests skip */
	usmc_ctx_setopt(f->ctx, USMC_OPT_ACCEPT_DIRECT, direct);
	f->l = lo_listen(f->ctx, backlog, USMC_LISTEN_NONBLOCK, &f->addr, &f->alen);
	return 0;
}

static int setup(void **state)
{
	return setup_backlog(state, 64, 1);
}

static int setup_small(void **state)
{
	return setup_backlog(state, 4, 1);
}

static int setup_off(void **state)
{
	return setup_backlog(state, 64, 0);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (f->l)
		usmc_listener_close(f->l);
	usmc_ctx_destroy(f->ctx);
	free(f);
	return 0;
}

static struct fixture *need_kcompat(void **state)
{
	struct fixture *f = *state;

	if (!f->l) {
		print_message("kernel-compat mode unavailable here (not root, no BPF or "
			      "no cgroup v2): skipped\n");
		skip();
	}
	assert_true(f->l->kc.active);
	return f;
}

/* The accept thread's id (its name, thread_name.h), the test's only one. */
static long accept_tid(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	long tid = -1;

	assert_non_null(d);
	while (tid < 0 && (e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *fp;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		fp = fopen(path, "r");
		if (!fp)
			continue;
		if (fgets(comm, sizeof(comm), fp) && !strcmp(comm, "usmc-accept\n"))
			tid = atol(e->d_name);
		fclose(fp);
	}
	closedir(d);
	assert_true(tid > 0);
	return tid;
}

/* How often thread @tid went to sleep: each wake-up is one. */
static long sleeps_of(long tid)
{
	char path[64], line[128];
	long n = -1;
	FILE *fp;

	snprintf(path, sizeof(path), "/proc/self/task/%ld/status", tid);
	fp = fopen(path, "r");
	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
			break;
	fclose(fp);
	assert_true(n >= 0);
	return n;
}

static bool fd_ready(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1;
}

/* The next connection, as an application with an event loop takes it. */
static struct usmc_conn *accept_next(struct usmc_listener *l)
{
	long t0 = mono_ms();
	struct usmc_conn *c;
	int rc;

	do {
		assert_true(fd_ready(usmc_listener_fd(l), WAIT_MS));
		rc = usmc_accept(l, 0, &c);
		if (!rc)
			return c;
		assert_int_equal(rc, -EAGAIN);
	} while (mono_ms() - t0 < WAIT_MS);
	fail_msg("no connection within %d ms", WAIT_MS);
	return NULL;
}

/* The application is seen taking connections (it has looked of late). */
static void app_accepting(struct usmc_listener *l)
{
	struct usmc_conn *c;

	for (int i = 0; i < SETTLE_ROUNDS; i++) {
		assert_int_equal(usmc_accept(l, 0, &c), -EAGAIN);
		usleep(SETTLE_US);
	}
}

/* One plain request and its echo through @c, the server end of @fd. */
static void echo_once(struct usmc_conn *c, int fd, int i)
{
	char msg[32], got[32];
	int n = snprintf(msg, sizeof(msg), "request %d", i);

	assert_int_equal(send(fd, msg, (size_t)n, 0), n);
	conn_read_exact(c, got, (size_t)n);
	assert_memory_equal(got, msg, (size_t)n);
	assert_int_equal(usmc_send(c, got, (size_t)n, 0), n);
	fd_read_exact(fd, got, (size_t)n);
	assert_memory_equal(got, msg, (size_t)n);
}

/*
 * Plain clients one after the other: each is usmc_accept()'s, TCP with
 * PEERNOSMC and its data intact; the accept thread took none of them and
 * slept through them (before: it took each, one wake-up per connection).
 */
static void test_plain_clients_taken_by_caller(void **state)
{
	struct fixture *f = need_kcompat(state);
	struct usmc_listener_stats st0, st;
	long tid = accept_tid(), sleeps0, t0;
	unsigned int took0;

	app_accepting(f->l);
	usmc_listener_stats(f->l, &st0);
	took0 = atomic_load(&thread_took);
	sleeps0 = sleeps_of(tid);
	t0 = mono_ms();
	for (int i = 0; i < ROUNDS; i++) {
		int fd = plain_connect_to(&f->addr, f->alen);
		struct usmc_conn *c = accept_next(f->l);
		struct usmc_conn_info info;

		assert_int_equal(usmc_conn_info(c, &info), 0);
		assert_int_equal(info.mode, USMC_MODE_TCP);
		assert_int_equal(info.reason, USMC_REASON_PEERNOSMC);
		echo_once(c, fd, i);
		usmc_close(c);
		close(fd);
	}
	print_message("accept thread: %u taken, %ld wake-ups for %d connections in %ld ms\n",
		      atomic_load(&thread_took) - took0, sleeps_of(tid) - sleeps0, ROUNDS,
		      mono_ms() - t0);
	assert_int_equal(atomic_load(&thread_took), took0);
	assert_true(sleeps_of(tid) - sleeps0 < ROUNDS / 4);
	usmc_listener_stats(f->l, &st);
	assert_int_equal(st.accepted - st0.accepted, ROUNDS);
	assert_int_equal(st.fallbacks - st0.fallbacks, ROUNDS);
	assert_int_equal(st.in_handshake, 0);
	assert_int_equal(st.queued, 0);
}

/* With USMC_OPT_ACCEPT_DIRECT 0 the accept thread takes each one, as
 * before (and the hook the test above counts with works). */
static void test_direct_off(void **state)
{
	struct fixture *f = need_kcompat(state);
	unsigned int took0 = atomic_load(&thread_took);
	struct usmc_conn_info info;
	struct usmc_conn *c;
	int fd;

	app_accepting(f->l);
	fd = plain_connect_to(&f->addr, f->alen);
	c = accept_next(f->l);
	assert_int_equal(usmc_conn_info(c, &info), 0);
	assert_int_equal(info.reason, USMC_REASON_PEERNOSMC);
	echo_once(c, fd, 0);
	assert_int_equal(atomic_load(&thread_took), took0 + 1);
	usmc_close(c);
	close(fd);
}

static void wait_in_handshake(struct usmc_listener *l, unsigned int n)
{
	struct usmc_listener_stats st;
	long t0 = mono_ms();
	struct usmc_conn *c;

	do {
		assert_int_equal(usmc_accept(l, 0, &c), -EAGAIN);
		usmc_listener_stats(l, &st);
		if (st.in_handshake == n)
			return;
		usleep(1000);
	} while (mono_ms() - t0 < WAIT_MS);
	fail_msg("in_handshake %u, expected %u", st.in_handshake, n);
}

/* A usmc client signals SMC: usmc_accept() takes it from the kernel but
 * hands it to the probe, which takes the client's DECLINE (it has no
 * device); the application gets the connection after that, data intact. */
static void test_smc_client_probed(void **state)
{
	static const char msg[] = "after the DECLINE";
	struct fixture *f = need_kcompat(state);
	struct usmc_conn_info ci, si;
	char buf[sizeof(msg)] = {0};
	struct usmc_conn *c, *s;

	app_accepting(f->l);
	assert_int_equal(usmc_connect(f->ctx, (struct sockaddr *)&f->addr, f->alen, 0, &c), 0);
	assert_int_equal(usmc_send(c, msg, strlen(msg), 0), (ssize_t)strlen(msg));
	s = accept_next(f->l);
	conn_read_exact(s, buf, strlen(msg));
	assert_string_equal(buf, msg);
	assert_int_equal(usmc_conn_info(c, &ci), 0);
	assert_int_equal(usmc_conn_info(s, &si), 0);
	assert_int_equal(si.mode, USMC_MODE_TCP);
	assert_int_equal(si.peer_declined, 1); /* the probe took the DECLINE */
	assert_int_equal(si.reason, ci.reason);
	wait_in_handshake(f->l, 0); /* it leaves the count after the queue */
	usmc_close(s);
	usmc_close(c);
}

/* A client socket from @from that signals SMC (marked for the program). */
static int smc_client(const struct fixture *f, const char *from)
{
	struct sockaddr_in src = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	uint32_t ticket;

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET, from, &src.sin_addr), 1);
	assert_int_equal(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0);
	ticket = kcompat_mark_client(f->ctx->kc, fd);
	assert_int_not_equal(ticket, 0);
	assert_int_equal(connect(fd, (const struct sockaddr *)&f->addr, f->alen), 0);
	assert_int_equal(kcompat_client_peer(f->ctx->kc, fd, &ticket), KC_PEER_SMC);
	return fd;
}

/*
 * Backlog 4, full of silent SMC clients (two per address, each address's
 * share) that usmc_accept() took and handed to the probe: a plain client
 * waits in the kernel's queue, usmc_accept() does not take it and
 * usmc_listener_fd() says nothing; once an SMC client leaves, it comes.
 */
static void test_cap_holds(void **state)
{
	struct fixture *f = need_kcompat(state);
	const char *from[] = {"127.0.0.1", "127.0.0.1", OTHER_ADDR, OTHER_ADDR};
	struct usmc_listener_stats st;
	struct usmc_conn_info info;
	struct usmc_conn *c;
	int smc[4], fd;

	app_accepting(f->l);
	for (int i = 0; i < 4; i++)
		smc[i] = smc_client(f, from[i]);
	wait_in_handshake(f->l, 4);
	fd = plain_connect_to(&f->addr, f->alen);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(usmc_accept(f->l, 0, &c), -EAGAIN);
		usleep(SETTLE_US);
	}
	assert_false(fd_ready(usmc_listener_fd(f->l), 0));
	usmc_listener_stats(f->l, &st);
	assert_int_equal(st.in_handshake, 4);
	assert_true(st.backlog_high <= 4);
	assert_int_equal(st.kernel_queue, 1);
	close(smc[0]); /* EOF: the probe lets it go */
	for (;;) {
		c = accept_next(f->l);
		assert_int_equal(usmc_conn_info(c, &info), 0);
		if (info.reason == USMC_REASON_PEERNOSMC)
			break;
		usmc_close(c); /* the SMC client that left, if it is handed out */
	}
	echo_once(c, fd, 0);
	usmc_close(c);
	close(fd);
	for (int i = 1; i < 4; i++)
		close(smc[i]);
	usmc_listener_stats(f->l, &st);
	assert_true(st.backlog_high <= 4);
}

/*
 * The application looked at the listener and then stops accepting: an SMC
 * client's handshake still runs (the accept thread takes over within
 * LISTEN_APP_LEASE_MS): its PROPOSAL is answered (no device: a DECLINE).
 */
static void test_smc_served_without_accept(void **state)
{
	struct fixture *f = need_kcompat(state);
	uint8_t hdr[8];
	long t0;
	int fd;

	app_accepting(f->l);
	fd = smc_client(f, "127.0.0.1");
	t0 = mono_ms();
	assert_int_equal(send(fd, linux_v2_proposal, sizeof(linux_v2_proposal), 0),
			 (ssize_t)sizeof(linux_v2_proposal));
	assert_true(fd_ready(fd, WAIT_MS));
	assert_int_equal(recv(fd, hdr, sizeof(hdr), MSG_WAITALL), (ssize_t)sizeof(hdr));
	print_message("answered in %ld ms without usmc_accept()\n", mono_ms() - t0);
	assert_int_equal(hdr[0], 0xE2);
	assert_int_equal(hdr[4], CLC_TYPE_DECLINE);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_plain_clients_taken_by_caller, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_direct_off, setup_off, teardown),
		cmocka_unit_test_setup_teardown(test_smc_client_probed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cap_holds, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_smc_served_without_accept, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
