// SPDX-License-Identifier: MIT
/* How libusmc reads its environment (env.h). */
#include <stdlib.h>
#include <sys/auxv.h>

#include "env.h"

bool env_privileged(void)
{
	return getauxval(AT_SECURE) != 0;
}

const char *env_secure_get(const char *name)
{
	return env_privileged() ? NULL : getenv(name);
}
