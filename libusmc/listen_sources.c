// SPDX-License-Identifier: MIT
/*
 * Handshakes per source address (listen_sources.h): a small hash table of
 * the addresses that hold at least one, each entry freed when its count
 * falls to 0. At most one entry per counted handshake, so at most the
 * backlog's worth of entries; a bucket's chain is short unless one
 * address's bucket is aimed at, which the random seed prevents.
 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "listen_policy.h"
#include "listen_sources.h"

struct listen_src {
	struct listen_src *next;
	uint8_t key[16]; /* the IPv6 address, or the IPv4 one mapped */
	unsigned int held;
};

void listen_sources_init(struct listen_sources *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	if (getrandom(&s->seed, sizeof(s->seed), GRND_NONBLOCK) != sizeof(s->seed))
		s->seed = (uint64_t)(uintptr_t)s ^ 0x9e3779b97f4a7c15ull; /* still per listener */
}

void listen_sources_destroy(struct listen_sources *s)
{
	for (int i = 0; i < LISTEN_SRC_BUCKETS; i++) {
		while (s->bucket[i]) {
			struct listen_src *e = s->bucket[i];

			s->bucket[i] = e->next;
			free(e);
		}
	}
	pthread_mutex_destroy(&s->lock);
}

/* The address of @peer as 16 bytes; false if it is not an IP address. A
 * client that connects over IPv6 with an IPv4-mapped address is the same
 * source as over IPv4. */
static bool src_key(const struct sockaddr_storage *peer, socklen_t len, uint8_t key[16])
{
	if (peer->ss_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)peer;

		memset(key, 0, 10);
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &a->sin_addr, 4);
		return true;
	}
	if (peer->ss_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		memcpy(key, &((const struct sockaddr_in6 *)peer)->sin6_addr, 16);
		return true;
	}
	return false;
}

/* FNV-1a over the seed and the key: cheap, and with a secret seed a peer
 * cannot choose addresses that share a bucket. */
static unsigned int src_bucket(const struct listen_sources *s, const uint8_t key[16])
{
	uint64_t h = 0xcbf29ce484222325ull ^ s->seed;

	for (int i = 0; i < 16; i++)
		h = (h ^ key[i]) * 0x100000001b3ull;
	h ^= h >> 29;
	return (unsigned int)(h % LISTEN_SRC_BUCKETS);
}

/* Requires @s->lock. The entry of @key in its bucket, NULL if none; *@link
 * is where it is linked from. */
static struct listen_src *src_find_locked(struct listen_sources *s, const uint8_t key[16],
					  struct listen_src ***link)
{
	struct listen_src **at = &s->bucket[src_bucket(s, key)];

	while (*at && memcmp((*at)->key, key, 16))
		at = &(*at)->next;
	*link = at;
	return *at;
}

enum listen_src_verdict listen_sources_enter(struct listen_sources *s,
					     const struct sockaddr_storage *peer, socklen_t len,
					     unsigned int backlog)
{
	enum listen_src_verdict v = LISTEN_SRC_COUNTED;
	struct listen_src **link, *e;
	uint8_t key[16];

	if (!src_key(peer, len, key))
		return LISTEN_SRC_UNCOUNTED;
	pthread_mutex_lock(&s->lock);
	e = src_find_locked(s, key, &link);
	if (e && listen_src_refuse(e->held, backlog)) {
		v = LISTEN_SRC_REFUSED;
	} else if (e) {
		e->held++;
	} else if ((e = calloc(1, sizeof(*e)))) {
		memcpy(e->key, key, 16);
		e->held = 1;
		*link = e;
	} else {
		v = LISTEN_SRC_UNCOUNTED; /* out of memory: admit it rather than refuse */
	}
	pthread_mutex_unlock(&s->lock);
	return v;
}

void listen_sources_leave(struct listen_sources *s, const struct sockaddr_storage *peer,
			  socklen_t len)
{
	struct listen_src **link, *e;
	uint8_t key[16];

	if (!src_key(peer, len, key))
		return;
	pthread_mutex_lock(&s->lock);
	e = src_find_locked(s, key, &link);
	if (e && !--e->held) {
		*link = e->next;
		free(e);
	}
	pthread_mutex_unlock(&s->lock);
}

unsigned int listen_sources_held(struct listen_sources *s, const struct sockaddr_storage *peer,
				 socklen_t len)
{
	struct listen_src **link, *e;
	unsigned int n = 0;
	uint8_t key[16];

	if (!src_key(peer, len, key))
		return 0;
	pthread_mutex_lock(&s->lock);
	e = src_find_locked(s, key, &link);
	if (e)
		n = e->held;
	pthread_mutex_unlock(&s->lock);
	return n;
}
