// SPDX-License-Identifier: MIT
/*
 * RoCE devices (smcr_dev.h). One walk over the GID tables serves both
 * questions asked of them: which ports can carry SMC-Rv2 at all, and which
 * port owns a given local IPv4 address (net/smc/smc_ib.c
 * smc_ib_determine_gid() does the same matching for the kernel).
 */
#include <errno.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "smcr_dev.h"

/* A device has at most this many GID entries that we look at. */
#define SMCR_GID_TABLE_MAX 1024

bool smcr_gid_is_v4mapped(const uint8_t gid[SMCR_GID_LEN])
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return memcmp(gid, prefix, sizeof(prefix)) == 0;
}

/*
 * Call @visit for each IPv4-mapped RoCE v2 entry of @ib's GID table, in
 * table order, until it returns true. Returns true if one did.
 */
static bool gid_table_walk(struct ibv_context *ib,
			   bool (*visit)(struct ibv_context *ib, const struct ibv_gid_entry *e,
					 void *arg),
			   void *arg)
{
	struct ibv_gid_entry *tbl = calloc(SMCR_GID_TABLE_MAX, sizeof(*tbl));
	ssize_t n = tbl ? ibv_query_gid_table(ib, tbl, SMCR_GID_TABLE_MAX, 0) : 0;
	bool found = false;

	for (ssize_t i = 0; i < n && !found; i++)
		if (tbl[i].gid_type == IBV_GID_TYPE_ROCE_V2 && smcr_gid_is_v4mapped(tbl[i].gid.raw))
			found = visit(ib, &tbl[i], arg);
	free(tbl);
	return found;
}

/* ---- the ports a context may use ------------------------------------- */

/* One "name[:port]" of @len bytes at @s into @set's next entry. */
static int dev_set_add(struct smcr_dev_set *set, const char *s, size_t len)
{
	const char *colon = memchr(s, ':', len);
	size_t nlen = colon ? (size_t)(colon - s) : len;
	long port = 0;

	if (!nlen || nlen >= sizeof(set->e[0].name) || set->n == SMCR_DEV_SET_MAX)
		return -EINVAL;
	if (colon) {
		char num[4] = "";
		size_t plen = len - nlen - 1;
		char *end;

		if (!plen || plen >= sizeof(num))
			return -EINVAL;
		memcpy(num, colon + 1, plen);
		port = strtol(num, &end, 10);
		if (*end || port < 1 || port > 255)
			return -EINVAL;
	}
	memcpy(set->e[set->n].name, s, nlen);
	set->e[set->n].name[nlen] = '\0';
	set->e[set->n++].port = (uint8_t)port;
	return 0;
}

int smcr_dev_set_parse(const char *s, struct smcr_dev_set *set)
{
	struct smcr_dev_set out = {0};

	while (s && *s) {
		size_t len = strcspn(s, ",");
		int rc = dev_set_add(&out, s, len);

		if (rc)
			return rc;
		s += len;
		if (*s == ',' && !*++s)
			return -EINVAL; /* a trailing comma: an empty name */
	}
	*set = out;
	return 0;
}

bool smcr_dev_set_has(const struct smcr_dev_set *set, const char *name, uint8_t port)
{
	if (!set || !set->n)
		return true;
	for (int i = 0; i < set->n; i++)
		if (!strcmp(set->e[i].name, name) && (!set->e[i].port || set->e[i].port == port))
			return true;
	return false;
}

static bool dev_set_has_entry(const struct smcr_dev_set *set, struct ibv_context *ib,
			      const struct ibv_gid_entry *e)
{
	return smcr_dev_set_has(set, ibv_get_device_name(ib->device), (uint8_t)e->port_num);
}

/* ---- discovery: usmc_ctx_devices() ----------------------------------- */

/* The first SMC-Rv2 GID of the port @arg describes. */
static bool pick_port_gid(struct ibv_context *ib, const struct ibv_gid_entry *e, void *arg)
{
	struct usmc_device_info *info = arg;

	if (e->port_num != info->port)
		return false;
	info->gid_index = (int)e->gid_index;
	if (!if_indextoname(e->ndev_ifindex, info->netdev))
		info->netdev[0] = '\0';
	return true;
}

static int add_ports(struct ibv_context *ib, struct usmc_device_info **devs, int *ndevs)
{
	struct ibv_device_attr attr;

	if (ibv_query_device(ib, &attr))
		return 0; /* unusable device: skip it */
	for (uint8_t p = 1; p <= attr.phys_port_cnt; p++) {
		struct usmc_device_info *grown = realloc(*devs, (*ndevs + 1) * sizeof(**devs));
		struct usmc_device_info *info;

		if (!grown)
			return -ENOMEM;
		*devs = grown;
		info = &grown[(*ndevs)++];
		memset(info, 0, sizeof(*info));
		strncpy(info->name, ibv_get_device_name(ib->device), sizeof(info->name) - 1);
		info->port = p;
		info->gid_index = -1;
		gid_table_walk(ib, pick_port_gid, info);
	}
	return 0;
}

int smcr_dev_discover(struct usmc_device_info **devs, int *ndevs)
{
	struct ibv_device **list;
	int n = 0, rc = 0;

	*devs = NULL;
	*ndevs = 0;
	list = ibv_get_device_list(&n);
	if (!list)
		return 0; /* no RDMA subsystem at all: TCP only */
	for (int i = 0; i < n && !rc; i++) {
		struct ibv_context *ib = ibv_open_device(list[i]);

		if (!ib)
			continue;
		rc = add_ports(ib, devs, ndevs);
		ibv_close_device(ib);
	}
	ibv_free_device_list(list);
	if (rc) {
		free(*devs);
		*devs = NULL;
		*ndevs = 0;
	}
	return rc;
}

/* ---- lookup: the port of a local address ----------------------------- */

static void netdev_mac(uint32_t ifindex, uint8_t mac[SMCR_MAC_LEN])
{
	struct ifreq ifr;
	int fd;

	memset(mac, 0, SMCR_MAC_LEN);
	memset(&ifr, 0, sizeof(ifr));
	if (!if_indextoname(ifindex, ifr.ifr_name))
		return;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (!ioctl(fd, SIOCGIFHWADDR, &ifr))
		memcpy(mac, ifr.ifr_hwaddr.sa_data, SMCR_MAC_LEN);
	close(fd);
}

struct addr_match {
	const struct in_addr *addr;
	const struct smcr_dev_set *set;
	struct smcr_dev *dev;
};

/* @e is on an active port: fill @dev with it. */
static bool fill_dev(struct ibv_context *ib, const struct ibv_gid_entry *e, struct smcr_dev *dev)
{
	struct ibv_port_attr pa;

	if (ibv_query_port(ib, (uint8_t)e->port_num, &pa) || pa.state != IBV_PORT_ACTIVE)
		return false;
	memset(dev, 0, sizeof(*dev));
	strncpy(dev->name, ibv_get_device_name(ib->device), sizeof(dev->name) - 1);
	dev->port = (uint8_t)e->port_num;
	dev->gid_index = (int)e->gid_index;
	memcpy(dev->gid, e->gid.raw, SMCR_GID_LEN);
	dev->active_mtu = pa.active_mtu;
	netdev_mac(e->ndev_ifindex, dev->mac);
	return true;
}

/* The entry is @arg's address on an active port: fill its smcr_dev. */
static bool match_addr(struct ibv_context *ib, const struct ibv_gid_entry *e, void *arg)
{
	struct addr_match *m = arg;

	return !memcmp(e->gid.raw + 12, &m->addr->s_addr, 4) && dev_set_has_entry(m->set, ib, e) &&
	       fill_dev(ib, e, m->dev);
}

struct alt_match {
	const struct smcr_dev *cur;
	const struct smcr_dev_set *set;
	const uint8_t (*peer_gids)[SMCR_GID_LEN];
	int npeer;
	struct smcr_dev *alt;
};

/* The entry is on an active port other than @arg's current one, and not
 * one of the peer's addresses. */
static bool match_alt(struct ibv_context *ib, const struct ibv_gid_entry *e, void *arg)
{
	struct alt_match *m = arg;

	if (!strcmp(ibv_get_device_name(ib->device), m->cur->name) && e->port_num == m->cur->port)
		return false;
	if (!dev_set_has_entry(m->set, ib, e))
		return false;
	for (int i = 0; i < m->npeer; i++)
		if (!memcmp(e->gid.raw, m->peer_gids[i], SMCR_GID_LEN))
			return false;
	return fill_dev(ib, e, m->alt);
}

/* The first device whose GID table has an entry @visit takes. */
static int dev_walk(bool (*visit)(struct ibv_context *ib, const struct ibv_gid_entry *e, void *arg),
		    void *arg)
{
	struct ibv_device **list;
	int n = 0;
	bool found = false;

	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !found; i++) {
		struct ibv_context *ib = ibv_open_device(list[i]);

		if (!ib)
			continue;
		found = gid_table_walk(ib, visit, arg);
		ibv_close_device(ib);
	}
	if (list)
		ibv_free_device_list(list);
	return found ? 0 : -ENODEV;
}

int smcr_dev_find(const struct in_addr *addr, const struct smcr_dev_set *set, struct smcr_dev *dev)
{
	struct addr_match m = {.addr = addr, .set = set, .dev = dev};

	return dev_walk(match_addr, &m);
}

int smcr_dev_find_alt(const struct smcr_dev *cur, const struct smcr_dev_set *set,
		      const uint8_t (*peer_gids)[SMCR_GID_LEN], int npeer, struct smcr_dev *alt)
{
	struct alt_match m = {
		.cur = cur, .set = set, .peer_gids = peer_gids, .npeer = npeer, .alt = alt};

	return dev_walk(match_alt, &m);
}

struct ibv_context *smcr_dev_open(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ib = NULL;

	for (int i = 0; list && list[i] && !ib; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ib = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	return ib;
}
