// SPDX-License-Identifier: MIT
/*
 * Kernel-compat mode for a socket that was listening before libusmc had it
 * (usmc_listen_fd(): the preload's listeners, nginx's workers, a socket
 * inherited across exec; docs/kernel-compat.md "Adopted listeners"). Its
 * listen() ran before the program could know it, so its SYN-ACKs carried
 * no option and every kernel-compatible client fell back with PEERNOSMC.
 * Over loopback, with libusmc's own client (its SYN carries the option):
 * the SYN-ACK must carry it too, so both ends see an SMC peer, and without
 * a device the client declines (NOSMCRDEV) instead of PEERNOSMC.
 *
 * Needs the BPF program (root, cgroup v2) and Linux 6.12 for the adoption
 * hook; elsewhere, and with USMC_KERNEL_COMPAT=0 (the valgrind run),
 * every test is reported skipped.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "common/loopback.h"
#include "ctx.h"
#include "kcompat.h"
#include "listen_core.h"

#define MSG	       "hello after the option"
#define CHILD_ARG      "--adopt-child" /* argv[1] of the exec'd server */
#define CHILD_OK       0
#define CHILD_FAILED   1
#define WORKER_CLIENTS 4
#define NOBODY	       65534 /* the uid and gid nginx's workers run as by default */

/* A plain TCP socket listening on 127.0.0.1, port chosen by the kernel. */
static int plain_listener(struct sockaddr_storage *addr, socklen_t *alen, int sock_flags)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | sock_flags, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 16), 0);
	*alen = sizeof(*addr);
	assert_int_equal(getsockname(fd, (struct sockaddr *)addr, alen), 0);
	return fd;
}

static int setup(void **state)
{
	struct usmc_ctx *ctx;

	if (usmc_ctx_create(&ctx))
		return -1;
	*state = ctx;
	return 0;
}

static int teardown(void **state)
{
	usmc_ctx_destroy(*state);
	return 0;
}

static struct usmc_ctx *need_kcompat(void **state)
{
	struct usmc_ctx *ctx = *state;

	if (!usmc_ctx_kernel_compat(ctx)) {
		print_message("kernel-compat mode off or unavailable here (USMC_KERNEL_COMPAT=0, "
			      "not root, no BPF or no cgroup v2): skipped\n");
		skip();
	}
	return ctx;
}

/* Connect to @addr with libusmc's client and check it saw the option: it
 * declined (no device here), not PEERNOSMC. */
static struct usmc_conn *smc_client(struct usmc_ctx *ctx, const struct sockaddr_storage *addr,
				    socklen_t alen)
{
	struct usmc_conn_info ci;
	struct usmc_conn *c;

	assert_int_equal(usmc_connect(ctx, (const struct sockaddr *)addr, alen, 0, &c), 0);
	assert_int_equal(usmc_send(c, MSG, strlen(MSG), 0), (ssize_t)strlen(MSG));
	assert_int_equal(usmc_conn_info(c, &ci), 0);
	assert_int_equal(ci.mode, USMC_MODE_TCP);
	if (ci.reason == USMC_REASON_PEERNOSMC)
		fail_msg("the adopted listener's SYN-ACK had no SMC option (PEERNOSMC)");
	return c;
}

/* The server's end: the client's DECLINE taken, then its data. */
static void check_server_end(struct usmc_conn *s, uint32_t client_reason)
{
	struct usmc_conn_info si;
	char buf[sizeof(MSG)] = {0};

	conn_read_exact(s, buf, strlen(MSG));
	assert_string_equal(buf, MSG); /* the DECLINE was not handed over */
	assert_int_equal(usmc_conn_info(s, &si), 0);
	assert_int_equal(si.mode, USMC_MODE_TCP);
	assert_int_equal(si.reason, client_reason);
	assert_int_equal(si.peer_declined, 1);
}

/* listen() first, then usmc_listen_fd(): the SYN-ACK carries the option. */
static void test_listening_socket_adopted(void **state)
{
	struct usmc_ctx *ctx = need_kcompat(state);
	struct sockaddr_storage addr;
	socklen_t alen;
	int fd = plain_listener(&addr, &alen, SOCK_CLOEXEC);
	struct usmc_listener *l;
	struct usmc_conn *c, *s;
	struct usmc_conn_info ci;
	struct kc_listen_val v;

	assert_int_equal(usmc_listen_fd(ctx, fd, 0, 0, &l), 0);
	c = smc_client(ctx, &addr, alen);
	assert_true(l->kc.active);
	assert_int_equal(usmc_accept(l, 0, &s), 0);
	assert_int_equal(usmc_conn_info(c, &ci), 0);
	check_server_end(s, ci.reason);
	assert_int_equal(kcompat_listener_counters(ctx->kc, &l->kc, &v), 0);
	assert_int_equal(v.echoed, 1);
	usmc_close(s);
	usmc_close(c);
	usmc_listener_close(l);
}

/*
 * A connection queued before the adoption was not counted by the program:
 * the first accepted socket is that plain one, although the counts show
 * one SMC socket pending (the client after it). It must read plain.
 */
static void test_queued_before_adoption(void **state)
{
	struct usmc_ctx *ctx = need_kcompat(state);
	struct sockaddr_storage addr;
	socklen_t alen;
	int lfd = plain_listener(&addr, &alen, SOCK_CLOEXEC);
	int plain = plain_connect_to(&addr, alen), smc, a1, a2;
	struct kcompat_lsn ls;
	uint32_t ticket;

	kcompat_listener_adopt(ctx->kc, lfd, &ls);
	assert_true(ls.active);
	assert_int_equal(atomic_load(&ls.uncounted), 1);
	smc = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(smc >= 0);
	ticket = kcompat_mark_client(ctx->kc, smc);
	assert_int_equal(connect(smc, (struct sockaddr *)&addr, alen), 0);
	assert_int_equal(kcompat_client_peer(ctx->kc, smc, &ticket), KC_PEER_SMC);
	a1 = accept(lfd, NULL, NULL);
	a2 = accept(lfd, NULL, NULL);
	assert_true(a1 >= 0 && a2 >= 0);
	assert_int_equal(kcompat_server_peer(ctx->kc, &ls, a1), KC_PEER_NOSMC);
	assert_int_equal(kcompat_server_peer(ctx->kc, &ls, a2), KC_PEER_SMC);
	kcompat_listener_forget(ctx->kc, &ls);
	close(a1);
	close(a2);
	close(smc);
	close(plain);
	close(lfd);
}

/*
 * Pre-fork workers: each process adopts the one listening socket with a
 * context, and so a program, of its own; here two contexts of one process
 * stand for them. Each program registers the port and runs for each
 * SYN-ACK: the one attached first writes the option, and the other must
 * know that the SYN-ACK carries it (its own store fails, the option is
 * there), as its worker may take the connection. Here it takes them all:
 * the first worker's listener is registered and has no accept thread.
 */
static void test_workers_share_listener(void **state)
{
	struct usmc_ctx *ctx = need_kcompat(state), *ctx2;
	struct sockaddr_storage addr;
	socklen_t alen;
	int fd = plain_listener(&addr, &alen, SOCK_CLOEXEC);
	struct usmc_listener *l;
	struct usmc_conn_info ci;
	struct usmc_conn *c, *s;
	struct kcompat_lsn first;
	struct kc_listen_val v;

	kcompat_listener_adopt(ctx->kc, fd, &first);
	assert_true(first.active);
	assert_int_equal(usmc_ctx_create(&ctx2), 0); /* attached after ctx's */
	assert_int_equal(usmc_listen_fd(ctx2, fd, 0, 0, &l), 0);
	assert_true(l->kc.active);
	for (int i = 0; i < WORKER_CLIENTS; i++) {
		c = smc_client(ctx, &addr, alen);
		assert_int_equal(usmc_accept(l, 0, &s), 0);
		assert_int_equal(usmc_conn_info(c, &ci), 0);
		check_server_end(s, ci.reason);
		usmc_close(s);
		usmc_close(c);
	}
	/* each program counts the SYN-ACKs that carried the option */
	assert_int_equal(kcompat_listener_counters(ctx->kc, &first, &v), 0);
	assert_int_equal(v.echoed, WORKER_CLIENTS);
	assert_int_equal(kcompat_listener_counters(ctx2->kc, &l->kc, &v), 0);
	assert_int_equal(v.echoed, WORKER_CLIENTS);
	usmc_listener_close(l);
	kcompat_listener_forget(ctx->kc, &first);
	usmc_ctx_destroy(ctx2);
}

/* The exec'd server's one connection: the client's DECLINE taken, then
 * its data; 1 if so. */
static int child_serve(struct usmc_listener *l)
{
	struct usmc_conn_info si = {0};
	struct usmc_conn *s;
	char buf[sizeof(MSG)] = {0};
	int ok;

	if (usmc_accept(l, 0, &s))
		return 0;
	ok = usmc_recv(s, buf, strlen(MSG), MSG_WAITALL) == (ssize_t)strlen(MSG) &&
	     !strcmp(buf, MSG) && !usmc_conn_info(s, &si) && si.peer_declined == 1 &&
	     si.reason != USMC_REASON_PEERNOSMC;
	if (!ok)
		fprintf(stderr, "adopt child: reason %s, declined %u\n",
			usmc_reason_name(si.reason), si.peer_declined);
	usmc_close(s);
	return ok;
}

/* The exec'd server: a context of its own, the inherited socket @fd
 * adopted, then a byte on @ready, one connection checked. Its exit status
 * is the verdict. */
static int adopt_child(int fd, int ready)
{
	struct usmc_listener *l;
	struct usmc_ctx *ctx;
	int ok;

	if (usmc_ctx_create(&ctx) || usmc_listen_fd(ctx, fd, 0, 0, &l))
		return CHILD_FAILED;
	ok = l->kc.active;
	if (!ok)
		fprintf(stderr, "adopt child: the adopted listener is not active\n");
	ok &= write(ready, "r", 1) == 1;
	close(ready);
	ok = ok && child_serve(l);
	usmc_listener_close(l);
	usmc_ctx_destroy(ctx);
	return ok ? CHILD_OK : CHILD_FAILED;
}

/* A listening socket inherited across fork + exec (socket activation, a
 * binary upgrade): the new program adopts it, and its SYN-ACKs carry the
 * option although neither process marked it before its listen(). */
static void test_inherited_across_exec(void **state)
{
	struct usmc_ctx *ctx = need_kcompat(state);
	struct sockaddr_storage addr;
	socklen_t alen;
	int fd = plain_listener(&addr, &alen, 0), st, ready[2];
	struct usmc_conn *c;
	char arg[16], rarg[16], b;
	pid_t pid;

	assert_int_equal(pipe(ready), 0); /* both inherited: no O_CLOEXEC */
	snprintf(arg, sizeof(arg), "%d", fd);
	snprintf(rarg, sizeof(rarg), "%d", ready[1]);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/proc/self/exe", "test_kcompat_adopt", CHILD_ARG, arg, rarg, (char *)NULL);
		_exit(127);
	}
	close(fd);
	close(ready[1]);
	/* a SYN before the adoption would get a plain SYN-ACK */
	assert_int_equal(read(ready[0], &b, 1), 1);
	close(ready[0]);
	c = smc_client(ctx, &addr, alen);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), CHILD_OK);
	usmc_close(c);
}

/*
 * The child of fork() of the test, the inherited socket @fd's server after
 * dropping root as nginx's workers do: it cannot load a program, so its
 * context must use the parent's (and still be in kernel-compat mode).
 */
static int unprivileged_child(int fd, int ready)
{
	struct usmc_listener *l;
	struct usmc_ctx *ctx;
	int ok;

	if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
		return CHILD_FAILED;
	if (usmc_ctx_create(&ctx) || usmc_ctx_kernel_compat(ctx) != 1 ||
	    usmc_listen_fd(ctx, fd, 0, 0, &l)) {
		fprintf(stderr, "unprivileged child: no kernel-compat context or listener\n");
		return CHILD_FAILED;
	}
	ok = l->kc.active;
	if (!ok)
		fprintf(stderr, "unprivileged child: the adopted listener is not active\n");
	ok &= write(ready, "r", 1) == 1;
	close(ready);
	ok = ok && child_serve(l);
	usmc_listener_close(l);
	usmc_ctx_destroy(ctx);
	return ok ? CHILD_OK : CHILD_FAILED;
}

/* A pre-fork server whose worker drops root before it adopts the socket. */
static void test_unprivileged_worker(void **state)
{
	struct usmc_ctx *ctx = need_kcompat(state);
	struct sockaddr_storage addr;
	socklen_t alen;
	int fd = plain_listener(&addr, &alen, SOCK_CLOEXEC), st, ready[2];
	struct usmc_conn *c;
	char b;
	pid_t pid;

	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(ready[0]);
		_exit(unprivileged_child(fd, ready[1]));
	}
	close(fd);
	close(ready[1]);
	if (read(ready[0], &b, 1) != 1) { /* the child failed before */
		assert_int_equal(waitpid(pid, &st, 0), pid);
		fail_msg("the unprivileged child exited %d", WEXITSTATUS(st));
	}
	close(ready[0]);
	c = smc_client(ctx, &addr, alen);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), CHILD_OK);
	usmc_close(c);
}

/* A bound TCP socket on 127.0.0.1, not listening yet: usmc_listen_prepare()
 * before listen(). */
static int prepared_listener(struct usmc_ctx *ctx, struct sockaddr_storage *addr, socklen_t *alen)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(usmc_listen_prepare(ctx, fd), 0);
	assert_int_equal(listen(fd, 16), 0);
	*alen = sizeof(*addr);
	assert_int_equal(getsockname(fd, (struct sockaddr *)addr, alen), 0);
	return fd;
}

/* What usmc_listen_prepare() refuses, in any mode; and a context without
 * kernel-compat mode does nothing. */
static void test_prepare_args(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage addr;
	struct usmc_ctx *ctx = *state, *off;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), udp, pfd[2], c, s;
	socklen_t alen;
	char buf[sizeof(MSG)] = {0};

	assert_true(fd >= 0);
	assert_int_equal(usmc_listen_prepare(NULL, fd), -EINVAL);
	assert_int_equal(usmc_listen_prepare(ctx, -1), -EBADF);
	assert_int_equal(pipe(pfd), 0);
	assert_int_equal(usmc_listen_prepare(ctx, pfd[0]), -ENOTSOCK);
	udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_int_equal(usmc_listen_prepare(ctx, udp), -EINVAL);
	assert_int_equal(usmc_listen_prepare(ctx, fd), -EINVAL); /* not bound */
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(usmc_listen_prepare(ctx, fd), -EINVAL); /* listening already */
	close(fd);
	/* mode off: 0, and the socket a plain one, as before */
	setenv("USMC_KERNEL_COMPAT", "0", 1);
	assert_int_equal(usmc_ctx_create(&off), 0);
	unsetenv("USMC_KERNEL_COMPAT");
	assert_int_equal(usmc_ctx_kernel_compat(off), 0);
	fd = prepared_listener(off, &addr, &alen);
	c = plain_connect_to(&addr, alen);
	assert_int_equal(send(c, MSG, strlen(MSG), 0), (ssize_t)strlen(MSG));
	s = accept(fd, NULL, NULL);
	assert_true(s >= 0);
	assert_int_equal(recv(s, buf, strlen(MSG), MSG_WAITALL), (ssize_t)strlen(MSG));
	assert_string_equal(buf, MSG);
	close(s);
	close(c);
	close(fd);
	close(udp);
	close(pfd[0]);
	close(pfd[1]);
	usmc_ctx_destroy(off);
}

/*
 * usmc_listen_prepare() before listen(): SYN-ACKs carry the option before
 * any listener exists. An SMC client and a plain one connect before
 * usmc_listen_fd(), a third SMC client after it: the queued two are read
 * from their sockets' storage (uncounted), in queue order, the third from
 * the counts, each as what its SYN-ACK said.
 */
static void test_prepared_before_listen(void **state)
{
	struct usmc_ctx *ctx = need_kcompat(state);
	struct sockaddr_storage addr;
	socklen_t alen;
	int fd = prepared_listener(ctx, &addr, &alen), plain;
	struct usmc_conn *c1, *c2, *s;
	struct usmc_conn_info ci, si;
	struct usmc_listener *l;
	struct kc_listen_val v;
	char buf[sizeof(MSG)] = {0};

	c1 = smc_client(ctx, &addr, alen); /* no listener yet: the option all the same */
	plain = plain_connect_to(&addr, alen);
	assert_int_equal(send(plain, MSG, strlen(MSG), 0), (ssize_t)strlen(MSG));
	assert_int_equal(usmc_listen_fd(ctx, fd, 0, 0, &l), 0);
	assert_true(l->kc.active); /* (its accept thread may have taken both already) */
	assert_int_equal(usmc_accept(l, 0, &s), 0);
	assert_int_equal(usmc_conn_info(c1, &ci), 0);
	check_server_end(s, ci.reason);
	usmc_close(s);
	assert_int_equal(usmc_accept(l, 0, &s), 0);
	conn_read_exact(s, buf, strlen(MSG));
	assert_string_equal(buf, MSG);
	assert_int_equal(usmc_conn_info(s, &si), 0);
	assert_int_equal(si.mode, USMC_MODE_TCP);
	assert_int_equal(si.reason, USMC_REASON_PEERNOSMC);
	usmc_close(s);
	c2 = smc_client(ctx, &addr, alen);
	assert_int_equal(usmc_accept(l, 0, &s), 0);
	assert_int_equal(usmc_conn_info(c2, &ci), 0);
	check_server_end(s, ci.reason);
	usmc_close(s);
	/* the port's entry since usmc_listen_prepare(): both SMC SYNs echoed */
	assert_int_equal(kcompat_listener_counters(ctx->kc, &l->kc, &v), 0);
	assert_int_equal(v.echoed, 2);
	assert_int_equal(v.plain, 1);
	usmc_close(c1);
	usmc_close(c2);
	close(plain);
	usmc_listener_close(l);
}

/* The forked worker of test_prepared_worker(): its own context, whose
 * program (it is root) is not the one that answered the queued client. */
static int prepared_child(int fd)
{
	struct usmc_listener *l;
	struct usmc_ctx *ctx;
	int ok;

	if (usmc_ctx_create(&ctx) || usmc_ctx_kernel_compat(ctx) != 1 ||
	    usmc_listen_fd(ctx, fd, 0, 0, &l)) {
		fprintf(stderr, "prepared child: no kernel-compat context or listener\n");
		return CHILD_FAILED;
	}
	ok = l->kc.active;
	if (!ok)
		fprintf(stderr, "prepared child: the adopted listener is not active\n");
	ok = ok && child_serve(l);
	usmc_listener_close(l);
	usmc_ctx_destroy(ctx);
	return ok ? CHILD_OK : CHILD_FAILED;
}

/*
 * A pre-fork master marks and listens, a client connects, then a worker
 * that loads a program of its own (it stayed root) adopts the socket: the
 * queued client's SYN-ACK was the master's program's, and the worker must
 * learn from the master's storage that the client saw the option.
 */
static void test_prepared_worker(void **state)
{
	struct usmc_ctx *ctx = need_kcompat(state);
	struct sockaddr_storage addr;
	socklen_t alen;
	int fd = prepared_listener(ctx, &addr, &alen), st;
	struct usmc_conn *c = smc_client(ctx, &addr, alen);
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(prepared_child(fd));
	close(fd);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), CHILD_OK);
	usmc_close(c);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_listening_socket_adopted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_queued_before_adoption, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inherited_across_exec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_workers_share_listener, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unprivileged_worker, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prepare_args, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prepared_before_listen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prepared_worker, setup, teardown),
	};

	/* no usmc-stat thread: test_unprivileged_worker() forks without exec,
	 * and a child of a threaded process cannot start threads under TSan */
	setenv("USMC_STAT", "0", 1);
	if (argc == 4 && !strcmp(argv[1], CHILD_ARG))
		return adopt_child(atoi(argv[2]), atoi(argv[3]));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
