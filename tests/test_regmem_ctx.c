// SPDX-License-Identifier: MIT
/*
 * A context's budget of registered memory (USMC_OPT_REG_MEM_MAX): what the
 * option stands for (RLIMIT_MEMLOCK by default, half of which is filled
 * with the buffers asked for and the rest with small ones; none where the
 * kernel pins without limit, an explicit size, none at -1, the
 * environment's), and the
 * link groups' pools counting against it through smcr_ctx_pool_config() as
 * usmc_ctx_stats() shows, a lowered budget shrinking them at once. Pools
 * on a fake registration hook stand in for a link group's.
 */
#include <errno.h>
#include <linux/capability.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "bufpool.h"
#include "ctx.h"
#include "lgr.h"
#include "smcr_ctx.h"

#define KiB	      1024u
#define MiB	      (1024u * KiB)
#define BUF	      (64 * KiB)
#define MEMLOCK_TEST  (8 * MiB) /* the soft limit the default is read from */
#define FAKE_KEY_BASE 0x3000u

static unsigned int regs, deregs;

static int fake_reg(void *ctx, void *addr, size_t len, unsigned int access, struct bufpool_mr *mr)
{
	(void)ctx;
	(void)addr;
	(void)len;
	(void)access;
	mr->handle = addr;
	mr->lkey = FAKE_KEY_BASE + regs;
	mr->rkey = FAKE_KEY_BASE + regs;
	regs++;
	return 0;
}

static int fake_dereg(void *ctx, struct bufpool_mr *mr)
{
	(void)ctx;
	(void)mr;
	deregs++;
	return 0;
}

static const struct bufpool_reg_ops fake_ops = {.reg = fake_reg, .dereg = fake_dereg};

static struct usmc_ctx_stats stats(struct usmc_ctx *ctx)
{
	struct usmc_ctx_stats st;

	usmc_ctx_stats(ctx, &st);
	return st;
}

/* CAP_IPC_LOCK in the effective set raised (@on) or dropped; false if the
 * capabilities cannot be read or changed. */
static bool ipc_lock_effective(bool on)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
	uint32_t *eff;

	if (syscall(SYS_capget, &h, d))
		return false;
	eff = &d[CAP_TO_INDEX(CAP_IPC_LOCK)].effective;
	if (on && !(d[CAP_TO_INDEX(CAP_IPC_LOCK)].permitted & CAP_TO_MASK(CAP_IPC_LOCK)))
		return false;
	*eff = on ? *eff | CAP_TO_MASK(CAP_IPC_LOCK) : *eff & ~CAP_TO_MASK(CAP_IPC_LOCK);
	return syscall(SYS_capset, &h, d) == 0;
}

/* The default (0) is the soft RLIMIT_MEMLOCK, read when the context is
 * created and when the option is set; a size is itself, -1 none, and
 * below -1 is refused. */
static void test_option_values(void **state)
{
	struct rlimit old, rl;
	struct usmc_ctx *ctx;
	bool had_ipc_lock;

	(void)state;
	unsetenv("USMC_REG_MEM_MAX");
	assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &old), 0);
	rl = old;
	rl.rlim_cur = rl.rlim_max < MEMLOCK_TEST ? rl.rlim_max : MEMLOCK_TEST;
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	had_ipc_lock = ipc_lock_effective(false); /* root pins without limit */
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	if (rl.rlim_cur != RLIM_INFINITY) {
		assert_int_equal(stats(ctx).pinned_max, rl.rlim_cur);
		/* the kernel's limit: new buffers are small past half of it */
		assert_int_equal(atomic_load(&ctx->rdma.regmem.small_from), rl.rlim_cur / 2);
	}
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_REG_MEM_MAX, 1 * MiB), 0);
	assert_int_equal(stats(ctx).pinned_max, 1 * MiB);
	/* a size the user chose is filled with the buffers asked for */
	assert_int_equal(atomic_load(&ctx->rdma.regmem.small_from), 0);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_REG_MEM_MAX, -1), 0);
	assert_int_equal(stats(ctx).pinned_max, 0);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_REG_MEM_MAX, -2), -EINVAL);
	/* with CAP_IPC_LOCK the kernel's limit does not apply: no cap either */
	if (had_ipc_lock && ipc_lock_effective(true)) {
		assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_REG_MEM_MAX, 0), 0);
		assert_int_equal(stats(ctx).pinned_max, 0);
	}
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &old), 0);
}

/* The environment's value, in a process that is not privileged. */
static void test_option_from_env(void **state)
{
	const char *env[] = {"USMC_REG_MEM_MAX=2097152", NULL};
	const char *bad[] = {"USMC_REG_MEM_MAX=-5", NULL};
	struct usmc_ctx *ctx;

	(void)state;
	assert_int_equal(usmc_ctx_create_env(&ctx, env), 0);
	assert_int_equal(stats(ctx).pinned_max, 2 * MiB);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
	assert_int_equal(usmc_ctx_create_env(&ctx, bad), -EINVAL);
}

/* Two link groups' pools count against their context's budget; a lowered
 * budget deregisters the free buffers beyond it at once, a claimed one
 * stays; the counts reach usmc_ctx_stats(). */
static void test_pools_share_ctx_budget(void **state)
{
	struct bufpool_config cfg = {.ops = &fake_ops};
	struct bufpool *pools[2];
	struct bufpool_buf *b[3];
	struct usmc_ctx *ctx;
	struct lgr *lgr = calloc(1, sizeof(*lgr)); /* never published: not told */

	(void)state;
	assert_non_null(lgr);
	assert_int_equal(usmc_ctx_create(&ctx), 0);
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_REG_MEM_MAX, 4 * BUF), 0);
	lgr->sctx = &ctx->rdma;
	regs = deregs = 0;
	cfg.kind = BUFPOOL_RMB;
	smcr_ctx_pool_config(&ctx->rdma, lgr, &cfg);
	assert_ptr_equal(cfg.budget, &ctx->rdma.regmem);
	assert_non_null(cfg.dropped);
	pools[0] = bufpool_create(&cfg);
	cfg.kind = BUFPOOL_SNDBUF;
	smcr_ctx_pool_config(&ctx->rdma, lgr, &cfg);
	assert_null(cfg.dropped); /* a send buffer has no rkey */
	pools[1] = bufpool_create(&cfg);
	assert_non_null(pools[0]);
	assert_non_null(pools[1]);
	assert_int_equal(bufpool_claim(pools[0], BUF, &b[0]), 0);
	b[0]->rkey_confirmed = true;
	assert_int_equal(bufpool_claim(pools[1], BUF, &b[1]), 0);
	assert_int_equal(bufpool_claim(pools[1], BUF, &b[2]), 0);
	assert_int_equal(stats(ctx).pinned_bytes, 3 * BUF);
	bufpool_release(pools[0], b[0]);
	bufpool_release(pools[1], b[1]);
	/* down to one buffer: the two free ones go, the claimed one stays */
	assert_int_equal(usmc_ctx_setopt(ctx, USMC_OPT_REG_MEM_MAX, BUF), 0);
	assert_int_equal(stats(ctx).pinned_bytes, BUF);
	assert_int_equal(stats(ctx).pool_shrinks, 2);
	assert_int_equal(deregs, 2);
	assert_int_equal(bufpool_claim(pools[0], BUF, &b[0]), -ENOMEM);
	assert_true(stats(ctx).pinned_refused > 0);
	bufpool_release(pools[1], b[2]);
	assert_int_equal(bufpool_destroy(pools[0], NULL), 0);
	assert_int_equal(bufpool_destroy(pools[1], NULL), 0);
	assert_int_equal(stats(ctx).pinned_bytes, 0);
	assert_int_equal(deregs, regs);
	assert_int_equal(usmc_ctx_destroy(ctx), 0);
	free(lgr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_option_values),
		cmocka_unit_test(test_option_from_env),
		cmocka_unit_test(test_pools_share_ctx_budget),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
