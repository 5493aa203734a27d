// SPDX-License-Identifier: MIT
/*
 * privileged_ctx - creates a context and destroys it, for
 * tests/test_privileged_env.sh, which runs a set-user-ID root copy of it as
 * nobody. Prints on one line what the environment decided:
 *   secure=<AT_SECURE> kernel_compat=<0|1> rmb_size=<n> probe_ms=<n>
 * and the same of a context made with usmc_ctx_create_env() from the
 * environment as a list (environ), on a second line:
 *   environ: kernel_compat=<0|1> rmb_size=<n> probe_ms=<n>
 * or, if a creation fails, its error (and usmc_env_check()'s message) on
 * stderr and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <usmc/usmc.h>

/* One context from @env (NULL: usmc_ctx_create()), its line after @what. */
static void report(const char *what, const char *const *env)
{
	struct usmc_ctx *ctx;
	long rmb = -1, probe = -1;
	char msg[256] = "";
	int rc = env ? usmc_ctx_create_env(&ctx, env) : usmc_ctx_create(&ctx);

	if (rc) {
		usmc_env_check_env(env, msg, sizeof(msg));
		fprintf(stderr, "usmc_ctx_create: %s%s%s\n", usmc_strerror(rc), *msg ? ": " : "",
			msg);
		exit(1);
	}
	usmc_ctx_getopt(ctx, USMC_OPT_RMB_SIZE, &rmb);
	usmc_ctx_getopt(ctx, USMC_OPT_PROBE_MS, &probe);
	printf("%skernel_compat=%d rmb_size=%ld probe_ms=%ld\n", what, usmc_ctx_kernel_compat(ctx),
	       rmb, probe);
	rc = usmc_ctx_destroy(ctx);
	if (rc) {
		fprintf(stderr, "usmc_ctx_destroy: %s\n", usmc_strerror(rc));
		exit(1);
	}
}

int main(void)
{
	char secure[32];

	snprintf(secure, sizeof(secure), "secure=%lu ", getauxval(AT_SECURE));
	report(secure, NULL);
	report("environ: ", (const char *const *)environ);
	return 0;
}
