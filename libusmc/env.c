// SPDX-License-Identifier: MIT
/* How libusmc reads its environment (env.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "env.h"

bool env_privileged(void)
{
	return getauxval(AT_SECURE) != 0;
}

const char *env_get(const char *const *env, const char *name)
{
	size_t n = strlen(name);

	if (!env)
		return getenv(name);
	for (; *env; env++)
		if (!strncmp(*env, name, n) && (*env)[n] == '=')
			return *env + n + 1;
	return NULL;
}

const char *env_secure_get(const char *const *env, const char *name)
{
	return env_privileged() ? NULL : env_get(env, name);
}
