/* SPDX-License-Identifier: MIT */
#ifndef USMC_USMC_H
#define USMC_USMC_H

#define USMC_VERSION_STRING "0.1.0"

/** usmc_version() - the library version, "MAJOR.MINOR.PATCH". */
const char *usmc_version(void);

#endif
