/* SPDX-License-Identifier: MIT */
/*
 * How many handshakes each source address holds in a listener
 * (docs/listener.md "One address"), so that one address cannot take the
 * backlog from everyone else (listen_src_refuse() decides). Counted from
 * the moment a client shows it is an SMC client until its connection goes
 * to the accept queue or is dropped; the accept thread counts in, any of
 * the listener's threads counts out.
 */
#ifndef USMC_LISTEN_SOURCES_H
#define USMC_LISTEN_SOURCES_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define LISTEN_SRC_BUCKETS 256

struct listen_src;

struct listen_sources {
	pthread_mutex_t lock; /* a leaf: guards the buckets and their entries */
	uint64_t seed;	      /* fixed: keys the hash, so a peer cannot aim at a bucket */
	struct listen_src *bucket[LISTEN_SRC_BUCKETS];
};

void listen_sources_init(struct listen_sources *s);
void listen_sources_destroy(struct listen_sources *s);

enum listen_src_verdict {
	LISTEN_SRC_COUNTED,   /* admitted and counted: listen_sources_leave() it */
	LISTEN_SRC_UNCOUNTED, /* admitted, not counted (no IP address, no memory) */
	LISTEN_SRC_REFUSED,   /* its address holds its share (listen_src_refuse()) */
};

/* A new SMC client from @peer, at a listener of @backlog. */
enum listen_src_verdict listen_sources_enter(struct listen_sources *s,
					     const struct sockaddr_storage *peer, socklen_t len,
					     unsigned int backlog);

/* A counted client from @peer left the handshake. */
void listen_sources_leave(struct listen_sources *s, const struct sockaddr_storage *peer,
			  socklen_t len);

/* How many handshakes @peer's address holds now (tests, logs). */
unsigned int listen_sources_held(struct listen_sources *s, const struct sockaddr_storage *peer,
				 socklen_t len);

#endif
