/* SPDX-License-Identifier: MIT */
/*
 * How libusmc reads its environment: every USMC_* variable is read with
 * getenv() or env_secure_get(). The preload (libusmc/preload/) compiles
 * env.c too, for its own variables.
 *
 * A process that runs with privileges its caller lacks (set-user-ID,
 * set-group-ID, file capabilities: the kernel's AT_SECURE, glibc's
 * secure_getenv()) takes its environment from that caller. There a
 * variable that names a file or a cgroup, makes the library use a
 * privilege the caller may lack, or sends the process's diagnostics
 * somewhere must be ignored: env_secure_get() reads those, NULL (unset) in
 * such a process. Bounded values that only tune the process's own
 * connections, as an unprivileged process may for itself, are read with
 * getenv() everywhere. man usmc(7), SECURITY, lists which is which.
 */
#ifndef USMC_ENV_H
#define USMC_ENV_H

#include <stdbool.h>

bool env_privileged(void);
const char *env_secure_get(const char *name);

#endif
