/* SPDX-License-Identifier: MIT */
/*
 * Between the two halves of a link group's LLC: smcr_llc.c (sending,
 * receiving, answering the peer, keepalive) and smcr_llc_flow.c (the
 * flows we start).
 */
#ifndef USMC_SMCR_LLC_INT_H
#define USMC_SMCR_LLC_INT_H

#include <stdint.h>

#include "llc.h"

struct lgr;

/* Send the encoded request @buf of @len bytes (LLC_MSG_LEN at most), of
 * LLC type @type, on the link LLC messages go on; -EAGAIN if the send
 * queue is full. */
int smcr_llc_send_bytes(struct lgr *lgr, uint8_t type, const uint8_t *buf, int len);

/* The response @m to a flow of ours arrived, @raw its @len bytes (dropped
 * unless a flow waits for its type). */
void smcr_llc_deliver_resp(struct lgr *lgr, const struct llc_msg *m, const uint8_t *raw,
			   uint32_t len);
/* The server's CONFIRM_LINK request @m arrived (a client waits for it). */
void smcr_llc_deliver_confirm_link(struct lgr *lgr, const struct llc_msg *m);

#endif
