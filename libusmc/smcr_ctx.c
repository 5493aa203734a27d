// SPDX-License-Identifier: MIT
/* Per-context SMC-R state: system identifier, UEID, the link group list. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "ctx.h"
#include "smcr.h"

int smcr_ueid_pad(const char *in, uint8_t out[SMCR_UEID_LEN])
{
	size_t n = in ? strlen(in) : 0;

	/* §8.1: A-Z 0-9 . -, first character alphanumeric, blank padded */
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

int smcr_ctx_init(struct smcr_ctx *s)
{
	const char *env = getenv("USMC_UEID");

	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->dev_lock, NULL);
	pthread_mutex_init(&s->create_lock[0], NULL);
	pthread_mutex_init(&s->create_lock[1], NULL);
	/*
	 * §6: every independent stack needs its own system ID, or peers would
	 * mix up link groups of different processes. Linux uses 2 random bytes
	 * and a MAC; a context takes 8 random bytes (a MAC adds nothing when
	 * several processes share it).
	 */
	if (getrandom(s->system_id, sizeof(s->system_id), 0) != sizeof(s->system_id))
		return -EIO;
	if (getrandom(&s->token_seq, sizeof(s->token_seq), 0) != sizeof(s->token_seq))
		return -EIO;
	return smcr_ueid_pad(env && *env ? env : SMCR_DEFAULT_UEID, s->ueid);
}

void smcr_ctx_fini(struct smcr_ctx *s)
{
	pthread_mutex_destroy(&s->create_lock[1]);
	pthread_mutex_destroy(&s->create_lock[0]);
	pthread_mutex_destroy(&s->dev_lock);
	pthread_mutex_destroy(&s->lock);
}

int smcr_dev_lookup(struct smcr_ctx *s, const struct in_addr *addr, struct smcr_dev *dev)
{
	int rc;

	pthread_mutex_lock(&s->dev_lock);
	for (int i = 0; i < s->dev_n; i++)
		if (s->dev_addr[i].s_addr == addr->s_addr) {
			*dev = s->dev_cache[i];
			pthread_mutex_unlock(&s->dev_lock);
			return 0;
		}
	pthread_mutex_unlock(&s->dev_lock);
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

int usmc_ctx_set_ueid(struct usmc_ctx *ctx, const char *ueid)
{
	uint8_t padded[SMCR_UEID_LEN];
	int rc;

	if (!ctx)
		return -EINVAL;
	rc = smcr_ueid_pad(ueid, padded);
	if (rc)
		return rc;
	pthread_mutex_lock(&ctx->lock);
	memcpy(ctx->rdma.ueid, padded, SMCR_UEID_LEN);
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}
