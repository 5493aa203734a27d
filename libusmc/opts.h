/* SPDX-License-Identifier: MIT */
/*
 * Integer options with environment defaults: one table says each option's
 * environment variable, default and range; contexts, listeners and
 * connections each hold a copy (struct usmc_opts) inherited at creation.
 *
 * Also how the library reads its environment in a privileged process
 * (env_secure_get()): every USMC_* variable is read here or through it.
 */
#ifndef USMC_OPTS_H
#define USMC_OPTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <usmc/usmc.h>

struct usmc_opts {
	long v[USMC_OPT_COUNT_];
};

/* Fill @o with the built-in defaults, then apply the environment.
 * Returns 0, or -EINVAL: a variable was set to a value that is not an
 * integer in the option's range (opts_env_check() names it). */
int opts_init_from_env(struct usmc_opts *o);

/* The options' variables only: 0, or -EINVAL and "VAR=value: why" in @msg
 * (usmc_env_check() in ctx.c adds the other variables). */
int opts_env_check(char *msg, size_t len);

/*
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
bool env_privileged(void);
const char *env_secure_get(const char *name);

/* snprintf into @msg unless it is NULL or @len 0. */
void env_msg(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

int opts_set(struct usmc_opts *o, enum usmc_opt opt, long value);
int opts_get(const struct usmc_opts *o, enum usmc_opt opt, long *value);

/*
 * Options any thread may set and read (a context's, a listener's): each
 * call holds @lock, which guards @o, for its one step.
 */
int opts_set_locked(struct usmc_opts *o, pthread_mutex_t *lock, enum usmc_opt opt, long value);
int opts_get_locked(const struct usmc_opts *o, pthread_mutex_t *lock, enum usmc_opt opt,
		    long *value);
void opts_copy_locked(const struct usmc_opts *o, pthread_mutex_t *lock, struct usmc_opts *out);

/* The effective handshake congestion threshold (0 means 2 x threads). */
long opts_hs_congestion(const struct usmc_opts *o);

#endif
