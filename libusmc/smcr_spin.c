// SPDX-License-Identifier: MIT
/*
 * The spin policy (smcr_spin.h): the cap, timed once per process, and the
 * spinners' slots, counted process-wide against the CPUs the spinning
 * thread may really use.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "smcr_spin.h"

/* The longest spin: 100 us on hardware that wakes a thread as fast as
 * SPIN_WAKE_REF_NS says (an eventfd round trip between two threads), and as
 * much longer as this machine is slower at it (spin_calibrate()), up to the
 * ceiling. */
#define SPIN_FLOOR_NS	  100000
#define SPIN_CEIL_NS	  2000000
#define SPIN_WAKE_REF_NS  4000
#define SPIN_CALIB_ROUNDS 9 /* thread wake-up round trips timed, once per process */
/* The affinity mask and the cgroup quota are read again this often. */
#define SPIN_CPUS_RECHECK_MS 1000
#define SPIN_CGROUP_V2_ROOT  "/sys/fs/cgroup"
#define SPIN_CGROUP_V1_ROOT  "/sys/fs/cgroup/cpu"
#define SPIN_PATH_MAX	     512

/* ---- how long a spin may last ---------------------------------------- */

static pthread_once_t calib_once = PTHREAD_ONCE_INIT;
static int64_t spin_cap; /* ns, written once under calib_once */

#define CALIB_STOP (1ull << 40) /* written to ping: the echo thread ends */

struct calib {
	int ping, pong; /* eventfds, blocking */
};

static void *calib_echo(void *arg)
{
	struct calib *c = arg;
	uint64_t v;

	while (read(c->ping, &v, sizeof(v)) == sizeof(v) && v < CALIB_STOP)
		if (write(c->pong, &v, sizeof(v)) != sizeof(v))
			break;
	return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Time @n round trips to @c's echo thread into @rt; how many were timed. */
static int calib_run(struct calib *c, int64_t *rt, int n)
{
	uint64_t one = 1, v;
	int i;

	for (i = 0; i < n; i++) {
		int64_t t0 = (int64_t)clock_now_ns();

		if (write(c->ping, &one, sizeof(one)) != sizeof(one) ||
		    read(c->pong, &v, sizeof(v)) != sizeof(v))
			break;
		rt[i] = (int64_t)clock_now_ns() - t0;
	}
	return i;
}

/* The median of SPIN_CALIB_ROUNDS round trips between two threads that
 * sleep on eventfds (two wake-ups each), 0 if it could not be timed. */
static int64_t time_wakeup_round_trips(void)
{
	struct calib c = {eventfd(0, EFD_CLOEXEC), eventfd(0, EFD_CLOEXEC)};
	int64_t rt[SPIN_CALIB_ROUNDS], med = 0;
	uint64_t stop = CALIB_STOP;
	pthread_t th;

	if (c.ping >= 0 && c.pong >= 0 && !pthread_create(&th, NULL, calib_echo, &c)) {
		if (calib_run(&c, rt, SPIN_CALIB_ROUNDS) == SPIN_CALIB_ROUNDS) {
			qsort(rt, SPIN_CALIB_ROUNDS, sizeof(rt[0]), cmp_i64);
			med = rt[SPIN_CALIB_ROUNDS / 2];
		}
		if (write(c.ping, &stop, sizeof(stop)) == sizeof(stop))
			pthread_join(th, NULL);
		else
			pthread_detach(th); /* cannot happen on an eventfd below its maximum */
	}
	if (c.ping >= 0)
		close(c.ping);
	if (c.pong >= 0)
		close(c.pong);
	return med;
}

/* A spin pays while it is shorter than the sleep and wake-up it saves; the
 * 100 us cap was set for hardware, where an eventfd round trip between two
 * threads takes about SPIN_WAKE_REF_NS (2 us measured on this project's
 * host). A machine that wakes threads N times slower (qemu TCG: about
 * 100 us) replies N times slower too, and its spins need N times the cap. */
static void spin_calibrate(void)
{
	int64_t rt = time_wakeup_round_trips();
	int64_t cap = rt > SPIN_WAKE_REF_NS ? SPIN_FLOOR_NS / SPIN_WAKE_REF_NS * rt : SPIN_FLOOR_NS;

	spin_cap = cap > SPIN_CEIL_NS ? SPIN_CEIL_NS : cap;
}

int64_t smcr_spin_cap_ns(void)
{
	pthread_once(&calib_once, spin_calibrate);
	return spin_cap;
}

/* ---- the CPUs a spinner may use ------------------------------------- */

/* Whole CPUs of one quota file's numbers, SMCR_SPIN_NO_QUOTA for none. */
static int quota_to_cpus(long long quota, long long period)
{
	if (quota < 0 || period <= 0)
		return SMCR_SPIN_NO_QUOTA;
	return quota / period > SMCR_SPIN_NO_QUOTA - 1 ? SMCR_SPIN_NO_QUOTA - 1
						       : (int)(quota / period);
}

/* The quota cgroup directory @dir sets (v2 cpu.max, or v1's pair). */
static int dir_quota_cpus(const char *dir)
{
	char path[SPIN_PATH_MAX + 32], word[32] = "";
	long long quota = -1, period = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/cpu.max", dir);
	if ((f = fopen(path, "re"))) {
		if (fscanf(f, "%31s %lld", word, &period) == 2 && strcmp(word, "max"))
			quota = strtoll(word, NULL, 10);
		fclose(f);
		return quota_to_cpus(quota, period);
	}
	snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
	if ((f = fopen(path, "re"))) {
		if (fscanf(f, "%lld", &quota) != 1)
			quota = -1;
		fclose(f);
	}
	snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
	if ((f = fopen(path, "re"))) {
		if (fscanf(f, "%lld", &period) != 1)
			period = 0;
		fclose(f);
	}
	return quota_to_cpus(quota, period);
}

int smcr_spin_quota_cpus(const char *root, const char *path)
{
	char dir[SPIN_PATH_MAX];
	int cpus = SMCR_SPIN_NO_QUOTA;
	size_t rootlen = strlen(root);

	if ((size_t)snprintf(dir, sizeof(dir), "%s%s", root, path) >= sizeof(dir))
		return SMCR_SPIN_NO_QUOTA;
	for (;;) {
		int c = dir_quota_cpus(dir);
		char *slash = strrchr(dir, '/');

		if (c < cpus)
			cpus = c;
		if (!slash || (size_t)(slash - dir) < rootlen)
			break;
		*slash = 0; /* the parent */
	}
	return cpus;
}

/* Is "cpu" one of the comma-separated controllers @ctrl? */
static bool has_cpu_controller(const char *ctrl)
{
	for (const char *p = ctrl; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, "cpu", 3) && (p[3] == ',' || !p[3]))
			return true;
	return false;
}

/* The quota of this process's cgroups, from /proc/self/cgroup: v2's
 * ("0::PATH") and v1's cpu controller's ("N:CONTROLLERS:PATH"). */
static int process_quota_cpus(void)
{
	char line[SPIN_PATH_MAX + 64];
	int cpus = SMCR_SPIN_NO_QUOTA;
	FILE *f = fopen("/proc/self/cgroup", "re");

	if (!f)
		return cpus;
	while (fgets(line, sizeof(line), f)) {
		char *ctrl = strchr(line, ':'), *path;
		int c = SMCR_SPIN_NO_QUOTA;

		if (!ctrl || !(path = strchr(ctrl + 1, ':')))
			continue;
		*ctrl++ = 0;
		*path++ = 0;
		path[strcspn(path, "\n")] = 0;
		if (!strcmp(line, "0") && !*ctrl)
			c = smcr_spin_quota_cpus(SPIN_CGROUP_V2_ROOT, path);
		else if (has_cpu_controller(ctrl))
			c = smcr_spin_quota_cpus(SPIN_CGROUP_V1_ROOT, path);
		if (c < cpus)
			cpus = c;
	}
	fclose(f);
	return cpus;
}

/* The CPUs the calling thread's affinity mask allows. */
static int affinity_cpus(void)
{
	cpu_set_t set;
	long n;

	if (!sched_getaffinity(0, sizeof(set), &set))
		return CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN); /* more CPUs than a cpu_set_t holds */
	return n > 0 ? (int)n : 1;
}

int smcr_spin_cpus(long now_ms)
{
	/* the quota is the process's; the mask the thread's own */
	static atomic_int quota = SMCR_SPIN_NO_QUOTA;
	static atomic_long quota_until;
	static _Thread_local int aff;
	static _Thread_local long aff_until;
	int q;

	if (now_ms >= atomic_load_explicit(&quota_until, memory_order_relaxed)) {
		atomic_store_explicit(&quota, process_quota_cpus(), memory_order_relaxed);
		atomic_store_explicit(&quota_until, now_ms + SPIN_CPUS_RECHECK_MS,
				      memory_order_relaxed);
	}
	if (!aff || now_ms >= aff_until) {
		aff = affinity_cpus();
		aff_until = now_ms + SPIN_CPUS_RECHECK_MS;
	}
	q = atomic_load_explicit(&quota, memory_order_relaxed);
	return q < aff ? q : aff;
}

/* ---- the spinners' slots ---------------------------------------------- */

/* Threads spinning now, process-wide. */
static atomic_int spinners;

/* Half the CPUs, rounded up, may spin: more would take the CPU their peers
 * need. With one CPU (or a quota below two), none: any spinner does. */
static int spin_slots(int cpus)
{
	return cpus < 2 ? 0 : (cpus + 1) / 2;
}

bool smcr_spin_get(long now_ms)
{
	int slots = spin_slots(smcr_spin_cpus(now_ms));

	if (atomic_fetch_add(&spinners, 1) < slots)
		return true;
	atomic_fetch_sub(&spinners, 1);
	return false;
}

void smcr_spin_put(void)
{
	atomic_fetch_sub(&spinners, 1);
}
