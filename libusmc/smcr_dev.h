/* SPDX-License-Identifier: MIT */
/*
 * RoCE devices: which ports can carry SMC-Rv2 (for usmc_ctx_devices()) and
 * which port a connection's local IPv4 address maps to. Both read the GID
 * table with its attributes (type, netdev), never guess from an index.
 */
#ifndef USMC_SMCR_DEV_H
#define USMC_SMCR_DEV_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include <usmc/usmc.h>

#define SMCR_GID_LEN 16 /* an IPv6-format GID (union ibv_gid) */
#define SMCR_MAC_LEN 6	/* ETH_ALEN */

/* The port and GID a connection's local IPv4 address maps to. */
struct smcr_dev {
	char name[64];
	uint8_t port;
	int gid_index;
	uint8_t gid[SMCR_GID_LEN];
	uint8_t mac[SMCR_MAC_LEN];
	enum ibv_mtu active_mtu;
};

/*
 * The RDMA ports a context may use (usmc_ctx_set_devices(), env
 * USMC_DEVICES): "name[:port],...". Linux keeps a host's link groups to
 * its own devices with the pnet table: an alternate device must have the
 * link group's PNETID (net/smc/smc_pnet.c smc_pnet_find_alt_roce()). Where
 * several hosts' devices are visible to one process (containers sharing
 * RDMA devices, a soft-RoCE guest playing two hosts) this list is that
 * grouping. Empty: every port.
 */
#define SMCR_DEV_SET_MAX 16

struct smcr_dev_set {
	int n;
	struct {
		char name[64];
		uint8_t port; /* 0: every port of the device */
	} e[SMCR_DEV_SET_MAX];
};

/* smcr_dev_set_parse() - @s ("" or NULL: every port) into @set; -EINVAL
 * for a malformed list (an empty or too long name, a port not in 1-255,
 * more than SMCR_DEV_SET_MAX entries), @set untouched then. */
int smcr_dev_set_parse(const char *s, struct smcr_dev_set *set);
/* smcr_dev_set_has() - may port @port of device @name be used? */
bool smcr_dev_set_has(const struct smcr_dev_set *set, const char *name, uint8_t port);

/*
 * smcr_dev_discover() - list every port of every RDMA device, with the
 * first IPv4-mapped RoCE v2 GID of each (what SMC-Rv2 needs). No device at
 * all is not an error: *@ndevs is 0 and *@devs NULL.
 */
int smcr_dev_discover(struct usmc_device_info **devs, int *ndevs);

/* smcr_dev_find() - the active RoCE v2 port of @set whose IPv4-mapped GID
 * is @addr. */
int smcr_dev_find(const struct in_addr *addr, const struct smcr_dev_set *set, struct smcr_dev *dev);

/*
 * smcr_dev_find_alt() - an active RoCE v2 port of @set other than @cur
 * (another device, or another port of it) for a link group's second link,
 * with its first IPv4-mapped GID that is none of the peer's
 * @peer_gids[@npeer] (on a host that holds both ends, the peer's ports are
 * not ours to take); -ENODEV if there is none. As Linux's alternate device
 * (net/smc/smc_pnet.c smc_pnet_find_alt_roce()), with @set in the place of
 * the PNETID: any other port of it will do, and the path between the two
 * ends' choices is the routing's to provide.
 */
int smcr_dev_find_alt(const struct smcr_dev *cur, const struct smcr_dev_set *set,
		      const uint8_t (*peer_gids)[SMCR_GID_LEN], int npeer, struct smcr_dev *alt);
/* smcr_dev_open() - a verbs context on the device named @name, or NULL. */
struct ibv_context *smcr_dev_open(const char *name);

/* True if @gid is an IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
bool smcr_gid_is_v4mapped(const uint8_t gid[SMCR_GID_LEN]);

#endif
