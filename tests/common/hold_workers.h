/* SPDX-License-Identifier: MIT */
/*
 * Tests that need a congested handshake pool on a host without RDMA: the
 * listener's workers call listen_test_hook_worker() (weak in libusmc, see
 * listen_core.c) before each handshake step; this one blocks them while the
 * test holds them. A slow client cannot pin a worker any more (the accept
 * thread waits for its CLC bytes), so a slow worker is what congests.
 * Link with usmc_static; include in one file of the program.
 */
#ifndef USMC_TEST_HOLD_WORKERS_H
#define USMC_TEST_HOLD_WORKERS_H

#include <pthread.h>
#include <stdbool.h>

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static bool hold_on; /* guarded by hold_lock */

void listen_test_hook_worker(void);
void listen_test_hook_worker(void)
{
	pthread_mutex_lock(&hold_lock);
	while (hold_on)
		pthread_cond_wait(&hold_cond, &hold_lock);
	pthread_mutex_unlock(&hold_lock);
}

/* Hold (true) or release (false) every handshake worker at its next step. */
static inline void hold_workers(bool on)
{
	pthread_mutex_lock(&hold_lock);
	hold_on = on;
	pthread_cond_broadcast(&hold_cond);
	pthread_mutex_unlock(&hold_lock);
}

#endif
