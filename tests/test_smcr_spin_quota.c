// SPDX-License-Identifier: MIT
/*
 * The CPU quota a spinner counts with (libusmc/smcr_spin.c): whole CPUs of
 * the smallest quota up a cgroup's hierarchy, cgroup v2's cpu.max or v1's
 * cpu.cfs_quota_us and cpu.cfs_period_us, read from a tree the test makes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "smcr_spin.h"

static char root[64];

static void put(const char *rel, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s%s", root, rel);
	f = fopen(path, "w");
	CHECK(f && fputs(text, f) >= 0 && !fclose(f), "write %s", path);
}

static void dir(const char *rel)
{
	char path[256];

	snprintf(path, sizeof(path), "%s%s", root, rel);
	CHECK(!mkdir(path, 0700), "mkdir %s", path);
}

static void expect(const char *path, int cpus, const char *what)
{
	int got = smcr_spin_quota_cpus(root, path);

	CHECK(got == cpus, "%s (%s): %d CPUs, %d expected", what, path, got, cpus);
	printf("%-44s %-10s %d\n", what, path, got);
}

int main(void)
{
	char cmd[128];

	snprintf(root, sizeof(root), "/tmp/usmc-spin-quota-XXXXXX");
	CHECK(mkdtemp(root), "mkdtemp");
	/* v2: none at the top, none in a, 2.5 CPUs in a/b, half a CPU in a/h */
	dir("/a");
	put("/a/cpu.max", "max 100000\n");
	dir("/a/b");
	put("/a/b/cpu.max", "250000 100000\n");
	dir("/a/b/c");
	dir("/a/h");
	put("/a/h/cpu.max", "50000 100000\n");
	expect("/", SMCR_SPIN_NO_QUOTA, "v2, the root");
	expect("/a", SMCR_SPIN_NO_QUOTA, "v2, max");
	expect("/a/b", 2, "v2, 2.5 CPUs: whole ones");
	expect("/a/b/c", 2, "v2, the parent's quota");
	expect("/a/h", 0, "v2, half a CPU");
	/* v1: no quota (-1) above 1.5 CPUs */
	dir("/x");
	put("/x/cpu.cfs_quota_us", "-1\n");
	put("/x/cpu.cfs_period_us", "100000\n");
	dir("/x/y");
	put("/x/y/cpu.cfs_quota_us", "150000\n");
	put("/x/y/cpu.cfs_period_us", "100000\n");
	expect("/x", SMCR_SPIN_NO_QUOTA, "v1, -1");
	expect("/x/y", 1, "v1, 1.5 CPUs");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK(!system(cmd), "cleanup");
	printf("PASS\n");
	return 0;
}
