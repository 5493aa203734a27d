/* SPDX-License-Identifier: MIT */
/*
 * Error codes of the wire codecs (clc.c, llc.c, cdc.c).
 *
 * Every distinct way a received message can be malformed has its own code,
 * so tests and logs can tell exactly which rule a peer broke. The codes live
 * in -1000..-1099, far from the -errno values (Linux errnos are below 200)
 * that the same call paths may also return; encoders use plain -ENOSPC /
 * -EINVAL for caller errors.
 */
#ifndef USMC_WIRE_ERR_H
#define USMC_WIRE_ERR_H

enum wire_err {
	WIRE_E_BASE = -1000,
	WIRE_E_SHORT = WIRE_E_BASE,    /* buffer shorter than the message needs */
	WIRE_E_EYECATCHER = -1001,     /* CLC header eyecatcher not SMCR/SMCD */
	WIRE_E_TRAILER = -1002,	       /* CLC trailer eyecatcher not SMCR/SMCD */
	WIRE_E_LENGTH = -1003,	       /* length field breaks the Linux rule */
	WIRE_E_VERSION = -1004,	       /* version nibble not accepted */
	WIRE_E_TYPE = -1005,	       /* unknown or unexpected message type */
	WIRE_E_IPAREA_OFFSET = -1006,  /* CLC proposal iparea_offset > 40 */
	WIRE_E_V2EXT_OFFSET = -1007,   /* CLC proposal v2_ext_offset not 1..172 */
	WIRE_E_IPV6_COUNT = -1008,     /* more than 8 IPv6 prefixes */
	WIRE_E_EID_COUNT = -1009,      /* more than 8 user EIDs */
	WIRE_E_ISM_GID_COUNT = -1010,  /* more than 8 SMC-Dv2 GID/CHID entries */
	WIRE_E_TYPEV1 = -1011,	       /* typev1 value Linux rejects for the type */
	WIRE_E_SMCD = -1012,	       /* SMC-D accept/confirm: not an SMC-R peer */
	WIRE_E_V2EXT_BOUNDS = -1013,   /* v2 extension lies outside the message */
	WIRE_E_SMCDV2_BOUNDS = -1014,  /* SMC-Dv2 extension outside the message */
	WIRE_E_TOO_LONG = -1015,       /* CLC length above what libusmc accepts */
	WIRE_E_FCE_LENGTH = -1016,     /* first contact but no room for the FCE */
	WIRE_E_GID_COUNT = -1017,      /* GID list longer than 8 entries */
	WIRE_E_GIDLIST_LENGTH = -1018, /* GID list does not fit the message */
	WIRE_E_RKEY_COUNT = -1019,     /* LLC rkey count above the type's limit */
	WIRE_E_RKEY_LENGTH = -1020,    /* LLC rkey list does not fit the message */
	WIRE_E_LAST = WIRE_E_RKEY_LENGTH,
};

/* Name and text of a WIRE_E_* code; for other negative values strerror(-e). */
const char *wire_strerror(int err);

/* True if err is one of the WIRE_E_* codes. */
static inline int wire_is_err(int err)
{
	return err <= WIRE_E_BASE && err >= WIRE_E_LAST;
}

#endif
