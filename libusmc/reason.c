// SPDX-License-Identifier: MIT
#include <stddef.h>

#include <usmc/usmc.h>

#include "reason.h"

#define REASON(sym, txt)                      \
	{                                     \
		SMC_CLC_DECL_##sym, #sym, txt \
	}
#define OWN(sym, txt)                        \
	{                                    \
		USMC_REASON_##sym, #sym, txt \
	}

static const struct usmc_reason_desc reasons[] = {
	{0, "NONE", "no fallback"},
	REASON(MEM, "insufficient memory"),
	REASON(TIMEOUT_CL, "timeout waiting for LLC CONFIRM_LINK"),
	REASON(TIMEOUT_AL, "timeout waiting for LLC ADD_LINK"),
	REASON(CNFERR, "configuration error"),
	REASON(PEERNOSMC, "peer did not indicate SMC"),
	REASON(IPSEC, "IPsec in use"),
	REASON(NOSMCDEV, "no SMC device found"),
	REASON(NOSMCDDEV, "no SMC-D device found"),
	REASON(NOSMCRDEV, "no SMC-R device found"),
	REASON(NOISM2SUPP, "no ISMv2 support"),
	REASON(NOV2EXT, "peer sent no CLC v2 extension"),
	REASON(NOV2DEXT, "peer sent no CLC SMC-Dv2 extension"),
	REASON(NOSEID, "peer sent no SEID"),
	REASON(NOSMCD2DEV, "no SMC-Dv2 device found"),
	REASON(NOUEID, "no common UEID"),
	REASON(RELEASEERR, "release version negotiation failed"),
	REASON(MAXCONNERR, "max connections negotiation failed"),
	REASON(MAXLINKERR, "max links negotiation failed"),
	REASON(MODEUNSUPP, "SMC modes do not match"),
	REASON(RMBE_EC, "peer uses an RMBE eyecatcher"),
	REASON(OPTUNSUPP, "socket option not supported with SMC"),
	REASON(DIFFPREFIX, "IP prefix / subnet mismatch"),
	REASON(GETVLANERR, "cannot get VLAN of IP device"),
	REASON(ISMVLANERR, "cannot register VLAN on ISM device"),
	REASON(NOACTLINK, "no active link in link group"),
	REASON(NOSRVLINK, "server link not found"),
	REASON(VERSMISMAT, "SMC version mismatch"),
	REASON(MAX_DMB, "SMC-D DMB limit exceeded"),
	REASON(NOROUTE, "SMC-Rv2: no route to peer"),
	REASON(NOINDIRECT, "SMC-Rv2: direct/indirect mismatch"),
	REASON(SYNCERR, "link group out of sync"),
	REASON(PEERDECL, "peer declined"),
	REASON(INTERR, "internal error"),
	REASON(ERR_RTOK, "rtoken handling failed"),
	REASON(ERR_RDYLNK, "making link ready failed"),
	REASON(ERR_REGBUF, "buffer registration failed"),
	OWN(DISABLED, "SMC-R disabled by option"),
	OWN(HS_CONGESTED, "handshake queue congested (auto-fallback)"),
	OWN(SERVER_BUSY, "server handshake queue congested"),
	OWN(HS_TIMEOUT, "CLC handshake timed out"),
	OWN(SRC_BUSY, "handshakes from the peer's address at their share"),
};

/* A public USMC_REASON_* of a wire code is that code, never a second value. */
#define SAME_CODE(sym) \
	_Static_assert(USMC_REASON_##sym == SMC_CLC_DECL_##sym, #sym " drifted from Linux")
SAME_CODE(MEM);
SAME_CODE(TIMEOUT_CL);
SAME_CODE(PEERNOSMC);
SAME_CODE(NOSMCDEV);
SAME_CODE(NOSMCRDEV);
SAME_CODE(NOUEID);
SAME_CODE(SYNCERR);
SAME_CODE(PEERDECL);
SAME_CODE(INTERR);

#define NREASONS (sizeof(reasons) / sizeof(reasons[0]))
_Static_assert(NREASONS < USMC_REASON_SLOTS, "reason slots too few");

unsigned int usmc_reason_slot(uint32_t code)
{
	for (unsigned int i = 0; i < NREASONS; i++)
		if (reasons[i].code == code)
			return i;
	return USMC_REASON_SLOTS - 1;
}

const struct usmc_reason_desc *usmc_reason_lookup(uint32_t code)
{
	unsigned int i = usmc_reason_slot(code);

	return i < NREASONS ? &reasons[i] : NULL;
}

const struct usmc_reason_desc *usmc_reason_by_slot(unsigned int slot)
{
	return slot < NREASONS ? &reasons[slot] : NULL;
}

const char *usmc_reason_name(uint32_t reason)
{
	const struct usmc_reason_desc *d = usmc_reason_lookup(reason);

	return d ? d->name : "UNKNOWN";
}

const char *usmc_reason_text(uint32_t reason)
{
	const struct usmc_reason_desc *d = usmc_reason_lookup(reason);

	return d ? d->text : "unknown reason";
}
