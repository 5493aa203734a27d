/* SPDX-License-Identifier: MIT */
/*
 * Byte vectors of the wire formats, laid out as Linux net/smc builds them
 * (smc_clc_send_proposal(), smc_clc_send_confirm_accept() and
 * smc_clc_send_decline() in smc_clc.c; the smc_llc_send_*() of smc_llc.c;
 * smc_cdc_msg_send() in smc_cdc.c), x86 byte order where Linux writes host
 * order. Shared by the unit tests and the fuzz corpus generator. Hex strings:
 * whitespace is ignored. Variable fields (peer ID, GIDs, MAC, keys) use
 * fixed sample values.
 */
#ifndef USMC_TEST_WIRE_VECTORS_H
#define USMC_TEST_WIRE_VECTORS_H

#include <stddef.h>
#include <stdint.h>

#define Z4	"00 00 00 00 "
#define Z8	Z4 Z4
#define Z16	Z8 Z8
#define S8	"20 20 20 20 20 20 20 20 "
#define EYE	"E2 D4 C3 D9 "

#define V_PEER	"5A 5A 02 00 00 00 00 01 "
#define V_GID1	"FE 80 00 00 00 00 00 00 02 00 00 FF FE 00 00 01 "
#define V_MAC	"02 00 00 00 00 01 "
#define V_GID2S "00 00 00 00 00 00 00 00 00 00 FF FF 0A 00 00 02 " /* server */
#define V_GID2C "00 00 00 00 00 00 00 00 00 00 FF FF 0A 00 00 01 " /* client */
/* "RXEVM-SMC-TEST", blank padded to 32 */
#define V_EID "52 58 45 56 4D 2D 53 4D 43 2D 54 45 53 54 20 20 " S8 S8
/* "vm2", blank padded to 32 */
#define V_HOST "76 6D 32 20 20 20 20 20 " S8 S8 S8

/* ACCEPT/CONFIRM offsets 8-63: peer, GID, MAC, QPN 0x11, rkey 0x1234,
 * idx 1, token 5, 64 KiB / MTU 1024, addr 0x7f0000100000, PSN 0x123456 */
#define V_AC_BODY(gid)                                                \
	V_PEER gid V_MAC "00 00 11 00 00 12 34 01 00 00 00 05 23 00 " \
			 "00 00 7F 00 00 10 00 00 00 12 34 56 "
/* first-contact extension: direct, Linux rel 1, "vm2", 255 conns, 1 link */
#define V_FCE "80 21 00 00 " V_HOST "FF 01 00 01 " Z4 Z8

struct wire_vector {
	const char *name;
	const char *hex;
};

static const struct wire_vector clc_vectors[] = {
	/* v1 PROPOSAL, 10.1.2.3/24 */
	{"prop_v1_ipv4", EYE "01 00 34 10 " V_PEER V_GID1 V_MAC "00 00 "
			     "0A 01 02 00 18 00 00 00 " EYE},
	/* v2-only, one UEID, Linux defaults (156 bytes) */
	{"prop_v2_linux", EYE "01 00 9C 22 " Z8 Z16 "00 00 00 00 00 00 00 00 " /* MAC, ipa */
	 Z8 "00 00 00 1C " Z4 Z8 Z8 Z8					       /* SMC-D */
			      "01 00 00 10 00 00 00 00 " V_GID2C "FF 02 00 01 " Z4 Z8 V_EID EYE},
	/* Linux v1-only offer with a v2 header: byte 7 0x28, iparea 40 */
	{"prop_v2_v1only", EYE "01 00 5C 28 " V_PEER V_GID1 V_MAC "00 28 " Z8 Z8 Z8 Z8 Z8
			       "0A 01 02 00 18 00 00 00 " EYE},
	/* v1 + v2, one IPv6 prefix 2001:db8::/64 */
	{"prop_v2_both_ipv6", EYE "01 00 95 20 " V_PEER V_GID1 V_MAC "00 28 " Z8
				  "00 00 00 35 " Z4 Z8 Z8 Z8 "00 00 00 00 00 00 00 01 "
				  "20 01 0D B8 00 00 00 00 00 00 00 00 00 00 00 00 40 "
				  "00 00 00 10 00 00 00 00 " V_GID2C "FF 01 00 01 " Z4 Z8 EYE},
	/* v2 with SMC-Dv2 (typev2 B), one UEID, two ISM GIDs (loopback-ism) */
	{"prop_v2_smcd2", EYE "01 00 E0 2E " Z8 Z16 "00 00 00 00 00 00 00 00 " Z8
			      "00 00 00 1C " Z4 Z8 Z8 Z8 "01 02 00 10 00 00 00 40 " V_GID2C
			      "FF 02 00 01 " Z4 Z8 V_EID Z16 Z16 Z16 /* SEID, reserved */
			      "00 00 00 00 00 00 00 07 FF FF 00 00 00 00 00 00 00 08 FF FF " EYE},
	/* v1 ACCEPT, first contact */
	{"acc_v1_fc", EYE "02 00 44 18 " V_AC_BODY(V_GID1) EYE},
	/* v1 CONFIRM, no first contact */
	{"conf_v1", EYE "03 00 44 10 " V_AC_BODY(V_GID1) EYE},
	/* v2 ACCEPT first contact: struct smc_clc_first_contact_ext_v2x (160 bytes) */
	{"acc_v2_fc", EYE "02 00 A0 28 " V_AC_BODY(V_GID2S) V_EID Z8 V_FCE EYE},
	/* v2 CONFIRM first contact, one GID (180 bytes) */
	{"conf_v2_fc",
	 EYE "03 00 B4 28 " V_AC_BODY(V_GID2C) V_EID Z8 V_FCE "01 00 00 00 " V_GID2C EYE},
	/* v2 ACCEPT / CONFIRM on a reused LGR (108 bytes) */
	{"acc_v2", EYE "02 00 6C 20 " V_AC_BODY(V_GID2S) V_EID Z8 EYE},
	{"conf_v2", EYE "03 00 6C 20 " V_AC_BODY(V_GID2C) V_EID Z8 EYE},
	/* v1 DECLINE prefix mismatch, and out of sync */
	{"decl_v1", EYE "04 00 1C 10 " V_PEER "03 07 00 00 00 00 00 00 " EYE},
	{"decl_v1_sync", EYE "04 00 1C 18 " V_PEER "04 00 00 00 00 00 00 00 " EYE},
	/* v2 DECLINE no SMC device */
	{"decl_v2", EYE "04 00 2C 20 " V_PEER "03 03 00 00 20 00 00 00 " Z16 EYE},
};

/* LLC: v1 (44 bytes) and v2 (length u16 in host order: smc_llc_init_msg_hdr()) */
#define V_LLC_MAC "02 00 00 00 00 02 "
static const struct wire_vector llc_vectors[] = {
	/* CONFIRM_LINK request: QPN 0x11, link 1, UID, max links 2 */
	{"confirm_link_v1", "01 2C 00 03 " V_LLC_MAC V_GID1 "00 00 11 01 00 00 01 01 02 00 " Z8},
	{"confirm_link_v1_resp",
	 "01 2C 00 83 " V_LLC_MAC V_GID1 "00 00 11 01 00 00 01 01 02 00 " Z8},
	{"confirm_link_v2", "21 2C 00 03 " V_LLC_MAC V_GID2S "00 00 11 01 00 00 01 01 01 FF " Z8},
	/* ADD_LINK v1 request: QPN 0x22, link 2, MTU 3, PSN 0xABCDEF */
	{"add_link_v1", "02 2C 00 00 " V_LLC_MAC "00 00 " V_GID1 "00 00 22 02 03 AB CD EF " Z8},
	/* ADD_LINK reject */
	{"add_link_v1_rej", "02 2C 01 C0 " V_LLC_MAC "00 00 " V_GID1 "00 00 22 02 03 AB CD EF " Z8},
	/* ADD_LINK v2 request, one connection (88 bytes): smc_llc_msg_add_link_v2_ext */
	{"add_link_v2",
	 "22 58 00 00 " V_LLC_MAC "00 00 " V_GID2S "00 00 22 02 03 AB CD EF " Z8 "80 00 " V_GID2S Z8
	 "01 00 00 00 12 34 00 00 56 78 00 00 7F 00 00 20 00 00 "},
	{"add_link_v2_rej",
	 "22 2C 00 C0 " V_LLC_MAC "00 00 " V_GID2S "00 00 22 02 03 AB CD EF " Z8},
	/* ADD_LINK_CONT: link 2, 1 rkey */
	{"add_link_cont",
	 "03 2C 00 00 02 01 00 00 00 00 12 34 00 00 56 78 00 00 7F 00 00 20 00 00 " Z16 Z4},
	/* DELETE_LINK v1 single link 2, reason lost path */
	{"delete_link_v1", "04 2C 00 00 02 00 01 00 00 " Z16 Z16 "00 00 00 "},
	/* idle teardown: ALL|ORDERLY, program-initiated */
	{"delete_link_v2_all", "24 2C 00 60 00 00 03 00 00 " Z16 Z16 "00 00 00 "},
	/* REQ_ADD_LINK v2, two GIDs (60 bytes) */
	{"req_add_link_v2", "25 3C 00 00 " Z16 Z4 "02 00 00 00 " V_GID2C
			    "00 00 00 00 00 00 00 00 00 00 FF FF 0A 00 01 01 "},
	{"req_add_link_v2_resp", "25 2C 00 80 " Z16 Z16 Z8},
	/* CONFIRM_RKEY: no additional entries, rkey 0x1234, addr */
	{"confirm_rkey_v1",
	 "06 2C 00 00 00 00 00 12 34 00 00 7F 00 00 10 00 00 " Z16 Z8 "00 00 00 "},
	{"confirm_rkey_v1_two",
	 "06 2C 00 00 02 00 00 12 34 00 00 7F 00 00 10 00 00 "
	 "02 00 00 56 78 00 00 7F 00 00 10 00 00 03 00 00 9A BC 00 00 7F 00 00 10 00 00 00 "},
	{"confirm_rkey_v2_resp",
	 "26 2C 00 80 00 00 00 12 34 00 00 7F 00 00 10 00 00 " Z16 Z8 "00 00 00 "},
	/* CONFIRM_RKEY_CONT: 1 entry */
	{"confirm_rkey_cont",
	 "08 2C 00 00 01 02 00 00 56 78 00 00 7F 00 00 10 00 00 " Z16 Z8 "00 00 "},
	/* TEST_LINK response with user data */
	{"test_link_v1_resp",
	 "07 2C 00 80 00 01 02 03 04 05 06 07 08 09 0A 0B 0C 0D 0E 0F " Z16 Z8},
	/* Linux TEST_LINK v2 request */
	{"test_link_v2", "27 2C 00 00 " Z16 Z16 Z8},
	/* DELETE_RKEY v1: two rkeys; response with rkey 1 unknown (mask bit 6) */
	{"delete_rkey_v1", "09 2C 00 00 02 00 00 00 00 00 12 34 00 00 56 78 " Z16 Z8 Z4},
	{"delete_rkey_v1_resp", "09 2C 00 A0 02 40 00 00 00 00 12 34 00 00 56 78 " Z16 Z8 Z4},
	/* Linux DELETE_RKEY v2 (smc_llc_msg_delete_rkey_v2), one rkey; response: 1 not found */
	{"delete_rkey_v2", "29 2C 00 00 01 00 00 00 00 00 12 34 " Z16 Z16},
	{"delete_rkey_v2_resp", "29 2C 00 A0 01 01 00 00 " Z16 Z16 Z4},
};

static const struct wire_vector cdc_vectors[] = {
	/* 4096 bytes written, nothing consumed */
	{"cdc_6a", "FE 2C 00 01 00 00 12 34 00 00 00 00 00 00 10 00 " Z8 "00 00 " Z16 "00 00 "},
	{"cdc_close", "FE 2C 12 34 00 00 00 05 00 00 00 03 00 00 20 00 00 00 00 02 00 00 01 00 "
		      "80 40 " Z16 "00 00 "},
};

/* Parse hex into out (cap bytes); returns the byte count, -1 if too long. */
static inline int wire_hex(const char *hex, uint8_t *out, size_t cap)
{
	size_t n = 0;
	int hi = -1;

	for (; *hex; hex++) {
		int v;

		if (*hex >= '0' && *hex <= '9')
			v = *hex - '0';
		else if (*hex >= 'A' && *hex <= 'F')
			v = *hex - 'A' + 10;
		else if (*hex >= 'a' && *hex <= 'f')
			v = *hex - 'a' + 10;
		else
			continue;
		if (hi < 0) {
			hi = v;
			continue;
		}
		if (n == cap)
			return -1;
		out[n++] = (uint8_t)(hi << 4 | v);
		hi = -1;
	}
	return (int)n;
}

#endif
