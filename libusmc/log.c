// SPDX-License-Identifier: MIT
/* Logging (log.h): USMC_LOG, the application's callback, rate limits. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "env.h"
#include "opts.h"
#include "reason.h"

static const char *const level_names[] = {
	[USMC_LOG_ERR] = "err",
	[USMC_LOG_WARN] = "warn",
	[USMC_LOG_INFO] = "info",
	[USMC_LOG_DEBUG] = "debug",
};

int log_env_parse(const char *s, int *level, const char **file)
{
	static const struct {
		const char *name;
		int level;
	} names[] = {{"off", USMC_LOG_OFF_},   {"err", USMC_LOG_ERR},	   {"error", USMC_LOG_ERR},
		     {"warn", USMC_LOG_WARN},  {"warning", USMC_LOG_WARN}, {"info", USMC_LOG_INFO},
		     {"debug", USMC_LOG_DEBUG}};
	size_t n;

	*level = USMC_LOG_OFF_;
	*file = NULL;
	if (!s || !*s)
		return 0;
	n = strcspn(s, ",");
	if (s[n] == ',') {
		*file = s + n + 1;
		if (!**file)
			return -EINVAL; /* "info," names no file */
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i].name) == n && !strncmp(s, names[i].name, n)) {
			*level = names[i].level;
			return 0;
		}
	return -EINVAL;
}

/*
 * USMC_LOG's file, appended to. Created with at most rw-r--r-- (the umask
 * may take more away): never world-writable, even from a process that runs
 * with umask 0. A symbolic link is refused (-ELOOP): in a shared directory
 * another user may have planted it to point a root process at a file of
 * their choosing. A tty named there does not become the controlling
 * terminal; the descriptor is not inherited across exec.
 */
#define LOG_FILE_MODE  0644
#define LOG_FILE_FLAGS (O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC)

static FILE *log_file_open(const char *path)
{
	int fd = open(path, LOG_FILE_FLAGS, LOG_FILE_MODE);
	FILE *f;

	if (fd < 0)
		return NULL;
	f = fdopen(fd, "a");
	if (!f) {
		int err = errno;

		close(fd);
		errno = err;
	}
	return f;
}

static void buckets_reset(struct usmc_logger *lg)
{
	for (int i = 0; i <= USMC_LOG_DEBUG; i++)
		lg->buckets[i] = (struct log_bucket){.tokens = LOG_RATE_BURST};
}

int usmc_logger_init(struct usmc_logger *lg, const char *const *env)
{
	const char *file;
	int level;
	/* it names a file, and lines may tell the process's peers: not from
	 * the caller of a privileged process (env.h) */
	int rc = log_env_parse(env_secure_get(env, "USMC_LOG"), &level, &file);

	memset(lg, 0, sizeof(*lg));
	atomic_init(&lg->max, USMC_LOG_OFF_);
	if (rc)
		return rc;
	if (file) {
		lg->file = log_file_open(file);
		if (!lg->file)
			return -errno;
		setvbuf(lg->file, NULL, _IOLBF, 0); /* a line is in the file once logged */
	} else {
		lg->file = stderr;
	}
	pthread_mutex_init(&lg->lock, NULL);
	buckets_reset(lg);
	atomic_store(&lg->max, level);
	return 0;
}

static void close_file_locked(struct usmc_logger *lg)
{
	if (lg->file && lg->file != stderr)
		fclose(lg->file);
	lg->file = NULL;
}

void usmc_logger_fini(struct usmc_logger *lg)
{
	close_file_locked(lg);
	pthread_mutex_destroy(&lg->lock);
}

int usmc_logger_set(struct usmc_logger *lg, enum usmc_log_level max, usmc_log_fn fn, void *arg)
{
	if ((int)max < USMC_LOG_ERR || max > USMC_LOG_DEBUG)
		return -EINVAL;
	pthread_mutex_lock(&lg->lock);
	close_file_locked(lg);
	lg->fn = fn;
	lg->arg = arg;
	buckets_reset(lg);
	atomic_store(&lg->max, fn ? (int)max : USMC_LOG_OFF_);
	pthread_mutex_unlock(&lg->lock);
	return 0;
}

/* A token for one line of @level, refilled at LOG_RATE_PER_SEC; requires
 * lg->lock. */
static bool take_token_locked(struct log_bucket *b)
{
	uint64_t now = clock_now_ns();
	uint64_t add = (now - b->last_ns) * LOG_RATE_PER_SEC / CLOCK_NSEC_PER_SEC;

	if (add) {
		b->tokens = add >= LOG_RATE_BURST - b->tokens ? LOG_RATE_BURST
							      : b->tokens + (uint32_t)add;
		b->last_ns = now;
	}
	if (!b->tokens)
		return false;
	b->tokens--;
	return true;
}

void usmc_log_emit(struct usmc_logger *lg, enum usmc_log_level level, const char *fmt, ...)
{
	struct log_bucket *b = &lg->buckets[level];
	char msg[512];
	int n = 0;
	va_list ap;

	pthread_mutex_lock(&lg->lock);
	/* the level may have changed since usmc_log_on() looked */
	if ((int)level > atomic_load(&lg->max)) {
		pthread_mutex_unlock(&lg->lock);
		return;
	}
	if (!take_token_locked(b)) {
		b->suppressed++;
		pthread_mutex_unlock(&lg->lock);
		return;
	}
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (b->suppressed && n >= 0 && (size_t)n < sizeof(msg))
		snprintf(msg + n, sizeof(msg) - (size_t)n, " (%llu earlier %s messages suppressed)",
			 (unsigned long long)b->suppressed, level_names[level]);
	b->suppressed = 0;
	if (lg->fn)
		lg->fn(lg->arg, level, msg);
	else if (lg->file)
		fprintf(lg->file, "usmc: %s: %s\n", level_names[level], msg);
	pthread_mutex_unlock(&lg->lock);
}

const char *log_errname(int err)
{
	const char *s = strerrorname_np(err < 0 ? -err : err);

	return s ? s : "unknown error";
}

const char *log_reason(uint32_t code)
{
	const struct usmc_reason_desc *d = usmc_reason_lookup(code);

	return d ? d->name : "?";
}

struct log_addr log_sockaddr(const struct sockaddr_storage *ss)
{
	struct log_addr out = {"?"};
	char ip[INET6_ADDRSTRLEN];

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;

		if (inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip)))
			snprintf(out.s, sizeof(out.s), "%s:%u", ip, ntohs(a->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;

		if (inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip)))
			snprintf(out.s, sizeof(out.s), "[%s]:%u", ip, ntohs(a->sin6_port));
	}
	return out;
}

static struct log_addr log_addr_of(int fd, bool peer)
{
	struct sockaddr_storage ss = {0};
	socklen_t len = sizeof(ss);

	if ((peer ? getpeername : getsockname)(fd, (struct sockaddr *)&ss, &len))
		ss.ss_family = AF_UNSPEC;
	return log_sockaddr(&ss);
}

struct log_addr log_peer(int fd)
{
	return log_addr_of(fd, true);
}

struct log_addr log_local(int fd)
{
	return log_addr_of(fd, false);
}
