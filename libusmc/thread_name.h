/* SPDX-License-Identifier: MIT */
/*
 * Names of the library's threads, as top -H, ps -L, gdb and perf show them
 * (/proc/PID/task/TID/comm): usmc-accept, usmc-hs/N, usmc-lgr/ID
 * (docs/architecture.md, "Threads"). Linux keeps 15 characters.
 */
#ifndef USMC_THREAD_NAME_H
#define USMC_THREAD_NAME_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#define THREAD_NAME_MAX 16 /* with the NUL (TASK_COMM_LEN) */

/* Name @t (any thread of this process) after printf(@fmt, ...), cut to 15
 * characters; a failure leaves the inherited name. */
static inline void __attribute__((format(printf, 2, 3)))
thread_name_set(pthread_t t, const char *fmt, ...)
{
	char name[THREAD_NAME_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	(void)pthread_setname_np(t, name);
}

#endif
