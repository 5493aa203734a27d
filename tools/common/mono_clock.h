/* SPDX-License-Identifier: MIT */
/*
 * The monotonic clock of the tools and tests, for deadlines and for timing
 * (never the wall clock, which may jump). One reading, four units.
 */
#ifndef USMC_TOOLS_MONO_CLOCK_H
#define USMC_TOOLS_MONO_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mono_us(void)
{
	return mono_ns() / 1000u;
}

static inline long mono_ms(void)
{
	return (long)(mono_ns() / 1000000u);
}

/* Seconds, with the clock's full resolution. */
static inline double mono_s(void)
{
	return (double)mono_ns() / 1e9;
}

#endif
