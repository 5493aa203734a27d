// SPDX-License-Identifier: MIT
#include <string.h>

#include "error.h"

const char *usmc_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case USMC_EPROTO_CLC:
		return "malformed or unexpected CLC message from the peer";
	case USMC_EPEERDECL:
		return "peer declined SMC where no fallback is possible";
	case USMC_ENODEV_SMCR:
		return "no usable SMC-R device";
	case USMC_EFORKED:
		return "object belongs to the parent process (used after fork)";
	}
	if (err < 0 && err > -4096)
		return strerrordesc_np(-err) ?: "unknown error";
	return "unknown error";
}

const char *usmc_mode_name(enum usmc_mode mode)
{
	switch (mode) {
	case USMC_MODE_SMCR:
		return "SMC-R";
	case USMC_MODE_TCP:
		return "TCP";
	case USMC_MODE_CONNECTING:
		return "CONNECTING";
	}
	return "UNKNOWN";
}
