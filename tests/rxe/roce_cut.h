/* SPDX-License-Identifier: MIT */
/* Test helper: break an RDMA path between the guest's two hosts, keep TCP. */
#ifndef USMC_TEST_ROCE_CUT_H
#define USMC_TEST_ROCE_CUT_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * The guest's RoCE paths (tests/rxe/guest-run.sh): path 1 is the setup's
 * veth pair (USMC_TEST_NETDEV_A/_B...), path 2 the second one of
 * --setup twopath (USMC_TEST_NETDEV_A2/_B2...). roce_path_env() reads
 * variable @base ("USMC_TEST_NETDEV_A") of path @path; NULL if unset.
 */
static inline const char *roce_path_env(const char *base, int path)
{
	char name[64];

	if (path <= 1)
		return getenv(base);
	snprintf(name, sizeof(name), "%s%d", base, path);
	return getenv(name);
}

/* RoCE v2 (UDP port 4791) dropped at tc hook @hook ("egress", "ingress")
 * of both veths of path @path, or restored (!@cut). */
static inline int roce_cut_path_at(int path, bool cut, const char *hook)
{
	const char *dev[2] = {roce_path_env("USMC_TEST_NETDEV_A", path),
			      roce_path_env("USMC_TEST_NETDEV_B", path)};
	char cmd[512];
	int rc = 0;

	for (int i = 0; i < 2; i++) {
		if (!dev[i])
			return -1;
		if (cut)
			snprintf(
				cmd, sizeof(cmd),
				"tc qdisc add dev %s clsact && tc filter add dev %s %s protocol ip "
				"prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff "
				"action drop",
				dev[i], dev[i], hook);
		else
			snprintf(cmd, sizeof(cmd), "tc qdisc del dev %s clsact 2>/dev/null",
				 dev[i]);
		if (system(cmd) != 0 && cut)
			rc = -1;
	}
	return rc;
}

/* As roce_cut_path_at(), on path 1. */
static inline int roce_cut_at(bool cut, const char *hook)
{
	return roce_cut_path_at(1, cut, hook);
}

/*
 * Cut (or restore) the RDMA path between the two hosts (path 1 of --setup
 * twopath): RoCE v2 packets are dropped as they leave either veth, TCP
 * still flows (rxe sees the drop and fails the send at once). Returns 0,
 * or -1 if tc failed (the guest only: the netdevs come from
 * USMC_TEST_NETDEV_A/B).
 */
static inline int roce_cut(bool cut)
{
	return roce_cut_at(cut, "egress");
}

/*
 * As roce_cut(), but RoCE is lost on the way (dropped as it arrives at the
 * other veth): the sender's send succeeds and its QP retries until it
 * gives up, as on a fabric that loses the packets. roce_cut(false) (or
 * roce_lose(false)) restores.
 */
static inline int roce_lose(bool lose)
{
	return roce_cut_at(lose, "ingress");
}

/*
 * roce_cut() and roce_lose() of path @path alone (1 or 2): the other path's
 * RoCE and every path's TCP still flow. A path is restored with
 * roce_cut_path(path, false) whichever way it was cut.
 */
static inline int roce_cut_path(int path, bool cut)
{
	return roce_cut_path_at(path, cut, "egress");
}

static inline int roce_lose_path(int path, bool lose)
{
	return roce_cut_path_at(path, lose, "ingress");
}

/*
 * Hold every TCP segment that host @host (0: A, 1: B) sends for @ms (0:
 * release the hold): a netem delay on that host's veth, for TCP alone
 * (RoCE, if not cut, and ARP pass as they were). It slows one side's CLC,
 * its DECLINE and its data alike. Returns 0, or -1 if tc failed.
 */
static inline int roce_hold_tcp(int host, int ms)
{
	const char *dev = getenv(host ? "USMC_TEST_NETDEV_B" : "USMC_TEST_NETDEV_A");
	char cmd[768];

	if (!dev)
		return -1;
	if (!ms) {
		snprintf(cmd, sizeof(cmd), "tc qdisc del dev %s root 2>/dev/null", dev);
		system(cmd);
		return 0;
	}
	snprintf(cmd, sizeof(cmd),
		 "tc qdisc replace dev %s root handle 1: prio bands 3 "
		 "priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 && "
		 "tc qdisc add dev %s parent 1:3 handle 30: netem delay %dms limit 100000 && "
		 "tc filter add dev %s parent 1: protocol ip prio 1 u32 "
		 "match ip protocol 6 0xff flowid 1:3",
		 dev, dev, ms, dev);
	return system(cmd) == 0 ? 0 : -1;
}

#endif
