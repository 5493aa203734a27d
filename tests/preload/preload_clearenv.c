// SPDX-License-Identifier: MIT
/*
 * preload_clearenv - a plain-socket program that clears its environment
 * before its first socket, as nginx's workers keep only the variables an
 * env directive names (docs/preload.md). Run under usmc_run with
 * USMC_LOG=info,LOG and USMC_STAT=0, it checks that libusmc's context,
 * made at its first connection, still has them: LOG exists, and no
 * usmc-stat thread runs; and the same in a child of fork(), which makes
 * its own context. Prints "ok" and exits 0, or says what is missing and
 * exits 1.
 *
 * Usage: preload_clearenv LOG
 */
#include <dirent.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STAT_WAIT_MS 1000 /* a usmc-stat thread names itself when it starts */

static void fail(const char *what)
{
	printf("FAIL: %s\n", what);
	fflush(stdout);
	_exit(1);
}

/* One loopback connection through the preload: the process's context. */
static void one_connection(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c, s;
	char b;

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4) ||
	    getsockname(l, (struct sockaddr *)&a, &len))
		fail("listener");
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)))
		fail("connect");
	s = accept(l, NULL, NULL);
	if (s < 0 || write(c, "x", 1) != 1 || read(s, &b, 1) != 1)
		fail("the connection");
	close(s);
	close(c);
	close(l);
}

/* A thread of this process named @name. */
static bool have_thread(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	bool found = false;

	while (d && !found && (e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
		if (f && fgets(comm, sizeof(comm), f))
			found = !strncmp(comm, name, strlen(name));
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

/* USMC_STAT=0 kept: no usmc-stat thread appears. */
static void check_no_stat_thread(void)
{
	for (int ms = 0; ms < STAT_WAIT_MS; ms += 50) {
		if (have_thread("usmc-stat"))
			fail("a usmc-stat thread runs: USMC_STAT=0 was lost with the environment");
		nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
	}
}

int main(int argc, char **argv)
{
	int st;
	pid_t pid;

	if (argc != 2)
		fail("usage: preload_clearenv LOG");
	unlink(argv[1]);
	clearenv();
	one_connection();
	if (access(argv[1], F_OK))
		fail("no USMC_LOG file: USMC_LOG was lost with the environment");
	check_no_stat_thread();
	pid = fork();
	if (pid < 0)
		fail("fork");
	if (pid == 0) {
		one_connection();
		check_no_stat_thread();
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		fail("in the child of fork()");
	printf("ok\n");
	return 0;
}
