// SPDX-License-Identifier: MIT
/*
 * The event API's SMC-R branch on a host without a device: a usmc
 * connection whose SMC-R state is a fake (a zeroed struct smcr_conn on a
 * link group whose only link has fake CQs, and a pipe for its completion
 * channel, as tests/eng_sim.c; smcr_wr_poll() wrapped: a "completion" is
 * data for the connection, applied under its lock as a CDC's dispatch
 * does). Through the public calls, in one thread:
 *
 *   - usmc_conn_watch() attaches the link group's engine to the context's
 *     set (its kick makes the descriptor readable) and makes no readiness
 *     socketpair;
 *   - a completion makes usmc_ctx_event_fd() readable (the channel is in
 *     its epoll set), and usmc_ctx_poll() runs it in the caller's thread
 *     and reports READ with the user pointer, level-triggered, gone once
 *     the data is consumed;
 *   - WRITE goes with a full send buffer (which counts in room_waiters)
 *     and comes back with room; ERR comes unasked;
 *   - a USMC_EV_FD watch keeps the readiness socketpair, which no longer
 *     counts for the progress thread: a completion makes the context's
 *     descriptor readable, usmc_ctx_poll() runs it here, reports nothing
 *     and leaves the pair readable; back to a READ watch, it counts again;
 *   - unwatched, the engine is detached: its channel leaves the epoll set
 *     and its counters are back to nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "common/check.h"
#include "conn.h"
#include "ctx.h"
#include "lgr.h"
#include "smcr_conn.h"
#include "smcr_conn_int.h"
#include "smcr_eng.h"

#define WAIT_MS 2000

static struct ibv_context ibctx;
static struct ibv_cq rcq, scq;
static struct ibv_comp_channel chan;
static int chan_pipe[2];
static bool rcq_armed;
static int pending; /* completions queued on the fake receive CQ */
static struct smcr_conn *fake_sc;
static pthread_t poll_thread; /* who ran the last completion */

static int fake_req_notify(struct ibv_cq *cq, int solicited)
{
	(void)solicited;
	if (cq == &rcq)
		rcq_armed = true;
	return 0;
}

/* libibverbs' channel calls, for the fake channel (a byte per event) */
int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	char b;

	(void)ch;
	if (read(chan_pipe[0], &b, 1) != 1)
		return -1;
	*cq = &rcq;
	*ctx = NULL;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	(void)cq;
	(void)n;
}

/* A completion arrives: an event if the CQ was armed. */
static void push(void)
{
	pending++;
	if (rcq_armed) {
		rcq_armed = false;
		CHECK(write(chan_pipe[1], "r", 1) == 1, "channel write");
	}
}

int __wrap_smcr_wr_poll(struct smcr_link *lnk);
int __wrap_smcr_wr_poll(struct smcr_link *lnk)
{
	int n = pending;

	(void)lnk;
	if (!n)
		return 0;
	pending = 0;
	poll_thread = pthread_self();
	pthread_mutex_lock(&fake_sc->lock);
	fake_sc->rx.rx_prod += (uint64_t)n; /* a CDC's data, as smcr_cdc.c applies it */
	sc_update_ready_locked(fake_sc);
	pthread_mutex_unlock(&fake_sc->lock);
	return n;
}

static bool readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1;
}

/* Every event of @c one poll of @ctx returns (at most @ms), and its user. */
static uint32_t poll_for(struct usmc_ctx *ctx, struct usmc_conn *c, int ms, void **user)
{
	struct usmc_event ev[8];
	uint32_t bits = 0;
	int n = usmc_ctx_poll(ctx, ev, 8, ms);

	CHECK(n >= 0, "usmc_ctx_poll: %s", usmc_strerror(n));
	for (int i = 0; i < n; i++) {
		CHECK(ev[i].conn == c && !ev[i].listener, "an event of another object");
		bits |= ev[i].events;
		if (user)
			*user = ev[i].user;
	}
	return bits;
}

static void set_state(void (*change)(struct smcr_conn *))
{
	pthread_mutex_lock(&fake_sc->lock);
	change(fake_sc);
	sc_update_ready_locked(fake_sc);
	pthread_mutex_unlock(&fake_sc->lock);
}

static void consume_all(struct smcr_conn *sc)
{
	sc->rx.rx_cons = sc->rx.rx_prod;
}

static void fill_send_buffer(struct smcr_conn *sc)
{
	sc->tx_prep = sc->snd_len; /* all unsent: no room */
}

static void free_send_buffer(struct smcr_conn *sc)
{
	sc->tx_fin = sc->tx_prep; /* all sent and completed */
}

static void fail(struct smcr_conn *sc)
{
	sc->err = -ECONNRESET;
}

int main(void)
{
	struct eng_stats st = {0};
	struct smcr_link *lnk;
	struct usmc_ctx *ctx;
	struct usmc_conn *c;
	struct lgr *lgr = calloc(1, sizeof(*lgr));
	struct smcr_conn *sc = calloc(1, sizeof(*sc));
	int progress_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), efd, fd, tag;
	void *user = NULL;
	long t0;

	CHECK(lgr && sc && progress_fd >= 0, "setup");
	CHECK(!pipe2(chan_pipe, O_NONBLOCK | O_CLOEXEC), "pipe");
	/* the link group's first link: fake CQs and channel */
	lnk = &lgr->lnk[0];
	ibctx.ops.req_notify_cq = fake_req_notify;
	rcq.context = scq.context = &ibctx;
	chan.fd = chan_pipe[0];
	lnk->ch = &chan;
	lnk->rcq = &rcq;
	lnk->scq = &scq;
	lnk->up.st = &st;
	atomic_store(&lnk->state, SMCR_LNK_ACTIVE);
	CHECK(!smcr_eng_init(&lgr->eng,
			     &(struct smcr_eng_setup){.lnk = lnk, .progress_fd = progress_fd}),
	      "engine init");
	/* the connection: nothing received, an empty send buffer */
	pthread_mutex_init(&sc->lock, NULL);
	pthread_cond_init(&sc->rcond, NULL);
	pthread_cond_init(&sc->wcond, NULL);
	pthread_cond_init(&sc->user_cond, NULL);
	sc->lgr = lgr;
	sc->ev[0] = sc->ev[1] = -1;
	sc->snd_len = 4096;
	fake_sc = sc;
	CHECK(!usmc_ctx_create(&ctx), "usmc_ctx_create");
	c = conn_alloc(ctx, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), &ctx->opts, true);
	CHECK(c && c->fd >= 0, "conn_alloc");
	conn_set_mode(c, USMC_MODE_SMCR, USMC_REASON_NONE, false);
	c->smcr = sc;
	efd = usmc_ctx_event_fd(ctx);
	CHECK(efd >= 0, "usmc_ctx_event_fd");

	/* watched: attached and kicked, no pair */
	CHECK(!usmc_conn_watch(c, USMC_EV_READ, &tag), "usmc_conn_watch");
	CHECK(atomic_load(&lgr->eng.looped), "the engine is not attached to the set");
	CHECK(readable(efd), "the attach did not kick the set");
	CHECK(!poll_for(ctx, c, 0, NULL), "an event with nothing to read");
	CHECK(rcq_armed, "the poll's pass left the receive CQ disarmed");
	CHECK(!readable(efd), "the descriptor readable with nothing to report");
	CHECK(sc->ev[0] < 0, "a readiness pair was made");
	CHECK(atomic_load(&lgr->eng.fd_users) == 0, "a watch counts as a readiness descriptor");

	/* a completion: the descriptor wakes, the poll runs it here */
	push();
	CHECK(readable(efd), "a completion did not make the descriptor readable");
	t0 = clock_now_ms();
	CHECK(poll_for(ctx, c, WAIT_MS, &user) == USMC_EV_READ, "no READ after a completion");
	CHECK(clock_now_ms() - t0 < WAIT_MS / 2, "READ came late");
	CHECK(user == &tag, "the user pointer");
	CHECK(pthread_equal(poll_thread, pthread_self()), "the completion ran in another thread");
	CHECK(poll_for(ctx, c, 0, NULL) == USMC_EV_READ, "READ is level-triggered");
	set_state(consume_all);
	CHECK(!poll_for(ctx, c, 0, NULL), "READ after the data was consumed");
	CHECK(!readable(efd), "the descriptor readable after the data was consumed");

	/* WRITE: none while the send buffer is full, back with room */
	CHECK(!usmc_conn_watch(c, USMC_EV_READ | USMC_EV_WRITE, &tag), "watch WRITE");
	CHECK(poll_for(ctx, c, 0, NULL) == USMC_EV_WRITE, "no WRITE with room");
	set_state(fill_send_buffer);
	CHECK(atomic_load(&lgr->eng.room_waiters) == 1, "a full send buffer not in room_waiters");
	CHECK(!poll_for(ctx, c, 0, NULL), "WRITE with the send buffer full");
	set_state(free_send_buffer);
	CHECK(atomic_load(&lgr->eng.room_waiters) == 0, "room, still in room_waiters");
	CHECK(poll_for(ctx, c, 0, NULL) == USMC_EV_WRITE, "no WRITE once there is room");

	/* USMC_EV_FD: readiness stays on the pair, the poll runs the completions */
	CHECK(usmc_conn_watch(c, USMC_EV_FD | USMC_EV_READ, &tag) == -EINVAL, "FD with READ");
	CHECK(!usmc_conn_watch(c, USMC_EV_FD, &tag), "watch FD");
	fd = usmc_conn_fd(c);
	CHECK(fd >= 0 && fd == sc->ev[0], "no readiness pair for an FD watch");
	CHECK(atomic_load(&lgr->eng.looped), "an FD watch left the engine detached");
	CHECK(atomic_load(&lgr->eng.fd_users) == 0, "the pair of an FD watch needs the thread");
	CHECK(!readable(fd), "the pair readable with nothing to read");
	push();
	CHECK(readable(efd), "a completion did not make the descriptor readable (FD)");
	CHECK(!poll_for(ctx, c, 0, NULL), "an event for an FD watch");
	CHECK(readable(fd), "the poll did not make the pair readable");
	CHECK(pthread_equal(poll_thread, pthread_self()), "the completion ran in another thread");
	set_state(consume_all);
	CHECK(!readable(fd), "the pair readable after the data was consumed");

	/* from FD to READ: the pair needs the thread again, the set still runs them */
	CHECK(!usmc_conn_watch(c, USMC_EV_READ, &tag), "watch READ after FD");
	CHECK(atomic_load(&lgr->eng.fd_users) == 1, "the pair does not count after the FD watch");
	CHECK(atomic_load(&lgr->eng.looped), "detached after FD -> READ");

	/* ERR, unasked */
	set_state(fail);
	CHECK(poll_for(ctx, c, 0, NULL) == (USMC_EV_READ | USMC_EV_ERR), "no READ|ERR at an error");

	/* unwatched: detached, the channel out of the epoll set */
	CHECK(!usmc_conn_watch(c, 0, NULL), "unwatch");
	CHECK(!atomic_load(&lgr->eng.looped) && lgr->eng.loop_reg[0] < 0, "still attached");
	CHECK(epoll_ctl(efd, EPOLL_CTL_DEL, chan_pipe[0], NULL) && errno == ENOENT,
	      "the channel is still in the epoll set");
	rcq_armed = true;
	push();
	CHECK(!readable(efd), "a completion of a detached engine woke the set");
	CHECK(!poll_for(ctx, c, 0, NULL), "an event after the watch ended");

	c->smcr = NULL; /* the fake is ours to free, its pair too */
	close(sc->ev[0]);
	close(sc->ev[1]);
	CHECK(!usmc_close(c), "usmc_close");
	CHECK(!usmc_ctx_destroy(ctx), "usmc_ctx_destroy");
	smcr_eng_fini(&lgr->eng);
	pthread_mutex_destroy(&sc->lock);
	free(sc);
	free(lgr);
	printf("test_event_smcr_fake: an SMC-R watch through the public calls, its completions "
	       "run by usmc_ctx_poll()\n");
	return 0;
}
