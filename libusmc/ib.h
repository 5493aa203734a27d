/* SPDX-License-Identifier: MIT */
/* Verbs layer: device discovery (and, later, QPs and completion queues). */
#ifndef USMC_IB_H
#define USMC_IB_H

#include <stdbool.h>
#include <stdint.h>

#include <usmc/usmc.h>

/*
 * ib_discover() - list every port of every RDMA device, with the first
 * IPv4-mapped RoCE v2 GID of each (what SMC-Rv2 needs). No device at all is
 * not an error: *@ndevs is 0 and *@devs NULL.
 */
int ib_discover(struct usmc_device_info **devs, int *ndevs);

/* True if @gid is an IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
bool ib_gid_is_v4mapped(const uint8_t gid[16]);

#endif
