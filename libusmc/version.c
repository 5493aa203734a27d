// SPDX-License-Identifier: MIT
#include <usmc/usmc.h>

const char *usmc_version(void)
{
	return USMC_VERSION_STRING;
}
