/* SPDX-License-Identifier: MIT */
/* Monotonic time for deadlines (never the wall clock, which may jump). */
#ifndef USMC_CLOCK_H
#define USMC_CLOCK_H

#include <time.h>

static inline long clock_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

#endif
