/* SPDX-License-Identifier: MIT */
/*
 * A link without a device, for the engine's unit tests (smcr_eng.c linked
 * alone): its receive and send CQs are queues a test fills (sim_push()),
 * its completion channel a pipe that gets one byte when a completion comes
 * to an armed CQ and disarms it (the verbs rule: an arm reports the next
 * completion, not one already queued), and its poll (smcr_wr_poll()) hands
 * each completion to the test's dispatch. An arm first calls the test's
 * hook, so a test can make a completion arrive just before it takes effect:
 * the moment a holder that did not poll again after arming would sleep
 * through.
 */
#ifndef USMC_TEST_ENG_SIM_H
#define USMC_TEST_ENG_SIM_H

#include <stdbool.h>

#include "eng_stats.h"
#include "smcr_link.h"

enum sim_cq { SIM_RCQ, SIM_SCQ };

struct sim_hooks {
	/* A completion for @who on @cq, polled by the token holder. */
	void (*dispatch)(enum sim_cq cq, int who);
	/* @cq is about to be armed (in the arming thread; may be NULL). */
	void (*arming)(enum sim_cq cq);
};

extern struct smcr_link sim_lnk;   /* the link an engine under test runs */
extern struct eng_stats sim_stats; /* its link group's counters */

void sim_init(const struct sim_hooks *h);
/* A completion for @who arrives on @cq (any thread). */
void sim_push(enum sim_cq cq, int who);
/* Completions queued and not yet polled. */
int sim_queued(void);
/* The completion channel's descriptor (readable: an event is pending). */
int sim_channel_fd(void);

#endif
