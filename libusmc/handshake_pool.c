// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>

#include "conn.h"
#include "handshake_pool.h"
#include "thread_name.h"

static void *hs_worker(void *arg)
{
	struct hs_pool *p = arg;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct usmc_conn *c;

		while (!p->queue.head && !p->stopping)
			pthread_cond_wait(&p->more, &p->lock);
		if (p->stopping)
			break;
		c = conn_fifo_pop(&p->queue);
		p->depth--;
		pthread_mutex_unlock(&p->lock);
		p->fn(p->arg, c);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int hs_pool_start(struct hs_pool *p, int nthreads, hs_fn fn, void *arg)
{
	int rc = 0;

	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->more, NULL);
	p->queue = (struct conn_fifo){0};
	p->depth = p->high = 0;
	p->stopping = false;
	p->fn = fn;
	p->arg = arg;
	p->nthreads = 0;
	p->threads = calloc((size_t)nthreads, sizeof(*p->threads));
	if (!p->threads)
		return -ENOMEM;
	for (int i = 0; i < nthreads; i++) {
		rc = -pthread_create(&p->threads[i], NULL, hs_worker, p);
		if (rc)
			break;
		thread_name_set(p->threads[i], "usmc-hs/%d", i);
		p->nthreads++;
	}
	if (rc) {
		(void)hs_pool_stop(p); /* nothing can be queued yet */
		return rc;
	}
	return 0;
}

void hs_pool_submit(struct hs_pool *p, struct usmc_conn *c)
{
	pthread_mutex_lock(&p->lock);
	conn_fifo_push(&p->queue, c);
	if (++p->depth > p->high)
		p->high = p->depth;
	pthread_cond_signal(&p->more);
	pthread_mutex_unlock(&p->lock);
}

/* A field of @p that its lock guards, read from another thread. */
static unsigned int read_under_lock(struct hs_pool *p, const unsigned int *field)
{
	unsigned int v;

	pthread_mutex_lock(&p->lock);
	v = *field;
	pthread_mutex_unlock(&p->lock);
	return v;
}

unsigned int hs_pool_depth(struct hs_pool *p)
{
	return read_under_lock(p, &p->depth);
}

unsigned int hs_pool_high(struct hs_pool *p)
{
	return read_under_lock(p, &p->high);
}

struct usmc_conn *hs_pool_stop(struct hs_pool *p)
{
	struct usmc_conn *left;

	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	p->threads = NULL;
	left = p->queue.head;
	p->queue = (struct conn_fifo){0};
	p->depth = 0;
	pthread_cond_destroy(&p->more);
	pthread_mutex_destroy(&p->lock);
	return left;
}
