// SPDX-License-Identifier: MIT
/* The ready queue of an event set (event_queue.h). */
#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "event_queue.h"

int evq_init(struct evq *q, uint32_t always)
{
	*q = (struct evq){.always = always};
	q->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (q->efd < 0)
		return -errno;
	pthread_mutex_init(&q->lock, NULL);
	return 0;
}

void evq_fini(struct evq *q)
{
	if (q->efd >= 0)
		close(q->efd);
	q->efd = -1;
	pthread_mutex_destroy(&q->lock);
}

static bool evq_wanted(const struct evq *q, const struct evq_item *it)
{
	return it->interest && (it->state & (it->interest | q->always));
}

/* Requires q->lock. The eventfd goes readable with the first item. */
static void evq_push_locked(struct evq *q, struct evq_item *it)
{
	uint64_t one = 1;

	it->next = NULL;
	it->prev = q->tail;
	if (q->tail)
		q->tail->next = it;
	else
		q->head = it;
	q->tail = it;
	it->queued = true;
	if (it == q->head && write(q->efd, &one, sizeof(one)) == sizeof(one))
		q->signals++;
}

/* Requires q->lock. The eventfd is read back with the last item. */
static void evq_unlink_locked(struct evq *q, struct evq_item *it)
{
	uint64_t v;

	if (it->prev)
		it->prev->next = it->next;
	else
		q->head = it->next;
	if (it->next)
		it->next->prev = it->prev;
	else
		q->tail = it->prev;
	it->prev = it->next = NULL;
	it->queued = false;
	if (!q->head && read(q->efd, &v, sizeof(v)) == sizeof(v))
		q->signals++;
}

/* Queue or unqueue @it as its state and interest say; requires q->lock. */
static void evq_update_locked(struct evq *q, struct evq_item *it)
{
	bool want = evq_wanted(q, it);

	if (want && !it->queued)
		evq_push_locked(q, it);
	else if (!want && it->queued)
		evq_unlink_locked(q, it);
}

void evq_set_state(struct evq *q, struct evq_item *it, uint32_t state)
{
	pthread_mutex_lock(&q->lock);
	it->state = state;
	evq_update_locked(q, it);
	pthread_mutex_unlock(&q->lock);
}

void evq_set_interest(struct evq *q, struct evq_item *it, uint32_t interest)
{
	pthread_mutex_lock(&q->lock);
	it->interest = interest;
	evq_update_locked(q, it);
	pthread_mutex_unlock(&q->lock);
}

int evq_collect_locked(struct evq *q, struct evq_item **items, uint32_t *bits, int max)
{
	int n = 0;

	/* each taken item goes to the tail: stop at the first one seen again */
	for (struct evq_item *it = q->head, *first = NULL; it && n < max && it != first;) {
		struct evq_item *next = it->next;

		items[n] = it;
		bits[n++] = it->state & (it->interest | q->always);
		if (next) {
			/* to the tail, without the eventfd's round trip */
			if (!first)
				first = it;
			q->head = next;
			next->prev = NULL;
			it->prev = q->tail;
			it->next = NULL;
			q->tail->next = it;
			q->tail = it;
		}
		it = next;
	}
	return n;
}
