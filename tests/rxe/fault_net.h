/* SPDX-License-Identifier: MIT */
/*
 * Faults on the wire of the guest's two hosts (tests/rxe/guest-run.sh
 * --setup two): tc netem on both ends of the veth pair, the RoCE netdev
 * taken down and brought back (with the routes and neighbours the guest's
 * topology needs restored), and the kernel's count of verbs objects. All
 * helpers return 0 or -1 and print what failed; the caller asserts. Needs
 * root (the guest).
 */
#ifndef USMC_TEST_FAULT_NET_H
#define USMC_TEST_FAULT_NET_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static inline const char *fnet_dev(int which)
{
	return getenv(which ? "USMC_TEST_NETDEV_B" : "USMC_TEST_NETDEV_A");
}

/*
 * A netem qdisc with @spec ("loss 1%", "duplicate 2%", ...) at the root of
 * both veths: every packet between the two hosts, RoCE v2 and TCP alike,
 * crosses exactly one of them. NULL or "" removes it.
 */
static inline int fnet_netem(const char *spec)
{
	int rc = 0;

	for (int i = 0; i < 2; i++) {
		const char *d = fnet_dev(i);

		if (!d)
			return -1;
		if (spec && *spec)
			rc |= fnet_sh("tc qdisc replace dev %s root netem %s", d, spec);
		else
			system("tc qdisc del dev veth0 root 2>/dev/null; "
			       "tc qdisc del dev veth1 root 2>/dev/null");
	}
	return rc;
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
 * Host A's RoCE netdev down (@down) or up again. Down: the veth pair loses
 * its carrier on both ends (both rxe ports go DOWN), and the kernel drops
 * the routes and neighbours through veth0; with ignore_routes_with_linkdown
 * the traffic between the two addresses then goes through lo (TCP lives,
 * RDMA does not: rxe transmits only on its own netdev). Up: the routes and
 * the permanent neighbours of the guest's topology come back.
 */
static inline int fnet_link(bool down)
{
	const char *a = getenv("USMC_TEST_HOST_A"), *b = getenv("USMC_TEST_HOST_B");
	const char *da = fnet_dev(0), *db = fnet_dev(1);
	char ma[18], mb[18];

	if (!a || !b || !da || !db || fnet_mac(da, ma) || fnet_mac(db, mb))
		return -1;
	if (down)
		return fnet_sh("echo 1 > /proc/sys/net/ipv4/conf/%s/ignore_routes_with_linkdown && "
			       "echo 1 > /proc/sys/net/ipv4/conf/%s/ignore_routes_with_linkdown && "
			       "ip link set %s down",
			       da, db, da);
	return fnet_sh("ip link set %s up && "
		       "ip route replace %s dev %s src %s table 100 && "
		       "ip route replace %s dev %s src %s table 101 && "
		       "ip neigh replace %s lladdr %s dev %s nud permanent && "
		       "ip neigh replace %s lladdr %s dev %s nud permanent",
		       da, b, da, a, a, db, b, b, mb, da, a, ma, db);
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
 * (`rdma res show qp|mr|cq|pd`): what a leak of ours would show. */
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
		if (strstr(line, want))
			n++;
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
