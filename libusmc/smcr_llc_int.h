/* SPDX-License-Identifier: MIT */
/*
 * Between the two halves of a link group's LLC: smcr_llc.c (sending,
 * receiving, answering the peer, keepalive) and smcr_llc_flow.c (the
 * flows we start).
 */
#ifndef USMC_SMCR_LLC_INT_H
#define USMC_SMCR_LLC_INT_H

#include "llc.h"

struct lgr;

/* The response @m to a flow of ours arrived (dropped unless a flow waits
 * for its type). */
void smcr_llc_deliver_resp(struct lgr *lgr, const struct llc_msg *m);
/* The server's CONFIRM_LINK request @m arrived (a client waits for it). */
void smcr_llc_deliver_confirm_link(struct lgr *lgr, const struct llc_msg *m);

#endif
