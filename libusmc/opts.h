/* SPDX-License-Identifier: MIT */
/*
 * Integer options with environment defaults: one table says each option's
 * environment variable, default and range; contexts, listeners and
 * connections each hold a copy (struct usmc_opts) inherited at creation.
 */
#ifndef USMC_OPTS_H
#define USMC_OPTS_H

#include <usmc/usmc.h>

struct usmc_opts {
	long v[USMC_OPT_COUNT_];
};

/* Fill @o with the built-in defaults, then apply the environment.
 * Returns 0, or -EINVAL naming nothing: a variable was set to a value that
 * is not an integer in the option's range. */
int opts_init_from_env(struct usmc_opts *o);

int opts_set(struct usmc_opts *o, enum usmc_opt opt, long value);
int opts_get(const struct usmc_opts *o, enum usmc_opt opt, long *value);

/* The effective handshake congestion threshold (0 means 2 x threads). */
long opts_hs_congestion(const struct usmc_opts *o);

#endif
