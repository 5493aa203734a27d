/* SPDX-License-Identifier: MIT */
/*
 * Logging: a context's logger (struct usmc_logger) sends rate-limited
 * lines to the application's callback (usmc_ctx_set_log()) or, by default,
 * to stderr or a file named by USMC_LOG. Layers below the API objects get
 * a pointer to the logger, never the context (docs/architecture.md).
 *
 * usmc_log() costs one relaxed atomic load while the level is off: its
 * arguments are evaluated and formatted only for a level that is on.
 */
#ifndef USMC_LOG_H
#define USMC_LOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <usmc/usmc.h>

#define USMC_LOG_OFF_ (-1) /* max level of a logger that logs nothing */

/* Token bucket of one level: LOG_RATE_BURST lines at once, then
 * LOG_RATE_PER_SEC lines per second; the rest are counted and the count is
 * told with the next line that passes. */
#ifndef LOG_RATE_BURST /* a debugging build may raise them (-D) */
#define LOG_RATE_BURST	 10
#define LOG_RATE_PER_SEC 10
#endif

struct log_bucket {
	uint64_t last_ns; /* last refill */
	uint32_t tokens;
	uint64_t suppressed; /* lines dropped since the last one that passed */
};

struct usmc_logger {
	_Atomic int max;      /* enum usmc_log_level, or USMC_LOG_OFF_ */
	pthread_mutex_t lock; /* a leaf: protects fn, arg, file, buckets; held across fn */
	usmc_log_fn fn;	      /* NULL: write to file */
	void *arg;
	FILE *file; /* the default sink: stderr, or USMC_LOG's file (owned) */
	struct log_bucket buckets[USMC_LOG_DEBUG + 1];
};

/* Parse a USMC_LOG value "level[,file]": 0 with *@level and *@file (NULL
 * or a pointer into @s), or -EINVAL. NULL or "" is off. */
int log_env_parse(const char *s, int *level, const char **file);

/* From USMC_LOG in @env (env.h; NULL: the process's environment): 0,
 * -EINVAL (bad value) or the file's open error. */
int usmc_logger_init(struct usmc_logger *lg, const char *const *env);
void usmc_logger_fini(struct usmc_logger *lg);
/* The application's sink: @fn NULL turns logging off. */
int usmc_logger_set(struct usmc_logger *lg, enum usmc_log_level max, usmc_log_fn fn, void *arg);

static inline bool usmc_log_on(struct usmc_logger *lg, int level)
{
	return lg && level <= atomic_load_explicit(&lg->max, memory_order_relaxed);
}

void usmc_log_emit(struct usmc_logger *lg, enum usmc_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* usmc_log(logger, USMC_LOG_*, fmt, ...): nothing is evaluated when off. */
#define usmc_log(lg, level, ...)                                  \
	do {                                                      \
		struct usmc_logger *lg_ = (lg);                   \
		if (usmc_log_on(lg_, (level)))                    \
			usmc_log_emit(lg_, (level), __VA_ARGS__); \
	} while (0)

/* For messages: "ECONNABORTED" for -ECONNABORTED (or ECONNABORTED). */
const char *log_errname(int err);

/* For messages: a fallback reason's name, "NOSMCRDEV" ("?" if unknown). */
const char *log_reason(uint32_t code);

/* For messages: a socket's peer or local address, "1.2.3.4:80" or
 * "[::1]:80" ("?" if unknown). Use as log_peer(fd).s within one call. */
struct log_addr {
	char s[64];
};
struct log_addr log_peer(int fd);
struct log_addr log_local(int fd);
struct log_addr log_sockaddr(const struct sockaddr_storage *ss);

#endif
