/* SPDX-License-Identifier: MIT */
/*
 * A buffer-pool registration hook without a device (struct bufpool_reg_ops),
 * one struct fake_reg per protection domain it stands for (the hook's ctx):
 * it hands out keys that no other fake hands out, remembers which buffer
 * each key was for, counts registrations and deregistrations, and fails on
 * demand - the Nth call, a length, or a limit of bytes (the kernel's
 * RLIMIT_MEMLOCK). Thread-safe. A deregistration of a handle that is not
 * one of its live registrations is counted in @errors, not asserted: the
 * hook may run in any thread.
 */
#ifndef USMC_TEST_BUFPOOL_FAKE_H
#define USMC_TEST_BUFPOOL_FAKE_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bufpool.h"

#define FAKE_REG_KEY_SHIFT 20 /* keys: id << 20 | 2 * registration (+ 1: the rkey) */
#define FAKE_REG_MAX	   ((1u << (FAKE_REG_KEY_SHIFT - 1)) - 1)

struct fake_reg_entry {
	void *addr;
	size_t len;
	bool live;
};

struct fake_reg {
	pthread_mutex_t lock;
	uint32_t id; /* 1..4095: its keys are its own */
	unsigned int calls, regs, deregs;
	unsigned int fail_at; /* fail the fail_at-th reg() call (1: the first); 0: never */
	size_t fail_len_min;  /* fail reg() of len >= this; 0: never */
	int fail_rc;	      /* what a failing reg() returns; 0: -ENOMEM */
	int dereg_rc;	      /* what dereg() returns */
	uint64_t limit;	      /* reg() past this many bytes fails with -ENOMEM; 0: none */
	uint64_t bytes, peak; /* registered now, at most */
	unsigned int last_access;
	unsigned int errors; /* dereg() of a handle not live here; the log full */
	struct fake_reg_entry *log;
	uint32_t nlog, caplog;
};

/* struct fake_reg f = FAKE_REG_INIT(id), or fake_reg_init(&f, id). */
#define FAKE_REG_INIT(i)                                     \
	{                                                    \
		.lock = PTHREAD_MUTEX_INITIALIZER, .id = (i) \
	}

static inline void fake_reg_init(struct fake_reg *f, uint32_t id)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
	f->id = id;
}

static inline void fake_reg_fini(struct fake_reg *f)
{
	free(f->log);
	f->log = NULL;
	pthread_mutex_destroy(&f->lock);
}

static inline uint32_t fake_reg_lkey(const struct fake_reg *f, uint32_t n)
{
	return f->id << FAKE_REG_KEY_SHIFT | 2 * n;
}

static inline int fake_reg_reg(void *ctx, void *addr, size_t len, unsigned int access,
			       struct bufpool_mr *mr)
{
	struct fake_reg *f = ctx;
	int rc = 0;

	pthread_mutex_lock(&f->lock);
	f->calls++;
	if ((f->fail_at && f->calls == f->fail_at) || (f->fail_len_min && len >= f->fail_len_min)) {
		rc = f->fail_rc ? f->fail_rc : -ENOMEM;
	} else if (f->limit && f->bytes + len > f->limit) {
		rc = -ENOMEM;
	} else if (f->nlog == FAKE_REG_MAX) {
		f->errors++;
		rc = -ENOSPC;
	} else {
		if (f->nlog == f->caplog) {
			uint32_t cap = f->caplog ? 2 * f->caplog : 64;
			void *log = realloc(f->log, cap * sizeof(*f->log));

			if (!log) {
				pthread_mutex_unlock(&f->lock);
				return -ENOMEM;
			}
			f->log = log;
			f->caplog = cap;
		}
		f->log[f->nlog] = (struct fake_reg_entry){.addr = addr, .len = len, .live = true};
		mr->handle = (void *)(uintptr_t)((uint64_t)f->id << 32 | (f->nlog + 1));
		mr->lkey = fake_reg_lkey(f, f->nlog);
		mr->rkey = mr->lkey + 1;
		f->nlog++;
		f->regs++;
		f->last_access = access;
		f->bytes += len;
		if (f->bytes > f->peak)
			f->peak = f->bytes;
	}
	pthread_mutex_unlock(&f->lock);
	return rc;
}

static inline int fake_reg_dereg(void *ctx, struct bufpool_mr *mr)
{
	struct fake_reg *f = ctx;
	uint64_t h = (uintptr_t)mr->handle;
	uint32_t n = (uint32_t)h;
	int rc;

	pthread_mutex_lock(&f->lock);
	rc = f->dereg_rc;
	f->deregs++;
	if (h >> 32 != f->id || !n || n > f->nlog || !f->log[n - 1].live) {
		f->errors++;
	} else {
		f->log[n - 1].live = false;
		f->bytes -= f->log[n - 1].len;
	}
	pthread_mutex_unlock(&f->lock);
	return rc;
}

static const struct bufpool_reg_ops fake_reg_ops = {.reg = fake_reg_reg, .dereg = fake_reg_dereg};

/*
 * The buffer @key (an lkey or rkey) was handed out for by @f, NULL if @f
 * never handed it out; *live (may be NULL): whether that registration still
 * stands.
 */
static inline void *fake_reg_key_addr(struct fake_reg *f, uint32_t key, bool *live)
{
	uint32_t n = (key & ((1u << FAKE_REG_KEY_SHIFT) - 1)) / 2;
	void *addr = NULL;

	pthread_mutex_lock(&f->lock);
	if (key >> FAKE_REG_KEY_SHIFT == f->id && n < f->nlog) {
		addr = f->log[n].addr;
		if (live)
			*live = f->log[n].live;
	}
	pthread_mutex_unlock(&f->lock);
	return addr;
}

/* Registrations that stand now: 0 once everything is deregistered. */
static inline unsigned int fake_reg_live(struct fake_reg *f)
{
	unsigned int n;

	pthread_mutex_lock(&f->lock);
	n = f->regs - f->deregs;
	pthread_mutex_unlock(&f->lock);
	return n;
}

#endif
