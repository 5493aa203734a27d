/* SPDX-License-Identifier: MIT */
/*
 * ABI helpers: structs the library fills for the caller (usmc_conn_info,
 * the stats) are filled up to a size the caller passes, so they can grow
 * (usmc.h). The 0.1 symbols, which took no size, stay exported for binaries
 * built against 0.1 and fill exactly the 0.1 layout (glibc / liburing
 * style .symver; libusmc.map lists them under USMC_0.1).
 */
#ifndef USMC_ABI_H
#define USMC_ABI_H

#include <stddef.h>
#include <string.h>

/* Export @impl as the older version @name@@ver only (@ver a string). */
#define USMC_SYMVER_OLD(impl, name, ver) __asm__(".symver " #impl "," #name "@" ver)

/* Bytes up to the end of @member: a struct's size in an older version
 * whose last member was @member (fields are only ever appended). */
#define USMC_OFFSETOFEND(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* Copy @full (the library's complete struct, @full_size bytes) into the
 * caller's @out of @size bytes: min(size, full_size) bytes, the rest of
 * @size zeroed. */
static inline void abi_fill(void *out, size_t size, const void *full, size_t full_size)
{
	size_t n = size < full_size ? size : full_size;

	memcpy(out, full, n);
	if (size > n)
		memset((char *)out + n, 0, size - n);
}

#endif
