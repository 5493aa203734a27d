/* SPDX-License-Identifier: MIT */
/*
 * The SMC-Rv2 PROPOSAL of a Linux client at 10.0.0.1 with one UEID, 156
 * bytes, as net/smc/smc_clc.c smc_clc_send_proposal() builds it (v2-only:
 * typev1 N, so peer ID, GID and MAC are zero; v2 extension at 80 with the
 * RoCE v2 GID ::ffff:10.0.0.1, one EID, release 1): what a real SMC client
 * sends first. Tests and the storm tool send it from plain sockets to play
 * SMC clients.
 */
#ifndef USMC_TOOLS_LINUX_PROPOSAL_H
#define USMC_TOOLS_LINUX_PROPOSAL_H

#include <stdint.h>

static const uint8_t linux_v2_proposal[156] = {
	0xE2, 0xD4, 0xC3, 0xD9, 0x01, 0x00, 0x9C,
	0x22, [0x32] = 0x00, [0x33] = 0x1C, [0x50] = 0x01, [0x53] = 0x10, [0x62] = 0xFF,
	[0x63] = 0xFF, [0x64] = 0x0A, [0x67] = 0x01, [0x68] = 0xFF, [0x69] = 0x02, [0x6B] = 0x01,
	/* "RXEVM-SMC-TEST" blank padded to 32 */
	[0x78] = 'R', 'X', 'E', 'V', 'M', '-', 'S', 'M', 'C', '-', 'T', 'E', 'S', 'T', ' ', ' ',
	' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ',
	' ', [0x98] = 0xE2, 0xD4, 0xC3, 0xD9};

#endif
