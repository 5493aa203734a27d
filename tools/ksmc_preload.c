// SPDX-License-Identifier: MIT
/*
 * libksmc-preload.so: runs an unmodified program on the Linux kernel's SMC,
 * the baseline of tools/bench-preload-rxe.sh. It does what smc-tools'
 * smc_run does (smc-tools is not in Debian 12): every TCP socket the program
 * creates is an AF_SMC socket (net/smc/af_smc.c smc_create()), which speaks
 * SMC where the peer does and falls back to TCP where it does not. Not
 * installed: a benchmark's tool.
 *
 *   LD_PRELOAD=build/tools/libksmc-preload.so nginx ...
 */
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>

#ifndef AF_SMC
#define AF_SMC 43
#endif
#define SMCPROTO_SMC   0   /* SMC over IPv4 */
#define SMCPROTO_SMC6  1   /* SMC over IPv6 */
#define SOCK_TYPE_MASK 0xf /* type without SOCK_NONBLOCK and SOCK_CLOEXEC */

static int (*real_socket)(int, int, int);

/* Before main and before any thread the program starts. */
__attribute__((constructor)) static void ksmc_init(void)
{
	real_socket = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
}

static int is_tcp(int domain, int type, int protocol)
{
	return (domain == AF_INET || domain == AF_INET6) &&
	       (type & SOCK_TYPE_MASK) == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP);
}

int socket(int domain, int type, int protocol)
{
	if (!real_socket) {
		errno = ENOSYS;
		return -1;
	}
	if (is_tcp(domain, type, protocol))
		return real_socket(AF_SMC, type, domain == AF_INET ? SMCPROTO_SMC : SMCPROTO_SMC6);
	return real_socket(domain, type, protocol);
}
