// SPDX-License-Identifier: MIT
/*
 * What the preload stands on (docs/preload.md): libc's own functions
 * behind the ones it wraps, found with dlsym(RTLD_NEXT); the process the
 * preload's state is of; in_lib, the switch that sends libusmc's calls to
 * the real functions; and the preload's own threads.
 */
#include <dlfcn.h>

#include "preload.h"

struct real_calls R;
pid_t my_pid;
__thread int in_lib;

/*
 * Each real call and the libc symbol it is. dlsym() gives a data pointer;
 * it is stored through a (void **) as POSIX's dlsym() page shows.
 */
#define REAL_AS(field, sym)            \
	{                              \
		(void **)&R.field, sym \
	}
#define REAL(field) REAL_AS(field, #field)

static const struct {
	void **slot;
	const char *sym;
} real_syms[] = {
	REAL(socket),
	REAL(connect),
	REAL(listen),
	REAL(accept),
	REAL(accept4),
	REAL(close),
	REAL(close_range),
	REAL(closefrom),
	REAL(shutdown),
	REAL(dup),
	REAL(dup2),
	REAL(dup3),
	REAL(fcntl),
	REAL(fcntl64),
	REAL(ioctl),
	REAL(getsockopt),
	REAL(setsockopt),
	REAL(getsockname),
	REAL(getpeername),
	REAL(read),
	REAL(write),
	REAL(readv),
	REAL(writev),
	REAL(recv),
	REAL(send),
	REAL(recvfrom),
	REAL(sendto),
	REAL(recvmsg),
	REAL(sendmsg),
	REAL(recvmmsg),
	REAL(sendmmsg),
	REAL_AS(read_chk, "__read_chk"),
	REAL_AS(recv_chk, "__recv_chk"),
	REAL_AS(recvfrom_chk, "__recvfrom_chk"),
	REAL(sendfile),
	REAL(sendfile64),
	REAL(splice),
	REAL(poll),
	REAL(ppoll),
	REAL_AS(poll_chk, "__poll_chk"),
	REAL_AS(ppoll_chk, "__ppoll_chk"),
	REAL(select),
	REAL(pselect),
	REAL(epoll_ctl),
	REAL(epoll_wait),
	REAL(epoll_pwait),
	REAL(epoll_pwait2),
	REAL(pthread_create),
	REAL(socketpair),
	REAL(pipe),
	REAL(pipe2),
	REAL(eventfd),
	REAL(epoll_create),
	REAL(epoll_create1),
	REAL(open),
	REAL(open64),
	REAL(openat),
	REAL(openat64),
};

void preload_real_resolve(void)
{
	for (size_t i = 0; i < sizeof(real_syms) / sizeof(real_syms[0]); i++)
		*real_syms[i].slot = dlsym(RTLD_NEXT, real_syms[i].sym);
	if (!R.fcntl64)
		R.fcntl64 = R.fcntl;
	if (!R.sendfile64)
		R.sendfile64 = R.sendfile;
}

/*
 * A detached thread of the preload, named @name, with @stack bytes of
 * stack (0: the default) and every signal blocked: signals are the
 * application's. It is created with the real pthread_create(): the
 * preload's threads set in_lib themselves. Returns 0 or an errno.
 */
int preload_thread_start(void *(*fn)(void *), void *arg, const char *name, size_t stack)
{
	pthread_attr_t a;
	sigset_t all, old;
	pthread_t t;
	int rc;

	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (stack)
		pthread_attr_setstacksize(&a, stack);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = R.pthread_create(&t, &a, fn, arg);
	if (!rc)
		pthread_setname_np(t, name);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	return rc;
}
