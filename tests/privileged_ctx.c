// SPDX-License-Identifier: MIT
/*
 * privileged_ctx - creates a context and destroys it, for
 * tests/test_privileged_env.sh, which runs a set-user-ID root copy of it as
 * nobody. Prints on one line what the environment decided:
 *   secure=<AT_SECURE> kernel_compat=<0|1> rmb_size=<n> probe_ms=<n>
 * or, if usmc_ctx_create() fails, its error (and usmc_env_check()'s
 * message) on stderr and exits 1.
 */
#include <stdio.h>
#include <sys/auxv.h>

#include <usmc/usmc.h>

int main(void)
{
	struct usmc_ctx *ctx;
	long rmb = -1, probe = -1;
	char msg[256] = "";
	int rc = usmc_ctx_create(&ctx);

	if (rc) {
		usmc_env_check(msg, sizeof(msg));
		fprintf(stderr, "usmc_ctx_create: %s%s%s\n", usmc_strerror(rc), *msg ? ": " : "",
			msg);
		return 1;
	}
	usmc_ctx_getopt(ctx, USMC_OPT_RMB_SIZE, &rmb);
	usmc_ctx_getopt(ctx, USMC_OPT_PROBE_MS, &probe);
	printf("secure=%lu kernel_compat=%d rmb_size=%ld probe_ms=%ld\n", getauxval(AT_SECURE),
	       usmc_ctx_kernel_compat(ctx), rmb, probe);
	rc = usmc_ctx_destroy(ctx);
	if (rc) {
		fprintf(stderr, "usmc_ctx_destroy: %s\n", usmc_strerror(rc));
		return 1;
	}
	return 0;
}
