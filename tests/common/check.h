/* SPDX-License-Identifier: MIT */
/*
 * Failing a test program that is not a cmocka test (a stress run, an rxe
 * scenario): die() prints "FAIL: <message>" and exits 1; CHECK(cond, fmt,
 * ...) dies with the file and line unless @cond holds. A ctest fails on the
 * exit status, so a check is never a skip.
 */
#ifndef USMC_TEST_CHECK_H
#define USMC_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* "FAIL: [@file:@line: ]<message>", then exit(1). */
static inline void __attribute__((noreturn, format(printf, 3, 0)))
vdie_at(const char *file, int line, const char *fmt, va_list ap)
{
	fprintf(stderr, "FAIL: ");
	if (file)
		fprintf(stderr, "%s:%d: ", file, line);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	exit(1);
}

static inline void __attribute__((noreturn, format(printf, 3, 4)))
die_at(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie_at(file, line, fmt, ap);
}

static inline void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie_at(NULL, 0, fmt, ap);
}

#define CHECK(cond, ...)                                         \
	do {                                                     \
		if (!(cond))                                     \
			die_at(__FILE__, __LINE__, __VA_ARGS__); \
	} while (0)

#endif
