/* SPDX-License-Identifier: MIT */
/*
 * The library's own error codes (include/usmc/usmc.h, USMC_E*) and how the
 * layers' codes become them.
 */
#ifndef USMC_ERROR_H
#define USMC_ERROR_H

#include <usmc/usmc.h>

#include "wire_err.h"

/*
 * usmc.h promises errnos and USMC_E* codes: a codec's WIRE_E_* code is a
 * malformed message from the peer, USMC_EPROTO_CLC. Every other value (0,
 * a result, a negative errno) passes unchanged.
 */
static inline int usmc_err_of_wire(int rc)
{
	return wire_is_err(rc) ? USMC_EPROTO_CLC : rc;
}

#endif
