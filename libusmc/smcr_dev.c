// SPDX-License-Identifier: MIT
/*
 * SMC-Rv2 device selection: the RoCE v2 GID whose IPv4-mapped address is
 * the TCP connection's own local address, read from the GID table with its
 * attributes (type, netdev), never guessed from the index.
 */
#include <errno.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ib.h"
#include "smcr.h"

#define SMCR_GID_TABLE_MAX 1024

static void netdev_mac(uint32_t ifindex, uint8_t mac[6])
{
	struct ifreq ifr;
	int fd;

	memset(mac, 0, 6);
	memset(&ifr, 0, sizeof(ifr));
	if (!if_indextoname(ifindex, ifr.ifr_name))
		return;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (!ioctl(fd, SIOCGIFHWADDR, &ifr))
		memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
	close(fd);
}

static bool gid_is_addr(const union ibv_gid *gid, const struct in_addr *addr)
{
	return ib_gid_is_v4mapped(gid->raw) && !memcmp(gid->raw + 12, &addr->s_addr, 4);
}

/* Look for @addr in one device's GID table; 0 and *dev filled if found. */
static int dev_match(struct ibv_context *ib, const struct in_addr *addr, struct ibv_gid_entry *tbl,
		     struct smcr_dev *dev)
{
	ssize_t n = ibv_query_gid_table(ib, tbl, SMCR_GID_TABLE_MAX, 0);

	for (ssize_t i = 0; i < n; i++) {
		struct ibv_port_attr pa;

		if (tbl[i].gid_type != IBV_GID_TYPE_ROCE_V2 || !gid_is_addr(&tbl[i].gid, addr))
			continue;
		if (ibv_query_port(ib, (uint8_t)tbl[i].port_num, &pa) ||
		    pa.state != IBV_PORT_ACTIVE)
			continue;
		memset(dev, 0, sizeof(*dev));
		strncpy(dev->name, ibv_get_device_name(ib->device), sizeof(dev->name) - 1);
		dev->port = (uint8_t)tbl[i].port_num;
		dev->gid_index = (int)tbl[i].gid_index;
		memcpy(dev->gid, tbl[i].gid.raw, 16);
		dev->active_mtu = pa.active_mtu;
		netdev_mac(tbl[i].ndev_ifindex, dev->mac);
		return 0;
	}
	return -ENODEV;
}

int smcr_dev_find(const struct in_addr *addr, struct smcr_dev *dev)
{
	struct ibv_gid_entry *tbl = calloc(SMCR_GID_TABLE_MAX, sizeof(*tbl));
	struct ibv_device **list;
	int n = 0, rc = -ENODEV;

	if (!tbl)
		return -ENOMEM;
	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && rc; i++) {
		struct ibv_context *ib = ibv_open_device(list[i]);

		if (!ib)
			continue;
		rc = dev_match(ib, addr, tbl, dev);
		ibv_close_device(ib);
	}
	if (list)
		ibv_free_device_list(list);
	free(tbl);
	return rc;
}
