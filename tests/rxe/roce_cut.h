/* SPDX-License-Identifier: MIT */
/* Test helper: break the RDMA path between the guest's two hosts, keep TCP. */
#ifndef USMC_TEST_ROCE_CUT_H
#define USMC_TEST_ROCE_CUT_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * Cut (or restore) the RDMA path between the two hosts: RoCE v2 packets
 * (UDP port 4791) are dropped as they leave either veth, TCP still flows.
 * Returns 0, or -1 if tc failed (the guest only: the netdevs come from
 * USMC_TEST_NETDEV_A/B).
 */
static inline int roce_cut(bool cut)
{
	const char *dev[2] = {getenv("USMC_TEST_NETDEV_A"), getenv("USMC_TEST_NETDEV_B")};
	char cmd[512];
	int rc = 0;

	for (int i = 0; i < 2; i++) {
		if (!dev[i])
			return -1;
		if (cut)
			snprintf(
				cmd, sizeof(cmd),
				"tc qdisc add dev %s clsact && tc filter add dev %s egress protocol ip "
				"prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff "
				"action drop",
				dev[i], dev[i]);
		else
			snprintf(cmd, sizeof(cmd), "tc qdisc del dev %s clsact 2>/dev/null",
				 dev[i]);
		if (system(cmd) != 0 && cut)
			rc = -1;
	}
	return rc;
}

#endif
