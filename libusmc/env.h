/* SPDX-License-Identifier: MIT */
/*
 * How libusmc reads its environment: every USMC_* variable is read with
 * env_get() or env_secure_get(), from the process's environment or from a
 * list of "NAME=VALUE" strings a caller handed over, ending with NULL as
 * environ(7) (usmc_ctx_create_env(): the preload's copy of the variables
 * as they were when it loaded, which a program that clears its
 * environment afterwards does not take away). The preload
 * (libusmc/preload/) compiles env.c too, for its own variables.
 *
 * A process that runs with privileges its caller lacks (set-user-ID,
 * set-group-ID, file capabilities: the kernel's AT_SECURE, glibc's
 * secure_getenv()) takes its environment from that caller. There a
 * variable that names a file or a cgroup, makes the library use a
 * privilege the caller may lack, or sends the process's diagnostics
 * somewhere must be ignored: env_secure_get() reads those, NULL (unset) in
 * such a process. Bounded values that only tune the process's own
 * connections, as an unprivileged process may for itself, are read with
 * env_get() everywhere. man usmc(7), SECURITY, lists which is which.
 */
#ifndef USMC_ENV_H
#define USMC_ENV_H

#include <stdbool.h>

bool env_privileged(void);
/* @name's value in @env, or in the process's environment if @env is NULL;
 * NULL if unset */
const char *env_get(const char *const *env, const char *name);
/* env_get(), but NULL in a privileged process */
const char *env_secure_get(const char *const *env, const char *name);

#endif
