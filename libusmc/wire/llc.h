/* SPDX-License-Identifier: MIT */
/*
 * LLC message codec: link control messages sent with IB SEND on a link's QP
 * (layouts as the struct smc_llc_msg_* of Linux net/smc/smc_llc.c). v1
 * messages are 44 bytes; v2 (version nibble 2, first bytes 0x21-0x29) carry
 * a u16 length that x86 Linux writes little-endian (smc_llc_init_msg_hdr()),
 * and ADD_LINK / REQ_ADD_LINK / large DELETE_RKEY may be longer (up to the
 * 8 KiB v2 buffer).
 *
 * llc_decode() takes the completion's real byte_len and never reads past
 * it; a v2 length field only ever shortens what is parsed. Encoders return
 * the bytes written, -ENOSPC if cap is too small (nothing written), or
 * -EINVAL for a field that does not fit its wire width.
 */
#ifndef USMC_LLC_H
#define USMC_LLC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LLC_MSG_LEN    44   /* every v1 message, most v2 ones */
#define LLC_V2_BUF_LEN 8192 /* Linux's v2 LLC buffer (SMC_WR_BUF_V2_SIZE) */

/* version nibble (byte 0 bits 7-4) */
#define LLC_V1 0
#define LLC_V2 2

/* type (byte 0 bits 3-0) */
#define LLC_CONFIRM_LINK      0x1
#define LLC_ADD_LINK	      0x2
#define LLC_ADD_LINK_CONT     0x3 /* v1 only */
#define LLC_DELETE_LINK	      0x4
#define LLC_REQ_ADD_LINK      0x5
#define LLC_CONFIRM_RKEY      0x6
#define LLC_TEST_LINK	      0x7
#define LLC_CONFIRM_RKEY_CONT 0x8 /* v1 only */
#define LLC_DELETE_RKEY	      0x9

/* flags (byte 3) */
#define LLC_FLAG_RESP		  0x80
#define LLC_FLAG_NO_RMBE_EYEC	  0x03 /* CONFIRM_LINK: mandatory with Linux */
#define LLC_FLAG_ADD_LNK_REJ	  0x40
#define LLC_FLAG_DEL_LINK_ALL	  0x40
#define LLC_FLAG_DEL_LINK_ORDERLY 0x20
#define LLC_FLAG_RKEY_NEG	  0x20 /* CONFIRM_RKEY / DELETE_RKEY response */
#define LLC_FLAG_RKEY_RETRY	  0x10

/* ADD_LINK reject reason (v1 byte 2 bits 3-0) */
#define LLC_ADD_LNK_REJ_NO_ALT_PATH 1

/* DELETE_LINK reasons */
#define LLC_DEL_LOST_PATH	0x00010000u
#define LLC_DEL_OP_INIT_TERM	0x00020000u
#define LLC_DEL_PROG_INIT_TERM	0x00030000u
#define LLC_DEL_PROT_VIOL	0x00040000u
#define LLC_DEL_NO_ASYM_NEEDED	0x00050000u
#define LLC_DEL_NOLNK		0x00100000u
#define LLC_DEL_NOLGR		0x00200000u

#define LLC_GID_LEN		16
#define LLC_MAC_LEN		6
#define LLC_TEST_DATA_LEN	16
#define LLC_MAX_GIDS		8   /* REQ_ADD_LINK GID list (libusmc limit) */
#define LLC_V2_MAX_RKEYS	255 /* ADD_LINK v2 rkey entries */
#define LLC_ADD_LINK_CONT_RKEYS 2   /* entries per ADD_LINK_CONT */
#define LLC_CONFIRM_RKEY_EXTRA	2   /* additional entries in CONFIRM_RKEY */
#define LLC_RKEY_CONT_RKEYS	3   /* entries per CONFIRM_RKEY_CONT */
#define LLC_V1_DEL_RKEY_MAX	8   /* v1 DELETE_RKEY: one mask bit each */
#define LLC_V2_DEL_RKEY_MAX	255

struct llc_confirm_link {
	uint8_t mac[LLC_MAC_LEN];
	uint8_t gid[LLC_GID_LEN];
	uint32_t qpn; /* 24 bits */
	uint8_t link_num;
	uint32_t link_uid;
	uint8_t max_links, max_conns;
};

/* rkey triple of ADD_LINK v2 and ADD_LINK_CONT */
struct llc_add_link_rkey {
	uint32_t rkey;	   /* RMB rkey on the existing link */
	uint32_t rkey_new; /* RMB rkey on the new link */
	uint64_t vaddr_new;
};

struct llc_add_link {
	uint8_t mac[LLC_MAC_LEN];
	uint8_t gid[LLC_GID_LEN];
	uint32_t qpn; /* 24 bits */
	uint8_t link_num;
	uint8_t qp_mtu; /* 4 bits */
	uint32_t psn;	/* 24 bits */
	/* v2 extension (offset 44): present iff the message is longer than 44 */
	bool has_ext;
	bool v2_direct;
	uint8_t client_target_gid[LLC_GID_LEN];
	uint16_t num_rkeys;
	struct llc_add_link_rkey rkeys[LLC_V2_MAX_RKEYS];
};

struct llc_add_link_cont {
	uint8_t link_num;
	uint8_t num_rkeys; /* rkeys still to transfer; up to 2 are in here */
	struct llc_add_link_rkey rkeys[LLC_ADD_LINK_CONT_RKEYS];
};

struct llc_delete_link {
	uint8_t link_num;
	uint32_t reason;
};

struct llc_req_add_link {
	uint8_t gid_count;
	uint8_t gids[LLC_MAX_GIDS][LLC_GID_LEN];
};

struct llc_rtoken {
	uint8_t link_id;
	uint32_t rkey;
	uint64_t vaddr;
};

struct llc_confirm_rkey {
	uint8_t num_extra; /* additional entries, 0..2 */
	uint32_t rkey;	   /* RMB rkey on the link the message travels on */
	uint64_t vaddr;
	struct llc_rtoken extra[LLC_CONFIRM_RKEY_EXTRA];
};

struct llc_confirm_rkey_cont {
	uint8_t num_rkeys; /* entries still to transfer; up to 3 are in here */
	struct llc_rtoken rt[LLC_RKEY_CONT_RKEYS];
};

struct llc_test_link {
	uint8_t user_data[LLC_TEST_DATA_LEN];
};

struct llc_delete_rkey {
	uint8_t num_rkeys;
	/* response: v1 bit (7 - i) = rkey i unknown; v2 count of unknown rkeys */
	uint8_t err;
	/* v1: echoed in the response; v2 response: not carried (zero) */
	uint32_t rkeys[LLC_V2_DEL_RKEY_MAX];
};

struct llc_msg {
	uint8_t version; /* LLC_V1 or LLC_V2 */
	uint8_t type;	 /* LLC_CONFIRM_LINK .. LLC_DELETE_RKEY */
	uint8_t flags;
	uint8_t rej_reason; /* v1 ADD_LINK only (byte 2 bits 3-0) */
	union {
		struct llc_confirm_link confirm_link;
		struct llc_add_link add_link;
		struct llc_add_link_cont add_link_cont;
		struct llc_delete_link delete_link;
		struct llc_req_add_link req_add_link;
		struct llc_confirm_rkey confirm_rkey;
		struct llc_confirm_rkey_cont confirm_rkey_cont;
		struct llc_test_link test_link;
		struct llc_delete_rkey delete_rkey;
	};
};

/*
 * Decode a received LLC message; byte_len is wc.byte_len. On a Linux v2
 * link group bytes 44.. of a long message sit in the shared v2 buffer: the
 * caller passes one contiguous copy. Returns 0 or a WIRE_E_* code (then
 * *out is cleared).
 */
int llc_decode(const uint8_t *buf, size_t byte_len, struct llc_msg *out);

/* Length llc_encode() will write for m (0 if m is not encodable). */
size_t llc_msg_len(const struct llc_msg *m);
int llc_encode(const struct llc_msg *m, uint8_t *buf, size_t cap);

/* ------------------------------------------------- response builders */

/*
 * Turn a decoded request into its plain response: RESP flag set, payload
 * echoed (TEST_LINK user data, CONFIRM_LINK, CONFIRM_RKEY, DELETE_LINK).
 */
void llc_make_response(struct llc_msg *m);

/*
 * Turn a received ADD_LINK request into its reject: flags RESP|REJ, v1
 * reason "no alternate path" in byte 2, v2 as x86 Linux (44 bytes, the
 * reason nibble lost to the length, no extension).
 */
void llc_add_link_reject(struct llc_msg *m);

/* CONFIRM_RKEY response: RESP, and NEG|RETRY if the rkey was refused. */
void llc_confirm_rkey_response(struct llc_msg *m, bool ok);

/*
 * DELETE_RKEY response. unknown[i] says whether rkey i was not found; the
 * v1 response carries a bit mask and echoes the rkeys, the v2 response the
 * count of unknown rkeys and no rkeys (as Linux).
 */
void llc_delete_rkey_response(struct llc_msg *m, const bool *unknown);

#endif
