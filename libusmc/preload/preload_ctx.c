// SPDX-License-Identifier: MIT
/*
 * The libusmc context of this process (docs/preload.md): made on first
 * use, from the USMC_* variables of the start (preload_config.c); a child
 * of fork() makes its own, as the parent's stays the parent's (usmc.h).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "../env.h"
#include "preload.h"

#define CTX_DEVICES_MAX 16 /* devices looked at for an address (a GID) */

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct usmc_ctx *g_ctx;	  /* ctx_lock; read without it once g_ctx_pid says so */
static _Atomic pid_t g_ctx_pid;	  /* written under ctx_lock, after g_ctx */
static pid_t g_ctx_failed_pid;	  /* ctx_lock */
static bool g_has_devices;	  /* written under ctx_lock */
static int g_event_fd;		  /* ctx_lock; read without it once g_event_pid says so */
static _Atomic pid_t g_event_pid; /* written under ctx_lock, after g_event_fd */

/*
 * Every data call and epoll_ctl() of a connection asks for the context:
 * once this process has made it, the answer costs one atomic load, not a
 * lock (a child of fork() has another pid, and takes the lock to make its
 * own).
 */
struct usmc_ctx *preload_ctx(void)
{
	struct usmc_ctx *ctx = NULL;
	char msg[160];
	int rc;

	if (atomic_load_explicit(&g_ctx_pid, memory_order_acquire) == my_pid)
		return g_ctx;
	pthread_mutex_lock(&ctx_lock);
	if (g_ctx && atomic_load_explicit(&g_ctx_pid, memory_order_relaxed) == my_pid) {
		ctx = g_ctx;
	} else if (g_ctx_failed_pid != my_pid) {
		/* a child of fork(): the parent's context is the parent's */
		rc = IN_LIB(usmc_ctx_create_env(&ctx, preload_settings()));
		if (rc) {
			ctx = NULL;
			g_ctx_failed_pid = my_pid;
			if (usmc_env_check_env(preload_settings(), msg, sizeof(msg)))
				snprintf(msg, sizeof(msg), "%s", usmc_strerror(rc));
			preload_log(0, "no libusmc context (%s): every connection stays plain TCP",
				    msg);
		} else {
			struct usmc_device_info devs[CTX_DEVICES_MAX];
			int n = usmc_ctx_devices(ctx, devs, CTX_DEVICES_MAX);

			g_has_devices = false;
			for (int i = 0; i < n && i < CTX_DEVICES_MAX; i++)
				g_has_devices |= devs[i].gid_index >= 0;
			g_ctx = ctx;
			atomic_store_explicit(&g_ctx_pid, my_pid, memory_order_release);
		}
	}
	pthread_mutex_unlock(&ctx_lock);
	return ctx;
}

/*
 * Kernel-compatible mode needs its BPF program loaded by a process that
 * may (root): a pre-fork server's master listens as root, and its workers,
 * which adopt the socket where they accept, have dropped root by then
 * (nginx's `user`). They use the program of their parent (libusmc,
 * kcompat.c borrow_parent()) if it has one: so the process that listens
 * makes its context at once, not at its first accept or poll, and before
 * the kernel's listen(), which it marks the socket for
 * (usmc_listen_prepare(): preload_listen.c). Unless the mode is off: then
 * nothing needs it before then.
 */
struct usmc_ctx *preload_ctx_at_listen(void)
{
	const char *s = env_get(preload_settings(), "USMC_KERNEL_COMPAT");

	return !s || strcmp(s, "0") ? preload_ctx() : NULL;
}

/* The context's event descriptor, made once per process (as the context:
 * one atomic load once it is there). */
int preload_ctx_event_fd(void)
{
	struct usmc_ctx *ctx;
	int rc;

	if (atomic_load_explicit(&g_event_pid, memory_order_acquire) == my_pid)
		return g_event_fd;
	ctx = preload_ctx();
	if (!ctx)
		return -ENODEV;
	pthread_mutex_lock(&ctx_lock);
	if (atomic_load_explicit(&g_event_pid, memory_order_relaxed) != my_pid) {
		g_event_fd = IN_LIB(usmc_ctx_event_fd(ctx));
		atomic_store_explicit(&g_event_pid, my_pid, memory_order_release);
	}
	rc = g_event_fd;
	pthread_mutex_unlock(&ctx_lock);
	return rc;
}

bool preload_ctx_has_devices(void)
{
	return g_has_devices;
}

void ctx_fork_prepare(void)
{
	pthread_mutex_lock(&ctx_lock);
}

void ctx_fork_parent(void)
{
	pthread_mutex_unlock(&ctx_lock);
}

void ctx_fork_child(void)
{
	pthread_mutex_init(&ctx_lock, NULL);
}
