/* SPDX-License-Identifier: MIT */
/*
 * CLC message codec: the handshake messages PROPOSAL, ACCEPT, CONFIRM and
 * DECLINE sent over the TCP connection (layouts as Linux net/smc/smc_clc.h
 * struct smc_clc_msg_proposal, smc_clc_msg_accept_confirm and
 * smc_clc_msg_decline, v2 extensions included). Pure encode/decode into host-order structs, no I/O.
 *
 * Receiving: peek CLC_HDR_LEN bytes, clc_hdr_decode() them to learn type and
 * length (bounded by CLC_MAX_LEN), read exactly hdr.length bytes, then call
 * the decoder for the type. Decoders validate as Linux does (plus the
 * stricter rules listed in docs/wire.md), return 0 or a WIRE_E_* code and
 * never read past len. Encoders return the bytes written, -ENOSPC if cap is
 * too small (nothing is written then) or -EINVAL for a field that does not
 * fit its wire width; they write canonical Linux layouts with reserved bytes
 * zero.
 */
#ifndef USMC_CLC_H
#define USMC_CLC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLC_HDR_LEN 8
#define CLC_TRL_LEN 4

/*
 * The eyecatchers that open and close every CLC message: "SMCR" and "SMCD"
 * in EBCDIC, as big-endian words. The SMC TCP option carries the same SMCR
 * word (KC_OPT_MAGIC in kcompat_abi.h, kept apart for the BPF build).
 */
#define CLC_EYECATCHER_SMCR 0xE2D4C3D9u
#define CLC_EYECATCHER_SMCD 0xE2D4C3C4u

/* message types (byte 4) */
#define CLC_PROPOSAL 1
#define CLC_ACCEPT   2
#define CLC_CONFIRM  3
#define CLC_DECLINE  4

/* versions (byte 7 bits 7-4) */
#define CLC_V1 1
#define CLC_V2 2

/* typev1 / typev2 values */
#define CLC_TYPE_R	      0 /* SMC-R */
#define CLC_TYPE_D	      1 /* SMC-D */
#define CLC_TYPE_N	      2 /* none */
#define CLC_TYPE_B	      3 /* both */

#define CLC_PEER_ID_LEN	      8
#define CLC_GID_LEN	      16
#define CLC_MAC_LEN	      6
#define CLC_EID_LEN	      32
#define CLC_HOSTNAME_LEN      32

#define CLC_MAX_IPV6_PREFIXES 8
#define CLC_MAX_UEIDS	      8
#define CLC_MAX_ISM_GIDS      8 /* SMC-Dv2 GID/CHID entries in a proposal */
#define CLC_MAX_GIDS	      8 /* libusmc limit for the CONFIRM GID list */

/* Message lengths (whole message, header and trailer included). */
#define CLC_PROPOSAL_V1_MIN_LEN	  52
#define CLC_PROPOSAL_V2_MIN_LEN	  84
#define CLC_PROPOSAL_MAX_LEN	  652 /* Linux's proposal buffer */
#define CLC_ACCEPT_V1_LEN	  68
#define CLC_ACCEPT_V2_LEN	  108 /* without first contact */
#define CLC_ACCEPT_V2_FC_LEN	  160
#define CLC_CONFIRM_V2_FC_MIN_LEN 164 /* + 16 per GID */
#define CLC_ACCEPT_MAX_LEN	  (CLC_CONFIRM_V2_FC_MIN_LEN + CLC_MAX_GIDS * CLC_GID_LEN)
#define CLC_DECLINE_V1_LEN	  28
#define CLC_DECLINE_V2_LEN	  44
#define CLC_MAX_LEN		  CLC_PROPOSAL_MAX_LEN

/* byte 7 bit 3: first contact (ACCEPT/CONFIRM) or out of sync (DECLINE) */
#define CLC_FLAG_MASK 0x08

/* OS types (first-contact extension, DECLINE byte 20) */
#define CLC_OS_ZOS   1
#define CLC_OS_LINUX 2
#define CLC_OS_AIX   3

/* SMC releases (v2 extension, first-contact extension) */
#define CLC_RELEASE_0 0
#define CLC_RELEASE_1 1

struct clc_hdr {
	uint8_t type; /* CLC_PROPOSAL .. CLC_DECLINE */
	uint16_t length;
	uint8_t version; /* 1..15 */
	uint8_t typev2;	 /* bits 3-2 of byte 7 */
	uint8_t typev1;	 /* bits 1-0 of byte 7 */
	bool smcd;	 /* eyecatcher is "SMCD" (else "SMCR") */
};

/*
 * Decode the 8-byte header. Checks eyecatcher, type, version >= 1 and that
 * length lies between the smallest valid message of the type and the largest
 * libusmc accepts (WIRE_E_LENGTH below, WIRE_E_TOO_LONG above), so the caller
 * can size its read by hdr.length.
 */
int clc_hdr_decode(const uint8_t *buf, size_t len, struct clc_hdr *hdr);

/*
 * For peeking at a stream that may or may not be CLC: true while the first
 * @len bytes (any number, 0 included) agree with the start of an SMC-R
 * header of @type, i.e. the SMCR eyecatcher followed by the type byte.
 */
bool clc_hdr_starts(const uint8_t *buf, size_t len, uint8_t type);

/* The version nibble of a header (@buf holds at least CLC_HDR_LEN bytes). */
uint8_t clc_hdr_version(const uint8_t *buf);

struct clc_ipv6_prefix {
	uint8_t prefix[16];
	uint8_t prefix_len;
};

struct clc_ism_gid_chid {
	uint64_t gid;
	uint16_t chid;
};

struct clc_proposal {
	uint8_t version;
	uint8_t typev1, typev2;
	bool smcd; /* "SMCD" eyecatcher */
	uint8_t peer_id[CLC_PEER_ID_LEN];
	uint8_t gid[CLC_GID_LEN];
	uint8_t mac[CLC_MAC_LEN];

	/*
	 * SMC-D info area (offsets 40-79). Always present in v2; in v1 only
	 * with iparea_offset 40 (a pre-v2 Linux offering SMC-D).
	 */
	bool has_smcd_info;
	uint64_t ism_gid;
	uint16_t ism_chid;
	uint8_t vendor_oui[3];
	uint8_t vendor_opts[5];

	/* IP prefix area: v1, or v2 with typev1 != N. */
	bool has_prefix;
	uint8_t ipv4_subnet[4]; /* network order, as on the wire */
	uint8_t ipv4_prefix_len;
	uint8_t ipv6_count;
	struct clc_ipv6_prefix ipv6[CLC_MAX_IPV6_PREFIXES];

	/* v2 extension: version >= 2 and typev2 != N. */
	bool has_v2_ext;
	uint8_t eid_count;
	uint8_t ism_gid_count;
	uint8_t release; /* 4 bits */
	bool seid_present;
	uint8_t roce_gid[CLC_GID_LEN];
	uint8_t max_conns, max_links;
	uint16_t feature_mask;
	uint8_t eid[CLC_MAX_UEIDS][CLC_EID_LEN];

	/* SMC-Dv2 extension: typev2 D/B and smcd_v2_ext_offset != 0. */
	bool has_smcd_v2_ext;
	uint8_t seid[CLC_EID_LEN];
	struct clc_ism_gid_chid ism_gids[CLC_MAX_ISM_GIDS];

	/*
	 * Offsets as received (informational; the encoder ignores them and
	 * writes Linux's canonical layout).
	 */
	uint16_t iparea_offset, v2_ext_offset, smcd_v2_ext_offset;
};

int clc_proposal_decode(const uint8_t *buf, size_t len, struct clc_proposal *out);
int clc_proposal_encode(const struct clc_proposal *m, uint8_t *buf, size_t cap);
/* Length clc_proposal_encode() will produce for m. */
size_t clc_proposal_len(const struct clc_proposal *m);

/* first-contact extension (v2 ACCEPT/CONFIRM, offset 104) */
struct clc_fce {
	bool v2_direct;
	uint8_t os_type; /* 4 bits */
	uint8_t release; /* 4 bits */
	uint8_t hostname[CLC_HOSTNAME_LEN];
	uint8_t max_conns, max_links;
	uint16_t feature_mask;
	uint8_t vendor_opts[4];
};

/* SMC-R ACCEPT or CONFIRM, v1 (68 bytes) or v2 (108 / 160 / 164 + 16n). */
struct clc_accept_confirm {
	uint8_t type; /* CLC_ACCEPT or CLC_CONFIRM */
	uint8_t version;
	bool smcd; /* "SMCD" eyecatcher (never sent by libusmc) */
	bool first_contact;
	uint8_t peer_id[CLC_PEER_ID_LEN];
	uint8_t gid[CLC_GID_LEN];
	uint8_t mac[CLC_MAC_LEN];
	uint32_t qpn; /* 24 bits */
	uint32_t rmb_rkey;
	uint8_t rmbe_idx;
	uint32_t rmbe_alert_token;
	uint8_t rmbe_size; /* compressed size class, 4 bits */
	uint8_t qp_mtu;	   /* IB MTU enum, 4 bits */
	uint64_t rmb_dma_addr;
	uint32_t psn; /* 24 bits */
	/* v2 */
	uint8_t eid[CLC_EID_LEN];
	/* v2 with first contact */
	struct clc_fce fce;
	/* v2 CONFIRM with first contact */
	uint8_t gid_count;
	uint8_t gids[CLC_MAX_GIDS][CLC_GID_LEN];
};

int clc_accept_confirm_decode(const uint8_t *buf, size_t len, struct clc_accept_confirm *out);
int clc_accept_confirm_encode(const struct clc_accept_confirm *m, uint8_t *buf, size_t cap);
size_t clc_accept_confirm_len(const struct clc_accept_confirm *m);

#define CLC_DECLINE_DIAG_EXT 4

struct clc_decline {
	uint8_t version;
	bool smcd; /* "SMCD" eyecatcher */
	bool out_of_sync;
	uint8_t typev1; /* not checked on receipt; libusmc sends CLC_TYPE_R */
	uint8_t peer_id[CLC_PEER_ID_LEN];
	uint32_t diagnosis;			 /* SMC_CLC_DECL_* (reason.h) */
	uint8_t os_type;			 /* 4 bits */
	uint32_t diag_ext[CLC_DECLINE_DIAG_EXT]; /* v2 only */
};

int clc_decline_decode(const uint8_t *buf, size_t len, struct clc_decline *out);
int clc_decline_encode(const struct clc_decline *m, uint8_t *buf, size_t cap);
size_t clc_decline_len(const struct clc_decline *m);

/*
 * The DECLINE libusmc sends: v2 if @version >= 2 (os_type Linux), else v1;
 * SMC-R; @peer_id may be NULL (all zero, as before the peer is known).
 * Returns clc_decline_encode()'s result.
 */
int clc_decline_build(uint8_t *buf, size_t cap, uint8_t version, const uint8_t *peer_id,
		      uint32_t diagnosis, bool out_of_sync);

#endif
