// SPDX-License-Identifier: MIT
/* Per-context SMC-R state (smcr_ctx.h). */
#include <errno.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "env.h"
#include "lgr.h"
#include "smcr_conn.h"
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
	int rc;

	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are monotonic */
	pthread_cond_init(&s->lgrs_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->dev_lock, NULL);
	pthread_mutex_init(&s->ueid_lock, NULL);
	pthread_mutex_init(&s->watch_lock, NULL);
	bufpool_budget_init(&s->regmem, 0); /* the caller applies the option */
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
	/* read in a privileged process too, as USMC_UEID: it only narrows the
	 * devices this process's own connections use */
	rc = smcr_dev_set_parse(env_get(env, "USMC_DEVICES"), &s->devs);
	if (rc)
		return rc;
	return smcr_ueid_pad(ueid && *ueid ? ueid : SMCR_DEFAULT_UEID, s->ueid);
}

void smcr_ctx_fini(struct smcr_ctx *s)
{
	lgr_destroy_all(s);
	pthread_mutex_destroy(&s->watch_lock);
	bufpool_budget_fini(&s->regmem);
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
void smcr_ctx_count_link_event(struct smcr_ctx *s, enum smcr_link_event ev, unsigned int n)
{
	if ((unsigned int)ev < SMCR_LINK_EVENTS)
		atomic_fetch_add_explicit(&s->link_events[ev], n, memory_order_relaxed);
}

uint64_t smcr_ctx_link_events(const struct smcr_ctx *s, enum smcr_link_event ev)
{
	if ((unsigned int)ev >= SMCR_LINK_EVENTS)
		return 0;
	return atomic_load_explicit(&s->link_events[ev], memory_order_relaxed);
}

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
	struct smcr_dev_set devs;
	bool hit;
	int rc;

	pthread_mutex_lock(&s->dev_lock);
	hit = dev_cache_get_locked(s, addr, dev);
	devs = s->devs;
	pthread_mutex_unlock(&s->dev_lock);
	if (hit)
		return 0;
	/* a miss scans the GID tables (not cached: an address may get a GID later) */
	rc = smcr_dev_find(addr, &devs, dev);
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

int smcr_ctx_set_devices(struct smcr_ctx *s, const char *list)
{
	struct smcr_dev_set devs;
	int rc = smcr_dev_set_parse(list, &devs);

	if (rc)
		return rc;
	pthread_mutex_lock(&s->dev_lock);
	s->devs = devs;
	s->dev_n = 0; /* a cached port may be one it no longer may use */
	pthread_mutex_unlock(&s->dev_lock);
	return 0;
}

void smcr_ctx_devices(struct smcr_ctx *s, struct smcr_dev_set *out)
{
	pthread_mutex_lock(&s->dev_lock);
	*out = s->devs;
	pthread_mutex_unlock(&s->dev_lock);
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

/* ---- registered memory (USMC_OPT_REG_MEM_MAX) ------------------------ */

/* The kernel pins for this process without limit: CAP_IPC_LOCK
 * (drivers/infiniband/core/umem.c ib_umem_get() checks it with the limit). */
static bool smcr_pins_unlimited(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &h, d))
		return false;
	return d[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK);
}

/* Of a budget that is RLIMIT_MEMLOCK, the claimed part past which new
 * buffers are the smallest: the other half holds four times as many
 * connections of 16 KiB buffers as of 64 KiB ones. */
#define SMCR_REGMEM_SMALL_DIV 2

/* The budget in bytes that USMC_OPT_REG_MEM_MAX @opt stands for, 0: none. */
static uint64_t smcr_regmem_max(long opt)
{
	struct rlimit rl;

	if (opt)
		return opt > 0 ? (uint64_t)opt : 0;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY || smcr_pins_unlimited())
		return 0;
	return rl.rlim_cur;
}

void smcr_ctx_regmem_apply(struct smcr_ctx *s, long opt)
{
	uint64_t max = smcr_regmem_max(opt), pinned;

	atomic_store(&s->regmem.max, max);
	/* The kernel's limit, not one the user sized: past half of it new
	 * buffers are the smallest (struct bufpool_budget) */
	atomic_store(&s->regmem.small_from, opt ? 0 : max / SMCR_REGMEM_SMALL_DIV);
	pinned = atomic_load(&s->regmem.pinned);
	if (max && pinned > max)
		bufpool_budget_shrink(&s->regmem, pinned - max);
}

/*
 * A shrink is about to deregister a free RMB of link group @arg whose rkey
 * its peer holds: the peer forgets it, or its table of our rkeys fills up
 * with dead ones (smcr_conn.c sc_keep_rkey()). The link group may be idle
 * (no reference) and on its way out: told only while still published,
 * under a reference taken there (lgr.h: from 0 only under our lock).
 */
static void smcr_pool_dropped(void *arg, const struct bufpool_buf *rmb)
{
	struct lgr *lgr = arg;
	struct smcr_ctx *s = lgr->sctx;
	bool found = false;

	pthread_mutex_lock(&s->lock);
	for (struct lgr *l = s->lgrs; l && !found; l = l->next)
		found = l == lgr;
	if (found)
		lgr_get(lgr);
	pthread_mutex_unlock(&s->lock);
	if (!found)
		return;
	smcr_rkey_forget(lgr, rmb->rkey);
	lgr_put(lgr);
}

void smcr_ctx_pool_config(struct smcr_ctx *s, struct lgr *lgr, struct bufpool_config *cfg)
{
	cfg->budget = &s->regmem;
	cfg->dropped = cfg->kind == BUFPOOL_RMB ? smcr_pool_dropped : NULL; /* no rkey */
	cfg->dropped_arg = lgr;
}
