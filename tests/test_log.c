// SPDX-License-Identifier: MIT
/*
 * Logging and thread names, over loopback TCP (no RDMA):
 *  - USMC_LOG: malformed values fail usmc_ctx_create() with -EINVAL, a file
 *    that cannot be opened with its error; "info,FILE" writes the DECLINE
 *    a PROPOSAL from a plain socket gets (this host has no RDMA port);
 *  - usmc_ctx_set_log(): the level filters, NULL turns logging off; the
 *    listener's backlog cap and the handshake congestion fallback are
 *    logged;
 *  - rate limiting: 1000 events from 4 threads give a bounded number of
 *    lines, and the next line after a pause tells how many were dropped;
 *    a level that is off does not even evaluate the arguments;
 *  - thread names: usmc-accept and usmc-hs/N in /proc/self/task/N/comm.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <usmc/usmc.h>

#include "common/hold_workers.h"
#include "common/loopback.h"
#include "linux_proposal.h"
#include "log.h"
#include "mono_clock.h"

#define CLC_HDR_LEN 8
#define WAIT_MS	    10000
#define MAX_LINES   256

/* ---- a capturing sink ------------------------------------------------ */

struct capture {
	pthread_mutex_t lock;
	int n;
	enum usmc_log_level level[MAX_LINES];
	char line[MAX_LINES][512];
};

static struct capture cap = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void capture_fn(void *arg, enum usmc_log_level level, const char *msg)
{
	struct capture *c = arg;

	pthread_mutex_lock(&c->lock);
	if (c->n < MAX_LINES) {
		c->level[c->n] = level;
		snprintf(c->line[c->n], sizeof(c->line[0]), "%s", msg);
	}
	c->n++;
	pthread_mutex_unlock(&c->lock);
}

static void capture_reset(void)
{
	pthread_mutex_lock(&cap.lock);
	cap.n = 0;
	pthread_mutex_unlock(&cap.lock);
}

static int capture_count(void)
{
	int n;

	pthread_mutex_lock(&cap.lock);
	n = cap.n;
	pthread_mutex_unlock(&cap.lock);
	return n;
}

/* The first captured line containing @s at @level, or -1. */
static int capture_find(enum usmc_log_level level, const char *s)
{
	int found = -1;

	pthread_mutex_lock(&cap.lock);
	for (int i = 0; i < cap.n && i < MAX_LINES && found < 0; i++)
		if (cap.level[i] == level && strstr(cap.line[i], s))
			found = i;
	pthread_mutex_unlock(&cap.lock);
	return found;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Wait until a line with @s at @level was captured; fail after WAIT_MS. */
static void wait_line(enum usmc_log_level level, const char *s)
{
	long t0 = mono_ms();

	while (capture_find(level, s) < 0) {
		if (mono_ms() - t0 > WAIT_MS)
			fail_msg("no %d line with \"%s\"", level, s);
		sleep_ms(2);
	}
}

static void send_all(int fd, const void *buf, size_t len)
{
	assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Wait until @fd has something to read (a DECLINE, data or EOF). */
static void wait_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	assert_int_equal(poll(&p, 1, WAIT_MS), 1);
}

/* ---- USMC_LOG --------------------------------------------------------- */

static void test_env_parse(void **state)
{
	const char *file;
	int level;

	(void)state;
	assert_int_equal(log_env_parse(NULL, &level, &file), 0);
	assert_int_equal(level, USMC_LOG_OFF_);
	assert_int_equal(log_env_parse("info", &level, &file), 0);
	assert_int_equal(level, USMC_LOG_INFO);
	assert_null(file);
	assert_int_equal(log_env_parse("debug,/tmp/u.log", &level, &file), 0);
	assert_int_equal(level, USMC_LOG_DEBUG);
	assert_string_equal(file, "/tmp/u.log");
	assert_int_equal(log_env_parse("warning", &level, &file), 0);
	assert_int_equal(level, USMC_LOG_WARN);
	assert_int_equal(log_env_parse("off", &level, &file), 0);
	assert_int_equal(level, USMC_LOG_OFF_);
	assert_int_equal(log_env_parse("INFO", &level, &file), -EINVAL);
	assert_int_equal(log_env_parse("info,", &level, &file), -EINVAL);
	assert_int_equal(log_env_parse("inf", &level, &file), -EINVAL);
	assert_int_equal(log_env_parse(",/tmp/x", &level, &file), -EINVAL);
	assert_int_equal(log_env_parse("3", &level, &file), -EINVAL);
}

static void test_env_invalid(void **state)
{
	struct usmc_ctx *ctx;

	(void)state;
	setenv("USMC_LOG", "loud", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);
	setenv("USMC_LOG", "info,", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -EINVAL);
	setenv("USMC_LOG", "debug,/nonexistent-usmc-dir/u.log", 1);
	assert_int_equal(usmc_ctx_create(&ctx), -ENOENT);
	setenv("USMC_LOG", "", 1);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_ctx_set_log(ctx, (enum usmc_log_level)4, capture_fn, &cap), -EINVAL);
	assert_int_equal(usmc_ctx_set_log(NULL, USMC_LOG_INFO, capture_fn, &cap), -EINVAL);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
	unsetenv("USMC_LOG");
}

/* USMC_LOG=info,FILE: a PROPOSAL from a plain socket is declined (no RDMA
 * port here), and the DECLINE is in the file. */
static void test_env_file(void **state)
{
	char path[] = "/tmp/usmc-test-log-XXXXXX", env[64], text[4096] = "";
	struct sockaddr_storage addr;
	struct usmc_listener *l;
	struct usmc_ctx *ctx;
	socklen_t alen;
	FILE *f;
	int fd, tmp;

	(void)state;
	tmp = mkstemp(path);
	assert_true(tmp >= 0);
	close(tmp);
	snprintf(env, sizeof(env), "info,%s", path);
	setenv("USMC_LOG", env, 1);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	unsetenv("USMC_LOG");
	l = lo_listen(ctx, 8, 0, &addr, &alen);
	fd = plain_connect_to(&addr, alen);
	send_all(fd, linux_v2_proposal, sizeof(linux_v2_proposal));
	wait_readable(fd); /* the DECLINE */
	close(fd);
	assert_int_equal(usmc_listener_close(l), 0);
	assert_int_equal(usmc_ctx_destroy(ctx), 0); /* closes the file */
	f = fopen(path, "r");
	assert_non_null(f);
	assert_true(fread(text, 1, sizeof(text) - 1, f) > 0);
	fclose(f);
	unlink(path);
	print_message("%s", text);
	assert_non_null(strstr(text, "usmc: info: CLC: DECLINE to 127.0.0.1:"));
}

/* ---- usmc_ctx_set_log() and listener events ------------------------------ */

/* Backlog 1, TCP only: the second client finds the cap reached (WARN). A
 * PROPOSAL is then declined (INFO): filtered out at WARN, logged at INFO,
 * and nothing at all once the sink is NULL. */
static void test_set_log_levels(void **state)
{
	struct sockaddr_storage addr;
	struct usmc_listener *l;
	struct usmc_conn *c;
	struct usmc_ctx *ctx;
	socklen_t alen;
	int a, b, p;

	(void)state;
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	capture_reset();
	assert_int_equal(usmc_ctx_set_log(ctx, USMC_LOG_WARN, capture_fn, &cap), 0);

	l = lo_listen(ctx, 1, USMC_LISTEN_TCP_ONLY, &addr, &alen);
	a = plain_connect_to(&addr, alen);
	b = plain_connect_to(&addr, alen);
	wait_line(USMC_LOG_WARN, "backlog cap 1 reached");
	for (int i = 0; i < 2; i++) {
		assert_int_equal(usmc_accept(l, 0, &c), 0);
		usmc_close(c);
	}
	close(a);
	close(b);
	assert_int_equal(usmc_listener_close(l), 0);

	l = lo_listen(ctx, 8, 0, &addr, &alen);
	p = plain_connect_to(&addr, alen);
	send_all(p, linux_v2_proposal, sizeof(linux_v2_proposal));
	wait_readable(p);
	close(p);
	assert_int_equal(usmc_accept(l, 0, &c), 0); /* the handshake is over */
	usmc_close(c);
	assert_int_equal(capture_find(USMC_LOG_INFO, "DECLINE"), -1);

	assert_int_equal(usmc_ctx_set_log(ctx, USMC_LOG_INFO, capture_fn, &cap), 0);
	p = plain_connect_to(&addr, alen);
	send_all(p, linux_v2_proposal, sizeof(linux_v2_proposal));
	wait_line(USMC_LOG_INFO, "CLC: DECLINE to 127.0.0.1:");
	close(p);
	assert_int_equal(usmc_accept(l, 0, &c), 0);
	usmc_close(c);

	assert_int_equal(usmc_ctx_set_log(ctx, USMC_LOG_DEBUG, NULL, NULL), 0);
	capture_reset();
	p = plain_connect_to(&addr, alen);
	send_all(p, linux_v2_proposal, sizeof(linux_v2_proposal));
	wait_readable(p);
	close(p);
	assert_int_equal(usmc_accept(l, 0, &c), 0);
	usmc_close(c);
	assert_int_equal(capture_count(), 0);

	assert_int_equal(usmc_listener_close(l), 0);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* One worker, threshold 1, auto-fallback: two SMC clients whose handshakes
 * the test holds congest the pool; the next one is declined at once, and that is logged (WARN). */
static void test_congestion_logged(void **state)
{
	struct sockaddr_storage addr;
	struct usmc_listener_stats st;
	struct usmc_listener *l;
	struct usmc_ctx *ctx;
	struct usmc_conn *c;
	socklen_t alen;
	int s1, s2, f;
	long t0;

	(void)state;
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	capture_reset();
	assert_int_equal(usmc_ctx_set_log(ctx, USMC_LOG_WARN, capture_fn, &cap), 0);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_HS_THREADS, 1), 0);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_HS_CONGESTION, 1), 0);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_CLC_TIMEOUT_MS, 20000), 0);
	l = lo_listen(ctx, 16, USMC_LISTEN_AUTO_FALLBACK, &addr, &alen);
	hold_workers(true); /* S1 occupies the worker, S2 waits: congested */
	s1 = plain_connect_to(&addr, alen);
	send_all(s1, linux_v2_proposal, sizeof(linux_v2_proposal));
	for (t0 = mono_ms(); usmc_listener_stats(l, &st), st.hs_queue_high < 1;)
		assert_true(mono_ms() - t0 < WAIT_MS);
	s2 = plain_connect_to(&addr, alen);
	send_all(s2, linux_v2_proposal, sizeof(linux_v2_proposal));
	for (t0 = mono_ms(); usmc_listener_stats(l, &st), st.hs_queue_depth < 1;)
		assert_true(mono_ms() - t0 < WAIT_MS);
	f = plain_connect_to(&addr, alen);
	send_all(f, linux_v2_proposal, sizeof(linux_v2_proposal));
	wait_line(USMC_LOG_WARN, "handshake queue congested: DECLINE SERVER_BUSY");
	assert_int_equal(usmc_accept(l, 0, &c), 0);
	usmc_close(c);
	close(f);
	close(s1);
	close(s2);
	hold_workers(false);
	assert_int_equal(usmc_listener_close(l), 0);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

/* ---- rate limiting ------------------------------------------------------ */

#define RL_THREADS 4
#define RL_EVENTS  250

static void *flood(void *arg)
{
	struct usmc_logger *lg = arg;

	for (int i = 0; i < RL_EVENTS; i++)
		usmc_log(lg, USMC_LOG_WARN, "event %d", i);
	return NULL;
}

static void test_rate_limit(void **state)
{
	pthread_t t[RL_THREADS];
	struct usmc_logger lg;
	int evaluated = 0, n, last;
	long t0, ran_ms;

	(void)state;
	unsetenv("USMC_LOG");
	assert_int_equal(usmc_logger_init(&lg, NULL), 0);
	capture_reset();
	assert_int_equal(usmc_logger_set(&lg, USMC_LOG_WARN, capture_fn, &cap), 0);
	/* a level that is off evaluates nothing */
	usmc_log(&lg, USMC_LOG_INFO, "%d", ++evaluated);
	assert_int_equal(evaluated, 0);
	assert_int_equal(capture_count(), 0);

	t0 = mono_ms();
	for (int i = 0; i < RL_THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, flood, &lg), 0);
	for (int i = 0; i < RL_THREADS; i++)
		pthread_join(t[i], NULL);
	ran_ms = mono_ms() - t0;
	n = capture_count();
	print_message("%d events -> %d lines in %ld ms\n", RL_THREADS * RL_EVENTS, n, ran_ms);
	/* the burst, plus what refilled while the threads ran (a loaded
	 * machine stretches that: the bound follows the time they took) */
	assert_true(n >= LOG_RATE_BURST);
	assert_true(n <= LOG_RATE_BURST + (ran_ms * LOG_RATE_PER_SEC) / 1000 + 1);

	/* one level's flood does not silence another level */
	usmc_log(&lg, USMC_LOG_ERR, "an error");
	assert_int_equal(capture_find(USMC_LOG_ERR, "an error"), n);

	/* after a pause the next line passes and counts the dropped ones */
	sleep_ms(1000 / LOG_RATE_PER_SEC + 20);
	usmc_log(&lg, USMC_LOG_WARN, "after the pause");
	last = capture_find(USMC_LOG_WARN, "after the pause");
	assert_true(last > 0);
	print_message("%s\n", cap.line[last]);
	assert_non_null(strstr(cap.line[last], "earlier warn messages suppressed"));
	usmc_logger_fini(&lg);
}

/* ---- thread names --------------------------------------------------------- */

/* How many threads of this process are called @name. */
static int threads_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue; /* the thread just ended */
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
		n += !strcmp(comm, name);
	}
	closedir(d);
	return n;
}

/* How many threads are named @name once the joined ones are gone: a
 * joined thread's /proc/self/task entry can outlive pthread_join() briefly
 * (the kernel wakes the joiner when it clears the thread's tid, before it
 * releases the task), so wait up to a second for it. */
static int threads_named_after_join(const char *name)
{
	int n = threads_named(name);

	for (int ms = 0; n && ms < 1000; ms++) {
		usleep(1000);
		n = threads_named(name);
	}
	return n;
}

static void test_thread_names(void **state)
{
	struct sockaddr_storage addr;
	struct usmc_listener *l;
	struct usmc_ctx *ctx;
	socklen_t alen;

	(void)state;
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_HS_THREADS, 3), 0);
	l = lo_listen(ctx, 8, 0, &addr, &alen);
	assert_int_equal(threads_named("usmc-accept"), 1);
	assert_int_equal(threads_named("usmc-hs/0"), 1);
	assert_int_equal(threads_named("usmc-hs/1"), 1);
	assert_int_equal(threads_named("usmc-hs/2"), 1);
	assert_int_equal(threads_named("usmc-hs/3"), 0);
	assert_int_equal(usmc_listener_close(l), 0);
	assert_int_equal(threads_named_after_join("usmc-accept"), 0);
	assert_int_equal(threads_named_after_join("usmc-hs/0"), 0);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_env_parse),	  cmocka_unit_test(test_env_invalid),
		cmocka_unit_test(test_env_file),	  cmocka_unit_test(test_set_log_levels),
		cmocka_unit_test(test_congestion_logged), cmocka_unit_test(test_rate_limit),
		cmocka_unit_test(test_thread_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
