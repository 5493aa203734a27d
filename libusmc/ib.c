// SPDX-License-Identifier: MIT
#include <errno.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "ib.h"

/* A device has at most this many GID entries per port that we look at. */
#define IB_GID_TABLE_MAX 1024

bool ib_gid_is_v4mapped(const uint8_t gid[16])
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return memcmp(gid, prefix, sizeof(prefix)) == 0;
}

/* Find the first IPv4-mapped RoCE v2 GID of @port. */
static void ib_pick_v2_gid(struct ibv_context *dev, uint8_t port, struct usmc_device_info *info,
			   struct ibv_gid_entry *tbl, ssize_t n)
{
	for (ssize_t i = 0; i < n; i++) {
		if (tbl[i].port_num != port || tbl[i].gid_type != IBV_GID_TYPE_ROCE_V2 ||
		    !ib_gid_is_v4mapped(tbl[i].gid.raw))
			continue;
		info->gid_index = (int)tbl[i].gid_index;
		if (!if_indextoname(tbl[i].ndev_ifindex, info->netdev))
			info->netdev[0] = '\0';
		return;
	}
}

static int ib_add_ports(struct ibv_context *dev, struct usmc_device_info **devs, int *ndevs)
{
	struct ibv_device_attr attr;
	struct ibv_gid_entry *tbl;
	ssize_t n;

	if (ibv_query_device(dev, &attr))
		return 0; /* unusable device: skip it */
	tbl = calloc(IB_GID_TABLE_MAX, sizeof(*tbl));
	if (!tbl)
		return -ENOMEM;
	n = ibv_query_gid_table(dev, tbl, IB_GID_TABLE_MAX, 0);
	for (uint8_t p = 1; p <= attr.phys_port_cnt; p++) {
		struct usmc_device_info *grown = realloc(*devs, (*ndevs + 1) * sizeof(**devs));

		if (!grown) {
			free(tbl);
			return -ENOMEM;
		}
		*devs = grown;
		struct usmc_device_info *info = &grown[(*ndevs)++];

		memset(info, 0, sizeof(*info));
		strncpy(info->name, ibv_get_device_name(dev->device), sizeof(info->name) - 1);
		info->port = p;
		info->gid_index = -1;
		if (n > 0)
			ib_pick_v2_gid(dev, p, info, tbl, n);
	}
	free(tbl);
	return 0;
}

int ib_discover(struct usmc_device_info **devs, int *ndevs)
{
	struct ibv_device **list;
	int n = 0, rc = 0;

	*devs = NULL;
	*ndevs = 0;
	list = ibv_get_device_list(&n);
	if (!list)
		return 0; /* no RDMA subsystem at all: TCP only */
	for (int i = 0; i < n && !rc; i++) {
		struct ibv_context *dev = ibv_open_device(list[i]);

		if (!dev)
			continue;
		rc = ib_add_ports(dev, devs, ndevs);
		ibv_close_device(dev);
	}
	ibv_free_device_list(list);
	if (rc) {
		free(*devs);
		*devs = NULL;
		*ndevs = 0;
	}
	return rc;
}
