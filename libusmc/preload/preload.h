/* SPDX-License-Identifier: MIT */
/*
 * libusmc-preload.so: unmodified programs over libusmc (docs/preload.md).
 *
 * preload_core.c   the real libc calls, the fd table, objects, the
 *                  per-process context, counters, fork, exit
 * preload_sock.c   connect, listen, accept, close, dup, options, names,
 *                  fcntl, ioctl, shutdown
 * preload_io.c     read/write/recv/send families, sendfile
 * preload_poll.c   poll, ppoll, select, pselect, epoll_ctl
 */
#ifndef USMC_PRELOAD_H
#define USMC_PRELOAD_H

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <usmc/usmc.h>

#define PRELOAD_EXPORT __attribute__((visibility("default")))

/* The libc functions the preload wraps, found with dlsym(RTLD_NEXT). */
struct real_calls {
	int (*socket)(int, int, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*close)(int);
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
	/* preload_fds.c: descriptors libusmc opens */
	int (*pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	int (*socketpair)(int, int, int, int[2]);
	int (*eventfd)(unsigned int, int);
	int (*epoll_create)(int);
	int (*epoll_create1)(int);
	int (*open)(const char *, int, ...);
	int (*open64)(const char *, int, ...);
	int (*openat)(int, const char *, int, ...);
	int (*openat64)(int, const char *, int, ...);
};
extern struct real_calls R;
extern atomic_bool preload_ready;
void preload_init(void);
#define P_INIT()                                                                 \
	do {                                                                     \
		if (!atomic_load_explicit(&preload_ready, memory_order_acquire)) \
			preload_init();                                          \
	} while (0)

/* What an application descriptor in the table is (docs/preload.md). */
enum pobj_kind {
	PO_LISTEN = 1, /* a listening TCP socket; the usmc listener comes on first use */
	PO_CONNECTING, /* usmc connect in progress */
	PO_SMCR,       /* an established connection running SMC-R */
	PO_FAILED,     /* a connect that failed: its error is reported once */
	PO_PLAIN,      /* a plain socket now, its descriptors about to be released */
};

/* An epoll_ctl() registration of a managed descriptor. */
struct epreg {
	int epfd, fd;
	struct epoll_event ev;
	struct epreg *next;
};

/* A listener's private dup() of its eventfd for descriptor @fd. */
struct shadow {
	int fd, sfd;
	struct shadow *next;
};

/*
 * One object per open file the preload manages; each descriptor in the
 * table and each call in flight holds a reference. Objects are never
 * freed (a free list reuses them), so a lookup may take a reference on a
 * stale pointer safely and re-check the slot (preload_core.c).
 */
struct pobj {
	atomic_int refs;
	pthread_mutex_t lock; /* guards everything below but fdv (tab_lock) */
	pthread_cond_t cond;  /* PO_CONNECTING settled */
	enum pobj_kind kind;
	pid_t pid;	 /* the process whose usmc objects these are */
	bool nonblock;	 /* O_NONBLOCK as the application sees it */
	bool linger0;	 /* SO_LINGER {1, 0}: abort at close */
	int rcvtimeo_ms; /* SO_RCVTIMEO, -1 = none */
	int sndtimeo_ms; /* SO_SNDTIMEO, -1 = none */
	/* the descriptors of the application that refer to it (tab_lock) */
	int *fdv;
	int nfdv, capfdv;
	struct epreg *regs;

	/* connections */
	struct usmc_conn *c;
	int tcpfd;	   /* PO_CONNECTING: the library's descriptor of the socket */
	int gate[2];	   /* PO_CONNECTING with a helper thread: N is gate[0] */
	bool bg;	   /* a helper thread runs the handshake */
	bool settled;	   /* PO_CONNECTING: the helper is done */
	int connect_state; /* second connect(): 0 once, then EISCONN */
	int pending_err;   /* PO_FAILED: the connect's errno, reported once */
	bool is_server;
	struct sockaddr_storage local, peer;
	socklen_t llen, plen;

	/* listeners */
	struct usmc_listener *l; /* in process pid */
	int lfd;		 /* usmc_listener_fd(l) */
	int wakefd;		 /* eventfd: shutdown() wakes a blocked accept */
	int backlog;
	bool shut;
	struct shadow *shadows;

	struct pobj *free_next, *all_next;
};

/* the table */
struct pobj *obj_get(int fd); /* a reference, or NULL: not managed */
void obj_put(struct pobj *o);
struct pobj *obj_new(enum pobj_kind kind); /* one reference */
int tab_add(int fd, struct pobj *o);	   /* takes a new reference for @fd */
/* Forget @fd (close or dup2 over it): epoll registrations of @fd are
 * deleted; returns the object it referred to (its reference, to be put
 * by the caller after the real close), or NULL. */
struct pobj *tab_remove(int fd);
/* Forget every descriptor of @o (it became a plain socket). */
void tab_release_all(struct pobj *o);
void tab_lock_acquire(void);
void tab_lock_release(void);
struct pobj *tab_peek(int fd);

/* preload_fds.c: libusmc's descriptors live at the top of the range */
int preload_fd_base(void);
int preload_relocate(int fd);	       /* @fd moved to preload_fd_base() or above */
int dup_high(int fd);		       /* a close-on-exec duplicate up there */
void fd_set_nonblock(int fd, bool nb); /* O_NONBLOCK of the file of @fd */
/* @fd refers to @target's file, keeping FD_CLOEXEC as in @fdfl (F_GETFD's) */
void fd_point(int fd, int target, int fdfl);

/* the process */
extern pid_t my_pid;
extern bool preload_disabled;
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
struct usmc_ctx *preload_ctx(void);
bool preload_ctx_has_devices(void);
bool preload_force_gate(void);
/* USMC_RUN_SMC_PEERS allows SMC-R towards @sa (always true when unset) */
bool preload_peer_allowed(const struct sockaddr *sa);

/* counters and log (usmc_run -v) */
enum pre_reason {
	PR_NO_CONTEXT = 0x0b000001u,
	PR_LISTEN_ADOPT = 0x0b000002u,
	PR_CONNECT_ADOPT = 0x0b000003u,
};
void count_conn(bool server, const struct usmc_conn_info *info, int fd);
void count_reason(uint32_t reason, bool server);
void count_connect_failed(int err);
void count_unsupported(const char *what);
void count_forked(void);
void preload_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* background closes of SMC-R connections */
void reaper_close(struct usmc_conn *c, bool abort_it);

/* preload_sock.c */
void obj_destroy(struct pobj *o);
int listener_activate(struct pobj *o, int fd);
void listener_giveup(struct pobj *o, int fd, int reason); /* it stays a plain socket */
int conn_finish(struct pobj *o, bool wait);
/* A failed connect's error, reported once; the socket is plain afterwards. */
int failed_take(struct pobj *o);
int shadow_fd(struct pobj *o, int fd);
void regs_delete_fd(struct pobj *o, int fd);
void regs_forget(struct pobj *o); /* requires o->lock or the object alone */

/* preload_io.c */
#define PO_PASS	 (-0x7fff0000L) /* not (any more) managed: do the real call */
#define PO_RETRY (-0x7fff0001L) /* the object changed state: look the descriptor up again */
ssize_t po_recv(struct pobj *o, const struct iovec *iov, int iovcnt, int flags);
ssize_t po_send(struct pobj *o, const struct iovec *iov, int iovcnt, int flags);
int po_wait(struct pobj *o, short events, int timeout_ms);
/* the _FORTIFY_SOURCE entry points glibc's headers do not declare */
ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
		       struct sockaddr *addr, socklen_t *alen);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
		size_t fdslen);

/* Set errno from a negative errno value; returns -1. */
static inline long set_err(long neg)
{
	extern int *__errno_location(void);
	*__errno_location() = (int)-neg;
	return -1;
}

#endif
