/* SPDX-License-Identifier: MIT */
/*
 * Fallback / decline reason codes: the SMC_CLC_DECL_* values Linux puts in a
 * CLC DECLINE (net/smc/smc_clc.h SMC_CLC_DECL_*), plus libusmc's own local reasons.
 * The public names (USMC_REASON_*) are in <usmc/usmc.h>; this table gives
 * each code its name and short text.
 */
#ifndef USMC_REASON_H
#define USMC_REASON_H

#include <stdint.h>

#define SMC_CLC_DECL_MEM	0x01010000u /* insufficient memory */
#define SMC_CLC_DECL_TIMEOUT_CL 0x02010000u /* timeout w4 QP confirm link */
#define SMC_CLC_DECL_TIMEOUT_AL 0x02020000u /* timeout w4 QP add link */
#define SMC_CLC_DECL_CNFERR	0x03000000u /* configuration error */
#define SMC_CLC_DECL_PEERNOSMC	0x03010000u /* peer did not indicate SMC */
#define SMC_CLC_DECL_IPSEC	0x03020000u /* IPsec usage */
#define SMC_CLC_DECL_NOSMCDEV	0x03030000u /* no SMC device found (R or D) */
#define SMC_CLC_DECL_NOSMCDDEV	0x03030001u /* no SMC-D device found */
#define SMC_CLC_DECL_NOSMCRDEV	0x03030002u /* no SMC-R device found */
#define SMC_CLC_DECL_NOISM2SUPP 0x03030003u /* hardware has no ISMv2 support */
#define SMC_CLC_DECL_NOV2EXT	0x03030004u /* peer sent no clc v2 extension */
#define SMC_CLC_DECL_NOV2DEXT	0x03030005u /* peer sent no clc SMC-Dv2 ext. */
#define SMC_CLC_DECL_NOSEID	0x03030006u /* peer sent no SEID */
#define SMC_CLC_DECL_NOSMCD2DEV 0x03030007u /* no SMC-Dv2 device found */
#define SMC_CLC_DECL_NOUEID	0x03030008u /* peer sent no UEID */
#define SMC_CLC_DECL_RELEASEERR 0x03030009u /* release version negotiate failed */
#define SMC_CLC_DECL_MAXCONNERR 0x0303000au /* max connections negotiate failed */
#define SMC_CLC_DECL_MAXLINKERR 0x0303000bu /* max links negotiate failed */
#define SMC_CLC_DECL_MODEUNSUPP 0x03040000u /* smc modes do not match (R or D) */
#define SMC_CLC_DECL_RMBE_EC	0x03050000u /* peer has eyecatcher in RMBE */
#define SMC_CLC_DECL_OPTUNSUPP	0x03060000u /* fastopen sockopt not supported */
#define SMC_CLC_DECL_DIFFPREFIX 0x03070000u /* IP prefix / subnet mismatch */
#define SMC_CLC_DECL_GETVLANERR 0x03080000u /* err to get vlan id of ip device */
#define SMC_CLC_DECL_ISMVLANERR 0x03090000u /* err to reg vlan id on ism dev */
#define SMC_CLC_DECL_NOACTLINK	0x030a0000u /* no active smc-r link in lgr */
#define SMC_CLC_DECL_NOSRVLINK	0x030b0000u /* SMC-R link from srv not found */
#define SMC_CLC_DECL_VERSMISMAT 0x030c0000u /* SMC version mismatch */
#define SMC_CLC_DECL_MAX_DMB	0x030d0000u /* SMC-D DMB limit exceeded */
#define SMC_CLC_DECL_NOROUTE	0x030e0000u /* SMC-Rv2 conn. no route to peer */
#define SMC_CLC_DECL_NOINDIRECT 0x030f0000u /* SMC-Rv2 conn. indirect mismatch */
#define SMC_CLC_DECL_SYNCERR	0x04000000u /* synchronization error */
#define SMC_CLC_DECL_PEERDECL	0x05000000u /* peer declined during handshake */
#define SMC_CLC_DECL_INTERR	0x09990000u /* internal error */
#define SMC_CLC_DECL_ERR_RTOK	0x09990001u /* rtoken handling failed */
#define SMC_CLC_DECL_ERR_RDYLNK 0x09990002u /* ib ready link failed */
#define SMC_CLC_DECL_ERR_REGBUF 0x09990003u /* reg rdma bufs failed */

/*
 * libusmc's own reasons (never sent on the wire: the DECLINE carries the
 * nearest SMC_CLC_DECL_* value) have only their public names,
 * USMC_REASON_DISABLED and friends in <usmc/usmc.h>, in the 0x0a.. range
 * that Linux does not use. The public names of wire codes equal the
 * SMC_CLC_DECL_* above (checked in reason.c).
 */

struct usmc_reason_desc {
	uint32_t code;
	const char *name;
	const char *text;
};

/* Name ("NOSMCRDEV") and text of a code; NULL if the code is unknown. */
const struct usmc_reason_desc *usmc_reason_lookup(uint32_t code);

/* Number of distinct slots usmc_reason_slot() returns (known codes + 1). */
#define USMC_REASON_SLOTS 48

/* A dense index for per-reason counters; unknown codes share the last slot. */
unsigned int usmc_reason_slot(uint32_t code);

/* The code of slot @slot (statistics); NULL for the shared unknown slot. */
const struct usmc_reason_desc *usmc_reason_by_slot(unsigned int slot);

#endif
