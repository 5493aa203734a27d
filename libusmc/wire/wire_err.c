// SPDX-License-Identifier: MIT
#include <string.h>

#include "wire_err.h"

/* Indexed by WIRE_E_BASE - err. */
static const char *const wire_err_text[] = {
	"WIRE_E_SHORT: message shorter than required",
	"WIRE_E_EYECATCHER: bad CLC header eyecatcher",
	"WIRE_E_TRAILER: bad CLC trailer eyecatcher",
	"WIRE_E_LENGTH: length violates the per-type rule",
	"WIRE_E_VERSION: unsupported version",
	"WIRE_E_TYPE: unknown or unexpected message type",
	"WIRE_E_IPAREA_OFFSET: CLC iparea_offset above 40",
	"WIRE_E_V2EXT_OFFSET: CLC v2_ext_offset outside 1..172",
	"WIRE_E_IPV6_COUNT: more than 8 IPv6 prefixes",
	"WIRE_E_EID_COUNT: more than 8 user EIDs",
	"WIRE_E_ISM_GID_COUNT: more than 8 SMC-Dv2 GID entries",
	"WIRE_E_TYPEV1: typev1 not allowed for this message",
	"WIRE_E_SMCD: SMC-D accept/confirm not supported",
	"WIRE_E_V2EXT_BOUNDS: CLC v2 extension outside the message",
	"WIRE_E_SMCDV2_BOUNDS: CLC SMC-Dv2 extension outside the message",
	"WIRE_E_TOO_LONG: CLC message longer than supported",
	"WIRE_E_FCE_LENGTH: first contact without room for its extension",
	"WIRE_E_GID_COUNT: GID list longer than 8",
	"WIRE_E_GIDLIST_LENGTH: GID list does not fit the message",
	"WIRE_E_RKEY_COUNT: too many rkeys for the message type",
	"WIRE_E_RKEY_LENGTH: rkey list does not fit the message",
};

_Static_assert(sizeof(wire_err_text) / sizeof(wire_err_text[0]) == WIRE_E_BASE - WIRE_E_LAST + 1,
	       "one text per WIRE_E_* code");

const char *wire_strerror(int err)
{
	if (wire_is_err(err))
		return wire_err_text[WIRE_E_BASE - err];
	if (err < 0)
		return strerror(-err);
	return "success";
}
