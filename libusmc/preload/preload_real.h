/* SPDX-License-Identifier: MIT */
/*
 * What the preload stands on (preload_real.c): libc's own functions
 * behind the ones it wraps, the in_lib switch that sends libusmc's calls
 * to them, the process the preload's state is of, and its own threads.
 */
#ifndef USMC_PRELOAD_REAL_H
#define USMC_PRELOAD_REAL_H

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* The libc functions the preload wraps, found with dlsym(RTLD_NEXT). */
struct real_calls {
	int (*socket)(int, int, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*close)(int);
	int (*close_range)(unsigned int, unsigned int, int);
	void (*closefrom)(int);
	int (*shutdown)(int, int);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*fcntl)(int, int, ...);
	int (*fcntl64)(int, int, ...);
	int (*ioctl)(int, unsigned long, ...);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned int, int, struct timespec *);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned int, int);
	ssize_t (*read_chk)(int, void *, size_t, size_t);
	ssize_t (*recv_chk)(int, void *, size_t, size_t, int);
	ssize_t (*recvfrom_chk)(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	ssize_t (*sendfile64)(int, int, off_t *, size_t);
	ssize_t (*splice)(int, loff_t *, int, loff_t *, size_t, unsigned int);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int (*poll_chk)(struct pollfd *, nfds_t, int, size_t);
	int (*ppoll_chk)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *,
			 size_t);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *,
		       const sigset_t *);
	int (*epoll_ctl)(int, int, int, struct epoll_event *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
	int (*epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *,
			    const sigset_t *);
	/* preload_open.c: descriptors libusmc opens, threads it starts */
	int (*pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	int (*socketpair)(int, int, int, int[2]);
	int (*pipe)(int[2]);
	int (*pipe2)(int[2], int);
	int (*eventfd)(unsigned int, int);
	int (*epoll_create)(int);
	int (*epoll_create1)(int);
	int (*open)(const char *, int, ...);
	int (*open64)(const char *, int, ...);
	int (*openat)(int, const char *, int, ...);
	int (*openat64)(int, const char *, int, ...);
};
extern struct real_calls R;
void preload_real_resolve(void);

extern pid_t my_pid;	    /* getpid(), read at start and again in a child of fork() */
extern __thread int in_lib; /* the preload is calling into libusmc */

/*
 * A call into libusmc: while it runs, what libusmc calls of libc goes to
 * the real libc and the descriptors it opens go to the top of the range
 * (preload_fds.c). One expression, so in_lib cannot be left raised.
 */
#define IN_LIB(call)                        \
	({                                  \
		__typeof__(call) in_lib_r_; \
		in_lib++;                   \
		in_lib_r_ = (call);         \
		in_lib--;                   \
		in_lib_r_;                  \
	})

/* This thread works for libusmc (or the preload) all its life: every
 * call it makes goes to the real libc. */
static inline void in_lib_thread(void)
{
	in_lib = 1;
}

int preload_thread_start(void *(*fn)(void *), void *arg, const char *name, size_t stack);

/* Set errno from a negative errno value; returns -1. */
static inline long set_err(long neg)
{
	extern int *__errno_location(void);
	*__errno_location() = (int)-neg;
	return -1;
}

#endif
