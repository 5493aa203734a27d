// SPDX-License-Identifier: MIT
/*
 * The simulated link of eng_sim.h: the verbs calls smcr_eng.c makes
 * (ibv_req_notify_cq() through the CQ's context, ibv_get_cq_event(),
 * ibv_ack_cq_events()) and the poll it calls (smcr_wr_poll()).
 */
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "common/check.h"
#include "eng_sim.h"
#include "smcr_wr.h"

#define SIM_RING  4096 /* completions queued at most per CQ */
#define SIM_BATCH 16   /* completions one poll takes, as smcr_wr_poll() */

struct smcr_link sim_lnk;
struct eng_stats sim_stats;

struct sim_queue {
	int who[SIM_RING];
	unsigned long head, tail;
	bool armed;
};

static struct {
	pthread_mutex_t mu; /* protects q */
	struct sim_queue q[2];
	int pipe[2]; /* the channel: one byte per event, 'r' or 's' */
	struct sim_hooks h;
} sim = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct ibv_cq rcq, scq;
static struct ibv_context ibctx;
static struct ibv_comp_channel chan;

static enum sim_cq cq_kind(const struct ibv_cq *cq)
{
	return cq == &rcq ? SIM_RCQ : SIM_SCQ;
}

static int sim_req_notify(struct ibv_cq *cq, int solicited)
{
	enum sim_cq k = cq_kind(cq);

	(void)solicited;
	if (sim.h.arming)
		sim.h.arming(k);
	pthread_mutex_lock(&sim.mu);
	sim.q[k].armed = true;
	pthread_mutex_unlock(&sim.mu);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	char b;

	(void)ch;
	if (read(sim.pipe[0], &b, 1) != 1)
		return -1;
	*cq = b == 'r' ? &rcq : &scq;
	*ctx = NULL;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	(void)cq;
	(void)n;
}

void sim_push(enum sim_cq k, int who)
{
	struct sim_queue *q = &sim.q[k];
	bool ev;

	pthread_mutex_lock(&sim.mu);
	CHECK(q->tail - q->head < SIM_RING, "simulated CQ overflow");
	q->who[q->tail++ % SIM_RING] = who;
	ev = q->armed;
	q->armed = false;
	pthread_mutex_unlock(&sim.mu);
	if (ev)
		CHECK(write(sim.pipe[1], k == SIM_RCQ ? "r" : "s", 1) == 1, "channel write");
}

int sim_queued(void)
{
	int n;

	pthread_mutex_lock(&sim.mu);
	n = (int)(sim.q[0].tail - sim.q[0].head + sim.q[1].tail - sim.q[1].head);
	pthread_mutex_unlock(&sim.mu);
	return n;
}

int sim_channel_fd(void)
{
	return sim.pipe[0];
}

/* One completion off either CQ, the receive CQ first; false if none. */
static bool sim_pop(enum sim_cq *k, int *who)
{
	bool got = false;

	pthread_mutex_lock(&sim.mu);
	for (int i = 0; i < 2 && !got; i++) {
		struct sim_queue *q = &sim.q[i];

		if (q->head != q->tail) {
			*k = (enum sim_cq)i;
			*who = q->who[q->head++ % SIM_RING];
			got = true;
		}
	}
	pthread_mutex_unlock(&sim.mu);
	return got;
}

/* The token holder's poll: completions handed to the test's dispatch. */
int smcr_wr_poll(struct smcr_link *l)
{
	enum sim_cq k;
	int n = 0, who;

	(void)l;
	while (n < SIM_BATCH && sim_pop(&k, &who)) {
		sim.h.dispatch(k, who);
		n++;
	}
	eng_count(&sim_stats, ENG_CQES, (uint64_t)n);
	return n;
}

void sim_init(const struct sim_hooks *h)
{
	sim.h = *h;
	CHECK(!pipe2(sim.pipe, O_NONBLOCK | O_CLOEXEC), "pipe");
	ibctx.ops.req_notify_cq = sim_req_notify;
	rcq.context = scq.context = &ibctx;
	chan.fd = sim.pipe[0];
	sim_lnk.rcq = &rcq;
	sim_lnk.scq = &scq;
	sim_lnk.ch = &chan;
	sim_lnk.up.st = &sim_stats;
	atomic_store(&sim_lnk.state, SMCR_LNK_ACTIVE);
}
