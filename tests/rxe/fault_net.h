/* SPDX-License-Identifier: MIT */
/*
 * Faults on the wire of the guest's two hosts (tests/rxe/guest-run.sh
 * --setup two): tc netem on both ends of the veth pair, the RoCE netdev
 * taken down and brought back (with the routes and neighbours the guest's
 * topology needs restored), and the kernel's count of verbs objects. All
 * helpers return 0 or -1 and print what failed; the caller asserts. Needs
 * root (the guest). The *_path() forms name the RoCE path (1, or 2 of
 * --setup twopath: USMC_TEST_NETDEV_A2/_B2...); the others act on path 1.
 */
#ifndef USMC_TEST_FAULT_NET_H
#define USMC_TEST_FAULT_NET_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "roce_cut.h"

/* Runs a shell command built from @fmt; 0 if it exited 0. */
static inline int __attribute__((format(printf, 1, 2))) fnet_sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	if (rc)
		fprintf(stderr, "fault_net: '%s' failed (%d)\n", cmd, rc);
	return rc ? -1 : 0;
}

/* The netdev of host @which (0: A, 1: B) on RoCE path @path. */
static inline const char *fnet_path_dev(int path, int which)
{
	return roce_path_env(which ? "USMC_TEST_NETDEV_B" : "USMC_TEST_NETDEV_A", path);
}

static inline const char *fnet_dev(int which)
{
	return fnet_path_dev(1, which);
}

/*
 * A netem qdisc with @spec ("loss 1%", "duplicate 2%", ...) at the root of
 * both veths of path @path: every packet between the two hosts on that
 * path, RoCE v2 and TCP alike, crosses exactly one of them. NULL or ""
 * removes it.
 */
static inline int fnet_netem_path(int path, const char *spec)
{
	int rc = 0;

	for (int i = 0; i < 2; i++) {
		const char *d = fnet_path_dev(path, i);
		char cmd[128];

		if (!d)
			return -1;
		if (spec && *spec) {
			rc |= fnet_sh("tc qdisc replace dev %s root netem %s", d, spec);
		} else {
			snprintf(cmd, sizeof(cmd), "tc qdisc del dev %s root 2>/dev/null", d);
			system(cmd);
		}
	}
	return rc;
}

static inline int fnet_netem(const char *spec)
{
	return fnet_netem_path(1, spec);
}

/* The MAC of netdev @dev into @mac (18 bytes), from sysfs. */
static inline int fnet_mac(const char *dev, char mac[18])
{
	char path[128];
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "/sys/class/net/%s/address", dev);
	f = fopen(path, "r");
	ok = f && fscanf(f, "%17s", mac) == 1;
	if (f)
		fclose(f);
	return ok ? 0 : -1;
}

/*
 * Host A's RoCE netdev of path @path down (@down) or up again. Down: the
 * veth pair loses its carrier on both ends (both rxe ports of the path go
 * DOWN), and the kernel drops the routes and neighbours through it; with
 * ignore_routes_with_linkdown the traffic between the path's two addresses
 * then goes through lo (TCP lives, RDMA does not: rxe transmits only on its
 * own netdev). The other path is untouched. Up: the routes and the
 * permanent neighbours of the guest's topology come back: path p routes in
 * tables 98 + 2p (to B) and 99 + 2p (to A), as guest-run.sh veth_path()
 * builds them.
 */
static inline int fnet_link_path(int path, bool down)
{
	const char *a = roce_path_env("USMC_TEST_HOST_A", path);
	const char *b = roce_path_env("USMC_TEST_HOST_B", path);
	const char *da = fnet_path_dev(path, 0), *db = fnet_path_dev(path, 1);
	int table = 98 + 2 * path;
	char ma[18], mb[18];

	if (path < 1 || !a || !b || !da || !db || fnet_mac(da, ma) || fnet_mac(db, mb))
		return -1;
	if (down)
		return fnet_sh("echo 1 > /proc/sys/net/ipv4/conf/%s/ignore_routes_with_linkdown && "
			       "echo 1 > /proc/sys/net/ipv4/conf/%s/ignore_routes_with_linkdown && "
			       "ip link set %s down",
			       da, db, da);
	return fnet_sh("ip link set %s up && "
		       "ip route replace %s dev %s src %s table %d && "
		       "ip route replace %s dev %s src %s table %d && "
		       "ip neigh replace %s lladdr %s dev %s nud permanent && "
		       "ip neigh replace %s lladdr %s dev %s nud permanent",
		       da, b, da, a, table, a, db, b, table + 1, b, mb, da, a, ma, db);
}

/* fnet_link_path() of path 1. */
static inline int fnet_link(bool down)
{
	return fnet_link_path(1, down);
}

/* The state of the RoCE port of rxe device @dev ("ACTIVE", "DOWN"). */
static inline int fnet_port_state(const char *dev, char *out, size_t len)
{
	char path[160], line[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/state", dev);
	f = fopen(path, "r");
	if (!f || !fgets(line, sizeof(line), f)) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	line[strcspn(line, "\n")] = 0;
	snprintf(out, len, "%s", strchr(line, ' ') ? strchr(line, ' ') + 1 : line);
	return 0;
}

/* Verbs objects the kernel counts for process @pid on every device
 * (`rdma res show qp|mr|cq|pd`): what a leak of ours would show. The
 * kernel names the thread that made each, so objects made by a process's
 * other threads carry their ids: @pid 0 counts every object of the guest
 * (for a test that is the only verbs user then). */
struct fnet_res {
	int qp, mr, cq, pd;
};

static inline int fnet_res_count(const char *kind, int pid)
{
	char cmd[160], line[512], want[32];
	int n = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "rdma res show %s 2>/dev/null", kind);
	snprintf(want, sizeof(want), " pid %d ", pid);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = ' ';
		if (pid <= 0 ? line[0] != ' ' : strstr(line, want) != NULL)
			n++; /* every object is a line of its own */
	}
	return pclose(f) == 0 ? n : -1;
}

static inline struct fnet_res fnet_res_of(int pid)
{
	return (struct fnet_res){.qp = fnet_res_count("qp", pid),
				 .mr = fnet_res_count("mr", pid),
				 .cq = fnet_res_count("cq", pid),
				 .pd = fnet_res_count("pd", pid)};
}

#endif
