/* SPDX-License-Identifier: MIT */
/*
 * Integer options with environment defaults: one table says each option's
 * environment variable, default and range; contexts, listeners and
 * connections each hold a copy (struct usmc_opts) inherited at creation.
 * The variables are read as env.h says.
 */
#ifndef USMC_OPTS_H
#define USMC_OPTS_H

#include <pthread.h>
#include <stddef.h>

#include <usmc/usmc.h>

struct usmc_opts {
	long v[USMC_OPT_COUNT_];
};

/* Fill @o with the built-in defaults, then apply the variables of @env
 * (env.h; NULL: the process's environment). Returns 0, or -EINVAL: a
 * variable was set to a value that is not an integer in the option's
 * range (opts_env_check() names it). */
int opts_init_from_env(struct usmc_opts *o, const char *const *env);

/* The options' variables only: 0, or -EINVAL and "VAR=value: why" in @msg
 * (usmc_env_check() in ctx.c adds the other variables). */
int opts_env_check(const char *const *env, char *msg, size_t len);

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
