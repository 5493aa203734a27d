// SPDX-License-Identifier: MIT
/*
 * The libusmc context of this process (docs/preload.md): made on first
 * use, from the USMC_* variables of the start (preload_config.c); a child
 * of fork() makes its own, as the parent's stays the parent's (usmc.h).
 */
#include <stdio.h>
#include <string.h>

#include "../env.h"
#include "preload.h"

#define CTX_DEVICES_MAX 16 /* devices looked at for an address (a GID) */

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct usmc_ctx *g_ctx;		  /* ctx_lock */
static pid_t g_ctx_pid, g_ctx_failed_pid; /* ctx_lock */
static bool g_has_devices;		  /* written under ctx_lock */

struct usmc_ctx *preload_ctx(void)
{
	struct usmc_ctx *ctx = NULL;
	char msg[160];
	int rc;

	pthread_mutex_lock(&ctx_lock);
	if (g_ctx && g_ctx_pid == my_pid) {
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
			g_ctx_pid = my_pid;
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

int preload_ctx_event_fd(void)
{
	static pid_t pid; /* ctx_lock */
	static int fd;	  /* ctx_lock: the descriptor, made once per process */
	struct usmc_ctx *ctx = preload_ctx();
	int rc;

	if (!ctx)
		return -ENODEV;
	pthread_mutex_lock(&ctx_lock);
	if (pid != my_pid) {
		fd = IN_LIB(usmc_ctx_event_fd(ctx));
		pid = my_pid;
	}
	rc = fd;
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
