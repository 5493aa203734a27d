/* SPDX-License-Identifier: MIT */
/*
 * The Linux kernel's SMC statistics of this network namespace (generic
 * netlink SMC_NETLINK_GET_STATS and SMC_NETLINK_GET_FBACK_STATS, as
 * net/smc/smc_stats.c dumps them): how many handshakes ended in SMC-R, how
 * many fell back to TCP, how many failed, per side. Counters only grow;
 * a run's share is the difference of two reads.
 */
#ifndef USMC_TOOLS_SMC_KSTATS_H
#define USMC_TOOLS_SMC_KSTATS_H

#include <stdint.h>

struct smc_kstats {
	uint64_t clnt_smcr, srv_smcr;	  /* SMC-R handshakes done, v1 and v2 */
	uint64_t clnt_fback, srv_fback;	  /* connections that fell back to TCP */
	uint64_t clnt_hs_err, srv_hs_err; /* handshakes that failed */
};

/* Reads the counters; 0, or a positive errno (ENOENT: no smc module). */
int smc_kstats_read(struct smc_kstats *ks);

/* now - then, 0 if the counters went back (the module was reloaded). */
static inline uint64_t smc_kstats_delta(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

#endif
