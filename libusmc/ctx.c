// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "abi.h"
#include "conn.h"
#include "ctx.h"
#include "env.h"
#include "event.h"
#include "listen_core.h"
#include "stat.h"
#include "kcompat.h"
#include "log.h"
#include "smcr_dev.h"

#define FORK_MARK_LEN 4096 /* one page: MADV_WIPEONFORK works on pages */

/* The page ctx_forked() reads, or NULL (getpid() then): MADV_WIPEONFORK is
 * Linux 4.14's. */
static const volatile uint8_t *fork_mark_map(void)
{
	uint8_t *p = mmap(NULL, FORK_MARK_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (madvise(p, FORK_MARK_LEN, MADV_WIPEONFORK)) {
		munmap(p, FORK_MARK_LEN);
		return NULL;
	}
	*p = CTX_FORK_MARK;
	return p;
}

int usmc_ctx_create(struct usmc_ctx **out)
{
	return usmc_ctx_create_env(out, NULL);
}

int usmc_ctx_create_env(struct usmc_ctx **out, const char *const *env)
{
	struct usmc_ctx *ctx;
	int rc;

	if (!out)
		return -EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	rc = opts_init_from_env(&ctx->opts, env);
	if (rc)
		goto err;
	rc = usmc_logger_init(&ctx->log, env); /* USMC_LOG */
	if (rc)
		goto err;
	rc = smcr_ctx_init(&ctx->rdma, env);
	if (rc)
		goto err_log;
	ctx->rdma.log = &ctx->log;
	smcr_ctx_regmem_apply(&ctx->rdma, ctx->opts.v[USMC_OPT_REG_MEM_MAX]);
	rc = smcr_dev_discover(&ctx->devs, &ctx->ndevs);
	if (rc)
		goto err_log;
	rc = kcompat_open(&ctx->kc, &ctx->log, env); /* kernel-compat mode: kcompat.c */
	if (rc) {
		free(ctx->devs);
		goto err_log;
	}
	pthread_mutex_init(&ctx->lock, NULL);
	ctx->pid = getpid();
	ctx->fork_mark = fork_mark_map();
	pthread_mutex_init(&ctx->reg_lock, NULL);
	pthread_mutex_init(&ctx->stat_lock, NULL);
	/* publication (usmc-stat): failing to publish never fails the context */
	if (ctx->opts.v[USMC_OPT_STAT])
		ctx->stat = stat_start(ctx);
	*out = ctx;
	return 0;
err_log:
	usmc_logger_fini(&ctx->log);
err:
	free(ctx);
	return rc;
}

int usmc_env_check(char *msg, size_t len)
{
	return usmc_env_check_env(NULL, msg, len);
}

int usmc_env_check_env(const char *const *env, char *msg, size_t len)
{
	uint8_t ueid[SMCR_UEID_LEN];
	struct smcr_dev_set devs;
	enum kc_mode mode;
	const char *s, *file;
	int level;
	int rc;

	if (len && !msg)
		return -EINVAL;
	env_msg(msg, len, "%s", "");
	rc = opts_env_check(env, msg, len);
	if (rc)
		return rc;
	/* as smcr_ctx_init(), kcompat_open() and usmc_logger_init() read them:
	 * a privileged process ignores the last two (env.h) */
	s = env_get(env, "USMC_UEID");
	if (s && *s && smcr_ueid_pad(s, ueid)) {
		env_msg(msg, len,
			"USMC_UEID=%s: not a UEID (1-32 of A-Z 0-9 . -, the first alphanumeric)",
			s);
		return -EINVAL;
	}
	s = env_get(env, "USMC_DEVICES");
	if (smcr_dev_set_parse(s, &devs)) {
		env_msg(msg, len, "USMC_DEVICES=%s: not a list of device[:port] (at most %d)", s,
			SMCR_DEV_SET_MAX);
		return -EINVAL;
	}
	s = env_secure_get(env, "USMC_KERNEL_COMPAT");
	if (kcompat_mode_parse(s, &mode)) {
		env_msg(msg, len, "USMC_KERNEL_COMPAT=%s: not auto, 0 or 1", s);
		return -EINVAL;
	}
	s = env_secure_get(env, "USMC_LOG");
	if (log_env_parse(s, &level, &file)) {
		env_msg(msg, len, "USMC_LOG=%s: not level[,file] (off, err, warn, info, debug)", s);
		return -EINVAL;
	}
	return 0;
}

int usmc_ctx_destroy(struct usmc_ctx *ctx)
{
	if (!ctx)
		return -EINVAL;
	if (ctx_forked(ctx))
		return USMC_EFORKED;
	if (atomic_load(&ctx->open_conns) || atomic_load(&ctx->open_listeners))
		return -EBUSY;
	stat_stop(ctx->stat); /* first: its thread reads the rest */
	event_set_free(atomic_load(&ctx->evset));
	ctx->stat = NULL;
	smcr_ctx_fini(&ctx->rdma);
	pthread_mutex_destroy(&ctx->stat_lock);
	pthread_mutex_destroy(&ctx->reg_lock);
	pthread_mutex_destroy(&ctx->lock);
	kcompat_close(ctx->kc);
	free(ctx->devs);
	usmc_logger_fini(&ctx->log);
	if (ctx->fork_mark)
		munmap((void *)ctx->fork_mark, FORK_MARK_LEN);
	free(ctx);
	return 0;
}

static void ctx_stat_apply(struct usmc_ctx *ctx, bool on);

int usmc_ctx_set_log(struct usmc_ctx *ctx, enum usmc_log_level max, usmc_log_fn fn, void *arg)
{
	return ctx ? usmc_logger_set(&ctx->log, max, fn, arg) : -EINVAL;
}

int usmc_ctx_setopt(struct usmc_ctx *ctx, enum usmc_opt opt, long value)
{
	int rc;

	if (!ctx)
		return -EINVAL;
	rc = opts_set_locked(&ctx->opts, &ctx->lock, opt, value);
	if (!rc && opt == USMC_OPT_STAT)
		ctx_stat_apply(ctx, value != 0);
	if (!rc && opt == USMC_OPT_REG_MEM_MAX)
		smcr_ctx_regmem_apply(&ctx->rdma, value);
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
	if (!ctx)
		return -EINVAL;
	return opts_get_locked(&ctx->opts, &((struct usmc_ctx *)ctx)->lock, opt, value);
}

void ctx_copy_opts(struct usmc_ctx *ctx, struct usmc_opts *out)
{
	opts_copy_locked(&ctx->opts, &ctx->lock, out);
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

int usmc_ctx_stats_sized(const struct usmc_ctx *ctx, struct usmc_ctx_stats *out, size_t size)
{
	struct usmc_ctx_stats full = {0}, *st = &full;

	if (!ctx || !out || !size)
		return -EINVAL;
	st->connects = atomic_load(&ctx->connects);
	st->accepts = atomic_load(&ctx->accepts);
	st->smcr = atomic_load(&ctx->modes.smcr);
	st->fallbacks = atomic_load(&ctx->modes.fallbacks);
	st->hs_errors = atomic_load(&ctx->hs_errors);
	st->open_conns = (uint64_t)atomic_load(&ctx->open_conns);
	st->lgrs_created = atomic_load(&ctx->rdma.lgrs_created);
	st->lgrs_open = (uint64_t)atomic_load(&ctx->rdma.lgrs_open);
	st->llc_sent = atomic_load(&ctx->rdma.llc_sent);
	st->llc_received = atomic_load(&ctx->rdma.llc_received);
	st->pinned_bytes = atomic_load(&ctx->rdma.regmem.pinned);
	st->pinned_max = atomic_load(&ctx->rdma.regmem.max);
	st->pool_shrinks = atomic_load(&ctx->rdma.regmem.shrinks);
	st->pinned_refused = atomic_load(&ctx->rdma.regmem.refused);
	smcr_ctx_engine_stats((struct smcr_ctx *)&ctx->rdma, &st->engine);
	st->lgrs_reclaimed = atomic_load(&ctx->rdma.lgrs_reclaimed);
	st->links_added = smcr_ctx_link_events(&ctx->rdma, SMCR_LINK_ADDED);
	st->link_failures = smcr_ctx_link_events(&ctx->rdma, SMCR_LINK_FAILED);
	st->failovers = smcr_ctx_link_events(&ctx->rdma, SMCR_LINK_FAILOVER);
	abi_fill(out, size, &full, sizeof(full));
	return 0;
}

/* usmc_ctx_stats@USMC_0.1: the 0.1 layout, which ends at lgrs_open */
USMC_SYMVER_OLD(usmc_ctx_stats_v0_1, usmc_ctx_stats, "USMC_0.1");
void usmc_ctx_stats_v0_1(const struct usmc_ctx *ctx, struct usmc_ctx_stats *st);
void usmc_ctx_stats_v0_1(const struct usmc_ctx *ctx, struct usmc_ctx_stats *st)
{
	(void)usmc_ctx_stats_sized(ctx, st, USMC_OFFSETOFEND(struct usmc_ctx_stats, lgrs_open));
}

uint64_t usmc_ctx_fallback_count(const struct usmc_ctx *ctx, uint32_t reason)
{
	return ctx ? mode_counts_fallbacks(&ctx->modes, reason) : 0;
}

int usmc_ctx_set_ueid(struct usmc_ctx *ctx, const char *ueid)
{
	return ctx ? smcr_ctx_set_ueid(&ctx->rdma, ueid) : -EINVAL;
}

int usmc_ctx_set_devices(struct usmc_ctx *ctx, const char *list)
{
	return ctx ? smcr_ctx_set_devices(&ctx->rdma, list) : -EINVAL;
}

/* ---- registry (usmc-stat) ---------------------------------------------- */

/* Link (@obj non-NULL) or unlink @n in @head, under the registry's lock. */
static void reg_update(struct usmc_ctx *ctx, struct reg_node **head, struct reg_node *n, void *obj)
{
	pthread_mutex_lock(&ctx->reg_lock);
	if (obj)
		reg_link(head, n, obj);
	else
		reg_unlink(head, n);
	pthread_mutex_unlock(&ctx->reg_lock);
}

void ctx_register_conn(struct usmc_ctx *ctx, struct usmc_conn *c)
{
	reg_update(ctx, &ctx->conns, &c->reg, c);
}

void ctx_unregister_conn(struct usmc_ctx *ctx, struct usmc_conn *c)
{
	reg_update(ctx, &ctx->conns, &c->reg, NULL);
}

void ctx_register_listener(struct usmc_ctx *ctx, struct usmc_listener *l)
{
	reg_update(ctx, &ctx->listeners, &l->reg, l);
}

void ctx_unregister_listener(struct usmc_ctx *ctx, struct usmc_listener *l)
{
	reg_update(ctx, &ctx->listeners, &l->reg, NULL);
}
