/* SPDX-License-Identifier: MIT */
/*
 * Shared bits of the fuzz targets: the libFuzzer entry point prototype and
 * an assertion that aborts (so libFuzzer records a crash) in both the
 * fuzzing and the corpus-replay build.
 */
#ifndef USMC_FUZZ_COMMON_H
#define USMC_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond)                                                                         \
	do {                                                                                      \
		if (!(cond)) {                                                                    \
			fprintf(stderr, "%s:%d: oracle failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                  \
		}                                                                                 \
	} while (0)

#endif
