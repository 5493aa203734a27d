// SPDX-License-Identifier: MIT
/* Per-context SMC-R state (smcr_ctx.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "env.h"
#include "lgr.h"
#include "smcr_ctx.h"

int smcr_ueid_pad(const char *in, uint8_t out[SMCR_UEID_LEN])
{
	size_t n = in ? strlen(in) : 0;

	/* A-Z 0-9 . -, first character alphanumeric, blank padded
	 * (net/smc/smc_clc.c smc_clc_ueid_add() validates the same way) */
	if (!n || n > SMCR_UEID_LEN)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char ch = in[i];
		bool alnum = (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');

		if (!alnum && (i == 0 || (ch != '.' && ch != '-')))
			return -EINVAL;
	}
	memset(out, ' ', SMCR_UEID_LEN);
	memcpy(out, in, n);
	return 0;
}

int smcr_ctx_init(struct smcr_ctx *s, const char *const *env)
{
	/* read in a privileged process too (env.h): a validated name that only
	 * decides which peers this process's connections may use SMC-Rv2
	 * with, as usmc_ctx_set_ueid() lets any program decide */
	const char *ueid = env_get(env, "USMC_UEID");
	pthread_condattr_t ca;

	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are monotonic */
	pthread_cond_init(&s->lgrs_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->dev_lock, NULL);
	pthread_mutex_init(&s->ueid_lock, NULL);
	pthread_mutex_init(&s->watch_lock, NULL);
	/*
	 * Every independent stack needs its own system ID, or peers would mix
	 * up link groups of different processes (RFC 7609 3.3.1). Linux uses 2
	 * random bytes and a MAC (net/smc/smc_core.c smc_lgr_create(),
	 * local_systemid); a context takes 8 random bytes (a MAC adds nothing
	 * when several processes share it).
	 */
	if (getrandom(s->system_id, sizeof(s->system_id), 0) != sizeof(s->system_id))
		return -EIO;
	if (getrandom(&s->token_seq, sizeof(s->token_seq), 0) != sizeof(s->token_seq))
		return -EIO;
	return smcr_ueid_pad(ueid && *ueid ? ueid : SMCR_DEFAULT_UEID, s->ueid);
}

void smcr_ctx_fini(struct smcr_ctx *s)
{
	lgr_destroy_all(s);
	pthread_mutex_destroy(&s->watch_lock);
	pthread_mutex_destroy(&s->ueid_lock);
	pthread_mutex_destroy(&s->dev_lock);
	pthread_cond_destroy(&s->lgrs_cond);
	pthread_mutex_destroy(&s->lock);
}

unsigned int smcr_ctx_hs_events(struct smcr_ctx *s)
{
	return atomic_load(&s->hs_events);
}

void smcr_ctx_hs_event(struct smcr_ctx *s)
{
	/* counted before the watchers look, so that a handshake parked
	 * meanwhile sees either the count move or the watcher's call */
	atomic_fetch_add(&s->hs_events, 1);
	pthread_mutex_lock(&s->watch_lock);
	for (struct smcr_hs_watch *w = s->hs_watch; w; w = w->next)
		w->moved(w);
	pthread_mutex_unlock(&s->watch_lock);
}

void smcr_ctx_hs_watch(struct smcr_ctx *s, struct smcr_hs_watch *w)
{
	pthread_mutex_lock(&s->watch_lock);
	w->next = s->hs_watch;
	s->hs_watch = w;
	pthread_mutex_unlock(&s->watch_lock);
}

void smcr_ctx_hs_unwatch(struct smcr_ctx *s, struct smcr_hs_watch *w)
{
	pthread_mutex_lock(&s->watch_lock);
	for (struct smcr_hs_watch **pp = &s->hs_watch; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	pthread_mutex_unlock(&s->watch_lock);
}

/* A cached lookup of @addr; requires @s->dev_lock. */
static bool dev_cache_get_locked(struct smcr_ctx *s, const struct in_addr *addr,
				 struct smcr_dev *dev)
{
	for (int i = 0; i < s->dev_n; i++)
		if (s->dev_addr[i].s_addr == addr->s_addr) {
			*dev = s->dev_cache[i];
			return true;
		}
	return false;
}

int smcr_dev_lookup(struct smcr_ctx *s, const struct in_addr *addr, struct smcr_dev *dev)
{
	bool hit;
	int rc;

	pthread_mutex_lock(&s->dev_lock);
	hit = dev_cache_get_locked(s, addr, dev);
	pthread_mutex_unlock(&s->dev_lock);
	if (hit)
		return 0;
	/* a miss scans the GID tables (not cached: an address may get a GID later) */
	rc = smcr_dev_find(addr, dev);
	if (rc)
		return rc;
	pthread_mutex_lock(&s->dev_lock);
	if (s->dev_n < SMCR_DEV_CACHE) {
		s->dev_addr[s->dev_n] = *addr;
		s->dev_cache[s->dev_n++] = *dev;
	}
	pthread_mutex_unlock(&s->dev_lock);
	return 0;
}

int smcr_ctx_set_ueid(struct smcr_ctx *s, const char *ueid)
{
	uint8_t padded[SMCR_UEID_LEN];
	int rc = smcr_ueid_pad(ueid, padded);

	if (rc)
		return rc;
	pthread_mutex_lock(&s->ueid_lock);
	memcpy(s->ueid, padded, SMCR_UEID_LEN);
	pthread_mutex_unlock(&s->ueid_lock);
	return 0;
}

void smcr_ctx_ueid(struct smcr_ctx *s, uint8_t out[SMCR_UEID_LEN])
{
	/* usmc_ctx_set_ueid() may run concurrently with handshakes */
	pthread_mutex_lock(&s->ueid_lock);
	memcpy(out, s->ueid, SMCR_UEID_LEN);
	pthread_mutex_unlock(&s->ueid_lock);
}
