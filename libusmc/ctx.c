// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "ctx.h"
#include "listen.h"
#include "stat.h"
#include "kcompat.h"
#include "smcr_dev.h"

int usmc_ctx_create(struct usmc_ctx **out)
{
	struct usmc_ctx *ctx;
	int rc;

	if (!out)
		return -EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	rc = opts_init_from_env(&ctx->opts);
	if (rc)
		goto err;
	rc = smcr_ctx_init(&ctx->rdma);
	if (rc)
		goto err;
	rc = smcr_dev_discover(&ctx->devs, &ctx->ndevs);
	if (rc)
		goto err;
	rc = kcompat_open(&ctx->kc); /* kernel-compat mode: kcompat.c */
	if (rc) {
		free(ctx->devs);
		goto err;
	}
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->reg_lock, NULL);
	pthread_mutex_init(&ctx->stat_lock, NULL);
	/* publication (usmc-stat): failing to publish never fails the context */
	if (ctx->opts.v[USMC_OPT_STAT])
		ctx->stat = stat_start(ctx);
	*out = ctx;
	return 0;
err:
	free(ctx);
	return rc;
}

int usmc_ctx_destroy(struct usmc_ctx *ctx)
{
	if (!ctx)
		return -EINVAL;
	if (atomic_load(&ctx->open_conns) || atomic_load(&ctx->open_listeners))
		return -EBUSY;
	stat_stop(ctx->stat); /* first: its thread reads the rest */
	ctx->stat = NULL;
	smcr_ctx_fini(&ctx->rdma);
	pthread_mutex_destroy(&ctx->stat_lock);
	pthread_mutex_destroy(&ctx->reg_lock);
	pthread_mutex_destroy(&ctx->lock);
	kcompat_close(ctx->kc);
	free(ctx->devs);
	free(ctx);
	return 0;
}

static void ctx_stat_apply(struct usmc_ctx *ctx, bool on);

int usmc_ctx_setopt(struct usmc_ctx *ctx, enum usmc_opt opt, long value)
{
	int rc;

	if (!ctx)
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	rc = opts_set(&ctx->opts, opt, value);
	pthread_mutex_unlock(&ctx->lock);
	if (!rc && opt == USMC_OPT_STAT)
		ctx_stat_apply(ctx, value != 0);
	return rc;
}

/* Start or stop the publication (USMC_OPT_STAT set at run time). */
static void ctx_stat_apply(struct usmc_ctx *ctx, bool on)
{
	struct usmc_stat *old = NULL;

	pthread_mutex_lock(&ctx->stat_lock);
	if (on && !ctx->stat) {
		ctx->stat = stat_start(ctx);
	} else if (!on) {
		old = ctx->stat;
		ctx->stat = NULL;
	}
	pthread_mutex_unlock(&ctx->stat_lock);
	stat_stop(old); /* joins the thread: outside stat_lock */
}

int usmc_ctx_getopt(const struct usmc_ctx *ctx, enum usmc_opt opt, long *value)
{
	struct usmc_opts o;

	if (!ctx)
		return -EINVAL;
	ctx_copy_opts((struct usmc_ctx *)ctx, &o);
	return opts_get(&o, opt, value);
}

void ctx_copy_opts(struct usmc_ctx *ctx, struct usmc_opts *out)
{
	pthread_mutex_lock(&ctx->lock);
	*out = ctx->opts;
	pthread_mutex_unlock(&ctx->lock);
}

int usmc_ctx_kernel_compat(const struct usmc_ctx *ctx)
{
	if (!ctx)
		return -EINVAL;
	return ctx->kc != NULL;
}

int usmc_ctx_devices(const struct usmc_ctx *ctx, struct usmc_device_info *devs, int max)
{
	if (!ctx || max < 0 || (max > 0 && !devs))
		return -EINVAL;
	for (int i = 0; i < ctx->ndevs && i < max; i++)
		devs[i] = ctx->devs[i];
	return ctx->ndevs;
}

bool ctx_has_smcr_device(const struct usmc_ctx *ctx)
{
	for (int i = 0; i < ctx->ndevs; i++)
		if (ctx->devs[i].gid_index >= 0)
			return true;
	return false;
}

void ctx_count_mode(struct usmc_ctx *ctx, enum usmc_mode mode, uint32_t reason)
{
	mode_counts_add(&ctx->modes, mode, reason);
}

void usmc_ctx_stats(const struct usmc_ctx *ctx, struct usmc_ctx_stats *st)
{
	if (!ctx || !st)
		return;
	st->connects = atomic_load(&ctx->connects);
	st->accepts = atomic_load(&ctx->accepts);
	st->smcr = atomic_load(&ctx->modes.smcr);
	st->fallbacks = atomic_load(&ctx->modes.fallbacks);
	st->hs_errors = atomic_load(&ctx->hs_errors);
	st->open_conns = (uint64_t)atomic_load(&ctx->open_conns);
	st->lgrs_created = atomic_load(&ctx->rdma.lgrs_created);
	st->lgrs_open = (uint64_t)atomic_load(&ctx->rdma.lgrs_open);
}

uint64_t usmc_ctx_fallback_count(const struct usmc_ctx *ctx, uint32_t reason)
{
	return ctx ? mode_counts_fallbacks(&ctx->modes, reason) : 0;
}

int usmc_ctx_set_ueid(struct usmc_ctx *ctx, const char *ueid)
{
	return ctx ? smcr_ctx_set_ueid(&ctx->rdma, ueid) : -EINVAL;
}

/* ---- registry (usmc-stat) ---------------------------------------------- */

void ctx_register_conn(struct usmc_ctx *ctx, struct usmc_conn *c)
{
	pthread_mutex_lock(&ctx->reg_lock);
	c->reg_prev = NULL;
	c->reg_next = ctx->conns;
	if (ctx->conns)
		ctx->conns->reg_prev = c;
	ctx->conns = c;
	pthread_mutex_unlock(&ctx->reg_lock);
}

void ctx_unregister_conn(struct usmc_ctx *ctx, struct usmc_conn *c)
{
	pthread_mutex_lock(&ctx->reg_lock);
	if (c->reg_prev)
		c->reg_prev->reg_next = c->reg_next;
	else if (ctx->conns == c)
		ctx->conns = c->reg_next;
	if (c->reg_next)
		c->reg_next->reg_prev = c->reg_prev;
	c->reg_prev = c->reg_next = NULL;
	pthread_mutex_unlock(&ctx->reg_lock);
}

void ctx_register_listener(struct usmc_ctx *ctx, struct usmc_listener *l)
{
	pthread_mutex_lock(&ctx->reg_lock);
	l->reg_prev = NULL;
	l->reg_next = ctx->listeners;
	if (ctx->listeners)
		ctx->listeners->reg_prev = l;
	ctx->listeners = l;
	pthread_mutex_unlock(&ctx->reg_lock);
}

void ctx_unregister_listener(struct usmc_ctx *ctx, struct usmc_listener *l)
{
	pthread_mutex_lock(&ctx->reg_lock);
	if (l->reg_prev)
		l->reg_prev->reg_next = l->reg_next;
	else if (ctx->listeners == l)
		ctx->listeners = l->reg_next;
	if (l->reg_next)
		l->reg_next->reg_prev = l->reg_prev;
	l->reg_prev = l->reg_next = NULL;
	pthread_mutex_unlock(&ctx->reg_lock);
}
