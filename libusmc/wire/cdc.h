/* SPDX-License-Identifier: MIT */
/*
 * CDC message codec: the 44-byte connection data control message (type
 * 0xFE) sent with IB SEND after RDMA WRITEs; layout as Linux
 * net/smc/smc_cdc.h struct smc_cdc_msg, receive checks as net/smc/smc_cdc.c
 * smc_cdc_rx_handler(). Pure encode/decode; cursor arithmetic is in
 * cdc_cursor.h.
 */
#ifndef USMC_CDC_H
#define USMC_CDC_H

#include <stddef.h>
#include <stdint.h>

#include "cdc_cursor.h"

#define CDC_MSG_TYPE 0xFE
#define CDC_MSG_LEN  44 /* on the wire, also the value of byte 1 */
/* Linux accepts a completion as short as the end of conn_state_flags. */
#define CDC_MIN_RX_LEN 26

/* producer flags (byte 24) */
#define CDC_PF_WRITE_BLOCKED	   0x80
#define CDC_PF_URG_DATA_PENDING	   0x40
#define CDC_PF_URG_DATA_PRESENT	   0x20
#define CDC_PF_CONS_CURS_UPD_REQ   0x10
#define CDC_PF_FAILOVER_VALIDATION 0x08

/* connection state flags (byte 25) */
#define CDC_CS_PEER_DONE_WRITING 0x80
#define CDC_CS_PEER_CONN_CLOSED	 0x40
#define CDC_CS_PEER_CONN_ABORT	 0x20

struct cdc_msg {
	uint16_t seqno;
	uint32_t token; /* alert token of the receiver's connection */
	struct cdc_cursor prod;
	struct cdc_cursor cons;
	uint8_t prod_flags;	  /* CDC_PF_*, unknown bits kept */
	uint8_t conn_state_flags; /* CDC_CS_*, unknown bits kept */
};

/*
 * Decode a received CDC. byte_len is the completion's byte_len; it must be
 * at least CDC_MIN_RX_LEN, byte 0 must be CDC_MSG_TYPE and byte 1
 * CDC_MSG_LEN. Returns 0 or WIRE_E_SHORT / WIRE_E_TYPE / WIRE_E_LENGTH.
 * Cursor validity against the ring size is the caller's check
 * (cdc_curs_valid()), as only it knows the RMBE sizes.
 */
int cdc_decode(const uint8_t *buf, size_t byte_len, struct cdc_msg *out);

/* Encode into buf; returns CDC_MSG_LEN, or -ENOSPC if cap is too small. */
int cdc_encode(const struct cdc_msg *m, uint8_t *buf, size_t cap);

#endif
