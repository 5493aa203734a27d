// SPDX-License-Identifier: MIT
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "env.h"
#include "opts.h"

/* Whether a privileged process reads the option's variable (env.h). */
enum opt_env {
	/* bounded tuning of the process's own connections: read everywhere */
	OPT_ENV_TUNES,
	/*
	 * Raising it raises the memory the process pins (registers with the
	 * RDMA device). A set-user-ID root program, or one with CAP_IPC_LOCK,
	 * may pin beyond its caller's RLIMIT_MEMLOCK: so a privileged process
	 * ignores the variable (env_secure_get()). Not USMC_MAX_BUFS: its
	 * default is its maximum.
	 */
	OPT_ENV_PINS,
};

struct opt_desc {
	const char *env;
	long def;
	long min;
	long max;
	enum opt_env trust;
};

#define KiB 1024L
#define MiB (1024L * KiB)

/* Defaults follow Linux where Linux has one (see the comments in usmc.h). */
static const struct opt_desc opt_table[USMC_OPT_COUNT_] = {
	[USMC_OPT_SMC] = {"USMC_SMC", 1, 0, 1, OPT_ENV_TUNES},
	[USMC_OPT_PROBE_MS] = {"USMC_PROBE_MS", 100, 1, 60000, OPT_ENV_TUNES},
	[USMC_OPT_CLC_TIMEOUT_MS] = {"USMC_CLC_TIMEOUT_MS", 6000, 100, 600000, OPT_ENV_TUNES},
	[USMC_OPT_AUTO_FALLBACK] = {"USMC_AUTO_FALLBACK", 0, 0, 1, OPT_ENV_TUNES},
	[USMC_OPT_HS_THREADS] = {"USMC_HS_THREADS", 2, 1, 64, OPT_ENV_TUNES},
	[USMC_OPT_HS_CONGESTION] = {"USMC_HS_CONGESTION", 0, 0, 65536, OPT_ENV_TUNES},
	[USMC_OPT_RMB_SIZE] = {"USMC_RMB_SIZE", 64 * KiB, 16 * KiB, 512 * MiB, OPT_ENV_PINS},
	[USMC_OPT_SNDBUF_SIZE] = {"USMC_SNDBUF_SIZE", 64 * KiB, 16 * KiB, 512 * MiB, OPT_ENV_PINS},
	[USMC_OPT_LINGER_MS] = {"USMC_LINGER_MS", 2000, 0, 600000, OPT_ENV_TUNES},
	[USMC_OPT_BUSY_POLL] = {"USMC_BUSY_POLL", 0, 0, 1, OPT_ENV_TUNES},
	[USMC_OPT_TESTLINK_MS] = {"USMC_TESTLINK_MS", 30000, 0, 3600000, OPT_ENV_TUNES},
	[USMC_OPT_LGR_IDLE_MS] = {"USMC_LGR_IDLE_MS", 600000, 100, 86400000, OPT_ENV_TUNES},
	[USMC_OPT_ACCEPT_URING] = {"USMC_ACCEPT_URING", 1, 0, 1, OPT_ENV_TUNES},
	[USMC_OPT_DEFER_ACCEPT] = {"USMC_DEFER_ACCEPT", 0, 0, 3600, OPT_ENV_TUNES},
	[USMC_OPT_ACCEPT_BATCH] = {"USMC_ACCEPT_BATCH", 1, 0, 1, OPT_ENV_TUNES},
	[USMC_OPT_CLOSE_WAIT_MS] = {"USMC_CLOSE_WAIT_MS", 60000, 100, 3600000, OPT_ENV_TUNES},
	[USMC_OPT_MAX_BUFS] = {"USMC_MAX_BUFS", 255, 1, 255, OPT_ENV_TUNES},
	[USMC_OPT_MAX_LGRS] = {"USMC_MAX_LGRS", 128, 1, 4096, OPT_ENV_PINS},
	[USMC_OPT_MAX_LGRS_PER_PEER] = {"USMC_MAX_LGRS_PER_PEER", 8, 1, 4096, OPT_ENV_PINS},
	[USMC_OPT_STAT] = {"USMC_STAT", 1, 0, 1, OPT_ENV_TUNES},
	[USMC_OPT_HS_TIMEOUT_MS] = {"USMC_HS_TIMEOUT_MS", 10000, 100, 600000, OPT_ENV_TUNES},
	[USMC_OPT_SPIN] = {"USMC_SPIN", 1, 0, 1, OPT_ENV_TUNES},
	[USMC_OPT_REG_MEM_MAX] = {"USMC_REG_MEM_MAX", 0, -1, LONG_MAX, OPT_ENV_PINS},
	[USMC_OPT_ACCEPT_DIRECT] = {"USMC_ACCEPT_DIRECT", 1, 0, 1, OPT_ENV_TUNES},
	[USMC_OPT_MAX_LINKS] = {"USMC_MAX_LINKS", 2, 1, 2, OPT_ENV_TUNES},
};

static int parse_long(const char *s, long *out)
{
	char *end;

	errno = 0;
	long v = strtol(s, &end, 0);
	if (errno || end == s || *end != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

int opts_set(struct usmc_opts *o, enum usmc_opt opt, long value)
{
	if ((unsigned int)opt >= USMC_OPT_COUNT_)
		return -EINVAL;
	if (value < opt_table[opt].min || value > opt_table[opt].max)
		return -EINVAL;
	o->v[opt] = value;
	return 0;
}

int opts_get(const struct usmc_opts *o, enum usmc_opt opt, long *value)
{
	if ((unsigned int)opt >= USMC_OPT_COUNT_ || !value)
		return -EINVAL;
	*value = o->v[opt];
	return 0;
}

int opts_set_locked(struct usmc_opts *o, pthread_mutex_t *lock, enum usmc_opt opt, long value)
{
	int rc;

	pthread_mutex_lock(lock);
	rc = opts_set(o, opt, value);
	pthread_mutex_unlock(lock);
	return rc;
}

int opts_get_locked(const struct usmc_opts *o, pthread_mutex_t *lock, enum usmc_opt opt,
		    long *value)
{
	int rc;

	pthread_mutex_lock(lock);
	rc = opts_get(o, opt, value);
	pthread_mutex_unlock(lock);
	return rc;
}

void opts_copy_locked(const struct usmc_opts *o, pthread_mutex_t *lock, struct usmc_opts *out)
{
	pthread_mutex_lock(lock);
	*out = *o;
	pthread_mutex_unlock(lock);
}

/* Option @i from @env (env.h) into *@v (the default if unset); -EINVAL
 * and a message in @msg if the variable is set to a bad value. */
static int opt_from_env(const char *const *env, int i, long *v, char *msg, size_t len)
{
	const struct opt_desc *d = &opt_table[i];
	const char *s =
		d->trust == OPT_ENV_PINS ? env_secure_get(env, d->env) : env_get(env, d->env);

	*v = d->def;
	if (!s)
		return 0;
	if (parse_long(s, v)) {
		env_msg(msg, len, "%s=%s: not an integer", d->env, s);
		return -EINVAL;
	}
	if (*v < d->min || *v > d->max) {
		env_msg(msg, len, "%s=%s: out of range %ld..%ld", d->env, s, d->min, d->max);
		return -EINVAL;
	}
	return 0;
}

int opts_init_from_env(struct usmc_opts *o, const char *const *env)
{
	for (int i = 0; i < USMC_OPT_COUNT_; i++) {
		int rc = opt_from_env(env, i, &o->v[i], NULL, 0);

		if (rc)
			return rc;
	}
	return 0;
}

int opts_env_check(const char *const *env, char *msg, size_t len)
{
	long v;

	for (int i = 0; i < USMC_OPT_COUNT_; i++) {
		int rc = opt_from_env(env, i, &v, msg, len);

		if (rc)
			return rc;
	}
	return 0;
}

void env_msg(char *msg, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!msg || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
}

long opts_hs_congestion(const struct usmc_opts *o)
{
	long t = o->v[USMC_OPT_HS_CONGESTION];

	return t ? t : 2 * o->v[USMC_OPT_HS_THREADS];
}
