// SPDX-License-Identifier: MIT
/*
 * The preload's start and end in a process (docs/preload.md): the first
 * wrapped call or the constructor sets it up; at exit the summary is
 * logged and the closes in the background get their time.
 */
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include "preload.h"

atomic_bool preload_ready;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

static void preload_exit(void)
{
	preload_summary();
	reaper_flush();
}

/* Listening TCP sockets inherited across exec (socket activation, a
 * binary upgrade) are listeners of this process too. */
static void adopt_inherited_listeners(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name), v = 0;
		socklen_t len = sizeof(v);

		if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d))
			continue;
		if (R.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) || !v ||
		    !fd_is_inet_tcp(fd))
			continue;
		if (tab_add_listen(fd, 0))
			break;
	}
	closedir(d);
}

void preload_init(void)
{
	pthread_mutex_lock(&init_lock);
	if (atomic_load(&preload_ready)) {
		pthread_mutex_unlock(&init_lock);
		return;
	}
	preload_real_resolve();
	my_pid = getpid();
	preload_config_read();
	preload_fork_handlers();
	atexit(preload_exit);
	atomic_store_explicit(&preload_ready, true, memory_order_release);
	pthread_mutex_unlock(&init_lock);
	if (!preload_disabled)
		adopt_inherited_listeners();
}

__attribute__((constructor)) static void preload_ctor(void)
{
	P_INIT();
}
