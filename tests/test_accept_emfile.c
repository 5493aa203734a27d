// SPDX-License-Identifier: MIT
/*
 * The accept thread at RLIMIT_NOFILE (over loopback, TCP only): clients
 * wait in the kernel's queue while no descriptor is free, and the thread
 * must not spin on them (a level-triggered listen socket, or a multishot
 * accept re-armed at once, reports them again at once): over a second it
 * may use at most EMFILE_CPU_MAX of a CPU. Once descriptors are free again
 * every queued client is accepted within EMFILE_RESUME_MS.
 *
 * Usage: test_accept_emfile 1|0 (USMC_OPT_ACCEPT_URING: io_uring multishot
 * accept where the kernel allows it, or accept4).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <usmc/usmc.h>

#include "common/check.h"
#include "mono_clock.h"

#define EMFILE_CLIENTS	 4
#define EMFILE_SETTLE_MS 300 /* the thread has met EMFILE by then */
#define EMFILE_CPU_MAX	 0.2 /* of one CPU, measured over a second */
#define EMFILE_RESUME_MS 3000
#define EMFILE_NOFILE	 512 /* RLIMIT_NOFILE of the test: descriptors it fills */

/* The accept thread's stat file, opened (no descriptor is free later). */
static int accept_thread_stat(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int fd = -1;

	CHECK(d, "opendir /proc/self/task");
	while ((de = readdir(d)) && fd < 0) {
		char path[300], comm[64] = "";
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strcmp(comm, "usmc-accept\n")) {
			snprintf(path, sizeof(path), "/proc/self/task/%s/stat", de->d_name);
			fd = open(path, O_RDONLY | O_CLOEXEC);
		}
		fclose(f);
	}
	closedir(d);
	CHECK(fd >= 0, "no usmc-accept thread");
	return fd;
}

/* The CPU time of the thread of @stat_fd so far, in seconds (utime + stime). */
static double thread_cpu_s(int stat_fd)
{
	char buf[1024];
	unsigned long ut, st;
	ssize_t n = pread(stat_fd, buf, sizeof(buf) - 1, 0);
	const char *p;

	CHECK(n > 0, "read the thread's stat");
	buf[n] = 0;
	p = strrchr(buf, ')');
	CHECK(p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) ==
			      2,
	      "parse the thread's stat");
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/*
 * RLIMIT_NOFILE down to EMFILE_NOFILE, before anything opens: an io_uring
 * accept checks the limit it was armed under, so the listener must run
 * under the one the test fills.
 */
static void small_nofile(void)
{
	struct rlimit rl;

	CHECK(!getrlimit(RLIMIT_NOFILE, &rl), "getrlimit");
	if (rl.rlim_cur > EMFILE_NOFILE)
		rl.rlim_cur = EMFILE_NOFILE;
	CHECK(!setrlimit(RLIMIT_NOFILE, &rl), "setrlimit");
}

/* No descriptor free below the limit: every free one opened into @fill.
 * Returns how many. */
static int exhaust_fds(int *fill)
{
	int n = 0, fd;

	while (n < EMFILE_NOFILE && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		fill[n++] = fd;
	CHECK(errno == EMFILE, "filling the descriptor table: %s", strerror(errno));
	return n;
}

static void accept_all(struct usmc_listener *l, int want)
{
	struct pollfd p = {.fd = usmc_listener_fd(l), .events = POLLIN};
	double t0 = mono_s();
	int got = 0;

	while (got < want) {
		struct usmc_conn *c;
		int left = EMFILE_RESUME_MS - (int)((mono_s() - t0) * 1e3);

		CHECK(left > 0 && poll(&p, 1, left) == 1,
		      "%d of %d queued clients accepted within %d ms of free descriptors", got,
		      want, EMFILE_RESUME_MS);
		if (usmc_accept(l, 0, &c))
			continue;
		CHECK(!usmc_close(c), "close");
		got++;
	}
	printf("all %d queued clients accepted %.0f ms after descriptors were free\n", want,
	       (mono_s() - t0) * 1e3);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	static int fill[EMFILE_NOFILE];
	int cl[EMFILE_CLIENTS], nfill;
	struct usmc_listener_stats st;
	socklen_t alen = sizeof(a);
	struct usmc_listener *l;
	struct usmc_ctx *ctx;
	double cpu0, t0, share;
	int stat_fd;

	CHECK(argc > 1, "usage: test_accept_emfile 1|0");
	small_nofile();
	CHECK(!usmc_ctx_create(&ctx), "ctx");
	CHECK(!usmc_ctx_setopt(ctx, USMC_OPT_SMC, 0), "smc option");
	CHECK(!usmc_ctx_setopt(ctx, USMC_OPT_ACCEPT_URING, atoi(argv[1])), "uring option");
	CHECK(!usmc_listen(ctx, (struct sockaddr *)&a, sizeof(a), 16, 0, &l), "listen");
	CHECK(!usmc_listener_addr(l, (struct sockaddr_storage *)&a, &alen), "listener addr");
	stat_fd = accept_thread_stat();
	for (int i = 0; i < EMFILE_CLIENTS; i++) /* their descriptors before the table is full */
		CHECK((cl[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0, "socket");
	nfill = exhaust_fds(fill);
	for (int i = 0; i < EMFILE_CLIENTS; i++)
		CHECK(!connect(cl[i], (struct sockaddr *)&a, sizeof(a)), "connect: %s",
		      strerror(errno));
	usleep(EMFILE_SETTLE_MS * 1000);
	cpu0 = thread_cpu_s(stat_fd);
	t0 = mono_s();
	sleep(1);
	share = (thread_cpu_s(stat_fd) - cpu0) / (mono_s() - t0);
	usmc_listener_stats(l, &st);
	printf("%s, no descriptor free, %d clients queued: the accept thread used %.0f%% of a CPU\n",
	       st.accept_uring ? "io_uring" : "accept4", EMFILE_CLIENTS, share * 100);
	CHECK(share <= EMFILE_CPU_MAX, "the accept thread spins at RLIMIT_NOFILE (%.0f%% of a CPU)",
	      share * 100);
	while (nfill > 0)
		close(fill[--nfill]);
	accept_all(l, EMFILE_CLIENTS);
	for (int i = 0; i < EMFILE_CLIENTS; i++)
		close(cl[i]);
	close(stat_fd);
	CHECK(!usmc_listener_close(l), "listener close");
	CHECK(!usmc_ctx_destroy(ctx), "ctx destroy");
	printf("PASS\n");
	return 0;
}
