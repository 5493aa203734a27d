// SPDX-License-Identifier: MIT
/*
 * The preload's configuration (docs/preload.md): the USMC_* variables as
 * they were when the preload loaded, kept for the process and its
 * children of fork(), whatever the program does to its environment
 * afterwards (nginx's workers keep only the variables an env directive
 * names; daemons clear theirs). libusmc's context is made from them
 * (usmc_ctx_create_env()), and the preload's own settings read: USMC_SMC,
 * USMC_RUN_VERBOSE, USMC_RUN_LOG, USMC_RUN_SMC_PEERS and the tests'
 * USMC_PRELOAD_TEST_GATE, by the rule of libusmc's variables
 * (libusmc/env.c, compiled into the preload too).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../env.h"
#include "preload.h"

bool preload_disabled;
static bool force_gate;
/* "NAME=VALUE" strings ending with NULL (libusmc/env.h), written once at
 * start; NULL without memory: the environment, read when used */
static const char *const *settings;

/* USMC_RUN_SMC_PEERS: where clients may propose SMC-R (preload_may_propose()) */
struct peer_rule {
	int family;
	uint8_t addr[16];
	int prefix; /* bits */
	int port;   /* 0 = any */
};
#define MAX_PEER_RULES 32
static struct peer_rule peer_rules[MAX_PEER_RULES];
static int npeer_rules = -1; /* -1: no list */

/* One rule: ADDR, ADDR/PREFIX, ADDR:PORT, ADDR/PREFIX:PORT, [V6]/P:PORT. */
static int parse_peer(char *w, struct peer_rule *r)
{
	char *slash, *colon = NULL, *end;
	int max;

	memset(r, 0, sizeof(*r));
	if (*w == '[') { /* [v6]... */
		char *close_b = strchr(w, ']');

		if (!close_b)
			return -1;
		*close_b = 0;
		colon = strchr(close_b + 1, ':');
		slash = strchr(close_b + 1, '/');
		w++;
	} else {
		colon = strchr(w, ':');
		if (colon && strchr(colon + 1, ':'))
			colon = NULL; /* a bare IPv6 address */
		slash = strchr(w, '/');
	}
	if (colon) {
		*colon = 0;
		r->port = (int)strtol(colon + 1, &end, 10);
		if (*end || r->port <= 0 || r->port > 65535)
			return -1;
	}
	if (slash) {
		*slash = 0;
		r->prefix = (int)strtol(slash + 1, &end, 10);
		if (*end)
			return -1;
	}
	if (inet_pton(AF_INET, w, r->addr) == 1) {
		r->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, w, r->addr) == 1) {
		r->family = AF_INET6;
		max = 128;
	} else {
		return -1;
	}
	if (!slash)
		r->prefix = max;
	return r->prefix < 0 || r->prefix > max ? -1 : 0;
}

static void parse_peers(const char *s)
{
	char *copy = strdup(s), *save = NULL, *w;

	if (!copy)
		return;
	npeer_rules = 0;
	for (w = strtok_r(copy, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		if (npeer_rules == MAX_PEER_RULES || parse_peer(w, &peer_rules[npeer_rules]))
			preload_log(0, "USMC_RUN_SMC_PEERS: \"%s\" ignored", w);
		else
			npeer_rules++;
	}
	free(copy);
}

static bool prefix_match(const uint8_t *a, const uint8_t *b, int bits)
{
	int bytes = bits / 8, rest = bits % 8;

	if (memcmp(a, b, (size_t)bytes))
		return false;
	return !rest || ((a[bytes] ^ b[bytes]) & (0xff << (8 - rest))) == 0;
}

/* USMC_RUN_SMC_PEERS names @sa */
static bool peer_listed(const struct sockaddr *sa)
{
	const uint8_t *addr;
	int family, port;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		family = AF_INET;
		addr = (const uint8_t *)&in->sin_addr;
		port = ntohs(in->sin_port);
	} else {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		family = AF_INET6;
		addr = in6->sin6_addr.s6_addr;
		port = ntohs(in6->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			family = AF_INET;
			addr += 12;
		}
	}
	for (int i = 0; i < npeer_rules; i++) {
		const struct peer_rule *r = &peer_rules[i];

		if (r->family == family && (!r->port || r->port == port) &&
		    prefix_match(r->addr, addr, r->prefix))
			return true;
	}
	return false;
}

bool preload_may_propose(struct usmc_ctx *ctx, const struct sockaddr *sa)
{
	if (npeer_rules >= 0)
		return peer_listed(sa);
	return usmc_ctx_kernel_compat(ctx) == 1;
}

bool preload_force_gate(void)
{
	return force_gate;
}

#define SETTINGS_PREFIX "USMC_"

/* A copy of the USMC_* variables of the environment, or NULL. */
static const char *const *settings_take(void)
{
	size_t n = 0, k = 0;
	char **v;

	for (char **e = environ; e && *e; e++)
		n += !strncmp(*e, SETTINGS_PREFIX, strlen(SETTINGS_PREFIX));
	v = calloc(n + 1, sizeof(*v));
	if (!v)
		return NULL;
	for (char **e = environ; e && *e && k < n; e++)
		if (!strncmp(*e, SETTINGS_PREFIX, strlen(SETTINGS_PREFIX)) && (v[k] = strdup(*e)))
			k++;
	return (const char *const *)v;
}

const char *const *preload_settings(void)
{
	return settings;
}

static int env_int(const char *s, int def)
{
	return s && *s ? atoi(s) : def;
}

/* USMC_RUN_LOG's file: created rw-r--r-- at most, never through a
 * symlink, and never the process's controlling terminal (as USMC_LOG's,
 * libusmc/log.c) */
#define RUN_LOG_MODE  0644
#define RUN_LOG_FLAGS (O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC)

/*
 * What names a file, sends the process's diagnostics somewhere or changes
 * how its connects run is not taken from the caller of a privileged
 * process (libusmc/env.h): USMC_RUN_VERBOSE, USMC_RUN_LOG and
 * USMC_PRELOAD_TEST_GATE. USMC_SMC and USMC_RUN_SMC_PEERS only decide
 * whether this process's own connections try SMC-R.
 */
void preload_config_read(void)
{
	const char *s;

	settings = settings_take();
	preload_log_level(env_int(env_secure_get(settings, "USMC_RUN_VERBOSE"), 0));
	force_gate = env_int(env_secure_get(settings, "USMC_PRELOAD_TEST_GATE"), 0) != 0;
	s = env_get(settings, "USMC_SMC");
	preload_disabled = s && !strcmp(s, "0");
	s = env_get(settings, "USMC_RUN_SMC_PEERS");
	if (s && *s)
		parse_peers(s);
	s = env_secure_get(settings, "USMC_RUN_LOG");
	if (s && *s) {
		int fd = R.open(s, RUN_LOG_FLAGS, RUN_LOG_MODE);

		if (fd >= 0)
			preload_log_to(fd);
	}
}
