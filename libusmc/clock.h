/* SPDX-License-Identifier: MIT */
/* Monotonic time for deadlines (never the wall clock, which may jump). */
#ifndef USMC_CLOCK_H
#define USMC_CLOCK_H

#include <stdint.h>
#include <time.h>

#define CLOCK_NSEC_PER_USEC 1000ULL
#define CLOCK_NSEC_PER_MSEC 1000000ULL
#define CLOCK_NSEC_PER_SEC  1000000000ULL

static inline uint64_t clock_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * CLOCK_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static inline long clock_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* @deadline_ms (a clock_now_ms() value) as a CLOCK_MONOTONIC timespec, for
 * pthread_cond_timedwait() on a condvar made with CLOCK_MONOTONIC. */
static inline void clock_deadline_ts(long deadline_ms, struct timespec *ts)
{
	ts->tv_sec = deadline_ms / 1000;
	ts->tv_nsec = (deadline_ms % 1000) * 1000000L;
}

#endif
