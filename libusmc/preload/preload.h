/* SPDX-License-Identifier: MIT */
/*
 * libusmc-preload.so: unmodified programs over libusmc (docs/preload.md).
 * Each file is one mechanism; from the ground up:
 *
 * preload_real.c       the real libc calls, in_lib, the preload's threads
 * preload_fds.c        libusmc's descriptors at the top of the range, a
 *                      descriptor's flags
 * preload_log.c        counters, the summary at exit, the log
 * preload_config.c     the environment: verbosity, peers, the log file
 * preload_ctx.c        the libusmc context of this process
 * preload_reaper.c     background closes of SMC-R connections
 * preload_listener.c   the usmc listener behind a listening socket
 * preload_epreg.c      epoll registrations of managed descriptors
 * preload_obj.c        objects: their pool and their end
 * preload_tab.c        the table of managed descriptors
 * preload_fork.c       fork(): the child's copies
 * preload_init.c       start of the process, exit
 * preload_connecting.c a connect in progress, and how it settles
 * preload_stream.c     the data path of an SMC-R connection
 *
 * and the wrapped calls, each file a family:
 *
 * preload_open.c       socket, socketpair, pipe, eventfd, epoll_create,
 *                      open, pthread_create (what libusmc opens or starts)
 * preload_connect.c    connect
 * preload_listen.c     listen, accept, accept4
 * preload_close.c      close, close_range, closefrom, dup, dup2, dup3
 * preload_fcntl.c      fcntl, fcntl64, ioctl
 * preload_sockopt.c    setsockopt, getsockopt, getsockname, getpeername,
 *                      shutdown
 * preload_io.c         read/write/recv/send families
 * preload_sendfile.c   sendfile, splice
 * preload_poll.c       poll, ppoll, select, pselect
 * preload_epoll.c      epoll_ctl, epoll_wait, epoll_pwait, epoll_pwait2;
 *                      the completions that the program's waits run
 */
#ifndef USMC_PRELOAD_H
#define USMC_PRELOAD_H

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <usmc/usmc.h>

#include "preload_real.h"
#include "preload_obj.h"

#define PRELOAD_EXPORT __attribute__((visibility("default")))

/* preload_init.c: every wrapped call first makes sure the preload is set up */
extern atomic_bool preload_ready;
void preload_init(void);
#define P_INIT()                                                                 \
	do {                                                                     \
		if (!atomic_load_explicit(&preload_ready, memory_order_acquire)) \
			preload_init();                                          \
	} while (0)

/* preload_fds.c: libusmc's descriptors live at the top of the range */
int preload_fd_base(void);
int preload_relocate(int fd);	       /* @fd moved to preload_fd_base() or above */
int dup_high(int fd);		       /* a close-on-exec duplicate up there */
void fd_set_nonblock(int fd, bool nb); /* O_NONBLOCK of the file of @fd */
/* @fd refers to @target's file, keeping FD_CLOEXEC as in @fdfl (F_GETFD's) */
void fd_point(int fd, int target, int fdfl);
bool fd_is_inet_tcp(int fd); /* a TCP socket over IPv4 or IPv6 */

/* preload_log.c: counters and log (usmc_run -v) */
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
void counters_reset(void);
void preload_summary(void);
void preload_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void preload_log_level(int level);
void preload_log_to(int fd);

/* preload_config.c */
extern bool preload_disabled; /* USMC_SMC=0 */
void preload_config_read(void);
/* The USMC_* variables of the start, for usmc_ctx_create_env() */
const char *const *preload_settings(void);
bool preload_force_gate(void);
/*
 * A client of @ctx may propose SMC-R to server @sa: one USMC_RUN_SMC_PEERS
 * names; without the list, any in kernel-compatible mode, where libusmc
 * proposes only to a server whose SYN-ACK said it speaks SMC; else none. A
 * server that does not speak SMC would read the proposal as its request.
 */
bool preload_may_propose(struct usmc_ctx *ctx, const struct sockaddr *sa);

/* preload_ctx.c */
struct usmc_ctx *preload_ctx(void);
/* At the program's listen(), before the kernel's: the context now, in
 * kernel-compatible mode (NULL otherwise, or without one) */
struct usmc_ctx *preload_ctx_at_listen(void);
bool preload_ctx_has_devices(void);
/* usmc_ctx_event_fd() of this process's context, or a negative errno */
int preload_ctx_event_fd(void);
void ctx_fork_prepare(void);
void ctx_fork_parent(void);
void ctx_fork_child(void);

/* preload_reaper.c: background closes of SMC-R connections. The threads
 * that linger side by side, and the closes in progress (queued or
 * lingering) beyond which a close is abortive (docs/preload.md). */
#define REAPER_MAX_THREADS 8
#define REAPER_MAX_PENDING 1024
void reaper_close(struct usmc_conn *c, bool abort_it);
unsigned long reaper_overflows(void);
void reaper_flush(void);
void reaper_fork_child(void);

/* preload_epoll.c: a PO_SMCR object in epoll set @epfd has its
 * completions run by the program's waits on it (evloop_register(),
 * requires o->lock), or by the library's thread again for good (forgo:
 * a wait that does not run them, poll() or select(), polls it) */
void evloop_register(struct pobj *o, int epfd);
void evloop_forgo_locked(struct pobj *o);
void evloop_forgo(struct pobj *o);
/* The event descriptor a wait on looped @o polls beside it (-1: none), and
 * what to call when it is readable: the completions run here, the pairs
 * they made ready are so when it returns. */
int evloop_fd(struct pobj *o);
void evloop_run(void);
/* Descriptor number @fd is another file now (tab_fresh()): if it was an
 * epoll set that held the event descriptor, the new one does not. */
void evloop_set_gone(int fd);
void evloop_fork_child(void);

/* preload_listener.c */
int listener_activate(struct pobj *o, int fd);
int shadow_fd(struct pobj *o, int fd);
void listener_drop(struct pobj *o);

/* preload_fork.c */
void preload_fork_handlers(void);

/* preload_connecting.c */
int conn_finish(struct pobj *o, bool wait);
void conn_settle(struct pobj *o, int rc);
void conn_helper_start(struct pobj *o, int fd, int fdfl);
/* A failed connect's error, reported once; the socket is plain afterwards. */
int failed_take(struct pobj *o);

/* preload_stream.c */
#define PO_PASS	 (-0x7fff0000L) /* not (any more) managed: do the real call */
#define PO_RETRY (-0x7fff0001L) /* the object changed state: look the descriptor up again */
ssize_t po_enter(struct pobj *o, bool nb);
ssize_t po_recv(struct pobj *o, const struct iovec *iov, int iovcnt, int flags);
ssize_t po_send(struct pobj *o, const struct iovec *iov, int iovcnt, int flags);

/* Run @managed on the object of @fd, or @real when @fd is not managed. */
#define DISPATCH(fd, managed, real)                                         \
	do {                                                                \
		P_INIT();                                                   \
		for (;;) {                                                  \
			struct pobj *o = tab_peek(fd) ? obj_get(fd) : NULL; \
			ssize_t r_;                                         \
			if (!o)                                             \
				return real;                                \
			r_ = managed;                                       \
			obj_put(o);                                         \
			if (r_ == PO_PASS)                                  \
				return real;                                \
			if (r_ != PO_RETRY)                                 \
				return r_;                                  \
		}                                                           \
	} while (0)

#define ONE_IOV(buf, len) (&(struct iovec){.iov_base = (void *)(buf), .iov_len = (len)})

/* the wrappers' helpers: preload_open.c, preload_listen.c, preload_close.c */
/* A descriptor a wrapped call just made: the application's has no stale
 * entry left (tab_fresh()), libusmc's moves to the top of the range.
 * Returns the descriptor. */
int fd_opened(int fd);
void listener_giveup(struct pobj *o, int fd, int reason); /* it stays a plain socket */
int dup_managed(int oldfd, int newfd);

/* the _FORTIFY_SOURCE entry points glibc's headers do not declare */
ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
		       struct sockaddr *addr, socklen_t *alen);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
		size_t fdslen);

/* A libusmc return value as an errno: USMC_E* codes have none of their own. */
static inline int usmc_errno(int rc)
{
	if (rc >= -4095)
		return -rc;
	return rc == USMC_EPROTO_CLC ? EPROTO : ECONNABORTED;
}

/* The length of an IPv4 or IPv6 address. */
static inline socklen_t ss_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* Copy @ss to a caller's @addr of *@alen bytes, as the kernel: cut short
 * to fit, *@alen the full length. */
static inline void copy_addr(const struct sockaddr_storage *ss, socklen_t sslen,
			     struct sockaddr *addr, socklen_t *alen)
{
	if (!addr || !alen)
		return;
	memcpy(addr, ss, *alen < sslen ? *alen : sslen);
	*alen = sslen;
}

#endif
