// SPDX-License-Identifier: MIT
/*
 * A link group's progress thread (lgr.h): it runs the completions of
 * every link of the group while it holds the engine's token (smcr_eng.h:
 * somebody needs them run without waiting for them), drains the CQs at
 * each tick if nobody holds it, sleeps on one epoll set (the links'
 * completion channels while it holds the token, each link's verbs context
 * for async events, its wake-up eventfd, the connections' TCP sockets),
 * and runs the timers. Linux spreads the same work over softirq CQ
 * handlers and work queues (net/smc/smc_wr.c, smc_core.c); here it is one
 * thread per link group.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "lgr.h"
#include "lgr_int.h"
#include "log.h"
#include "thread_name.h"

#define LGR_TICK_MS 250 /* timer resolution of the progress thread */
/* A busy-polling progress thread looks at its epoll set this often. */
#define LGR_BUSY_LOOK_MS 10
#define LGR_EP_EVENTS	 16 /* events one epoll_wait() takes */
/* What an epoll event is about: a kind, and the link slot or the token. */
#define LGR_EP_KIND_MASK (0xffull << 32)
#define LGR_EP_CH	 (1ull << 32) /* | link slot: its completion channel */
#define LGR_EP_ASYNC	 (2ull << 32) /* | link slot: its verbs context's async events */
#define LGR_EP_STOP	 (3ull << 32)
#define LGR_EP_TCP	 (1ull << 40) /* | connection token */

int lgr_progress_init(struct lgr *lgr)
{
	struct smcr_eng_setup es = {.lnk = &lgr->lnk[LGR_FIRST_LINK],
				    .spin = lgr->cfg.spin,
				    .busy_poll = lgr->cfg.busy_poll};
	int rc, erc;

	lgr->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	lgr->ep = epoll_create1(EPOLL_CLOEXEC);
	rc = lgr->stop_fd < 0 || lgr->ep < 0 ? -errno : 0;
	es.progress_fd = lgr->stop_fd;
	erc = smcr_eng_init(&lgr->eng, &es);
	return rc ? rc : erc;
}

/*
 * The verbs context's async events of the link in @slot (each link has
 * its own context, so each sees its port's events). A port that goes
 * down fails the link at once, as Linux does (net/smc/smc_ib.c
 * smc_ib_port_event_work() -> smc_core.c smcr_port_err()): otherwise a
 * link with nothing in flight would not notice a peer that ended its side
 * while the link was down (the peer's TCP reset may be lost with the
 * link) before TEST_LINK.
 */
static void lgr_async_events(struct lgr *lgr, int slot)
{
	struct smcr_link *lnk = &lgr->lnk[slot];
	struct ibv_async_event e;

	while (!ibv_get_async_event(lnk->ib, &e)) {
		bool fatal = smcr_link_async_fatal(lnk, &e);

		eng_count(&lgr->st, ENG_SYSCALLS, 1);
		usmc_log(lgr->sctx->log, fatal ? USMC_LOG_INFO : USMC_LOG_DEBUG,
			 "link group %x link %u: async event %s", lgr->id, lnk->link_num,
			 ibv_event_type_str(e.event_type));
		ibv_ack_async_event(&e);
		if (fatal)
			lgr_link_error(lnk, -ECONNABORTED, false);
	}
}

/* The events @ev[@n] of the progress thread's epoll set (@owner: it holds
 * the token, and the channels are in the set). */
static void lgr_handle_events(struct lgr *lgr, const struct epoll_event *ev, int n, bool owner)
{
	uint64_t v;

	for (int i = 0; i < n; i++) {
		uint64_t what = ev[i].data.u64;
		int slot = (int)(what & 0xff);

		if (what & LGR_EP_TCP) {
			lgr->ops->tcp_hup(lgr, (uint32_t)what);
		} else if ((what & LGR_EP_KIND_MASK) == LGR_EP_CH && owner) {
			smcr_eng_get_event(&lgr->eng, slot);
		} else if (what == LGR_EP_STOP && read(lgr->stop_fd, &v, sizeof(v)) > 0) {
			eng_count(&lgr->st, ENG_SYSCALLS, 1);
		} else if ((what & LGR_EP_KIND_MASK) == LGR_EP_ASYNC) {
			lgr_async_events(lgr, slot);
		}
	}
}

/*
 * Sleep until an event or the tick: the completion channels while the
 * progress thread holds the engine's token (lgr_ep_channels()), the
 * stop/kick eventfd, the TCP sockets, the verbs contexts' async events.
 */
static void lgr_wait_event(struct lgr *lgr, bool owner)
{
	struct epoll_event ev[LGR_EP_EVENTS];
	int n = epoll_wait(lgr->ep, ev, LGR_EP_EVENTS, LGR_TICK_MS);

	eng_count(&lgr->st, ENG_WAKEUPS, 1);
	eng_count(&lgr->st, ENG_SYSCALLS, 1);
	if (owner)
		eng_count(&lgr->st, ENG_CH_SLEEPS, 1);
	lgr_handle_events(lgr, ev, n, owner);
}

/*
 * A busy-polling owner never sleeps in epoll_wait(): it looks at the set
 * without waiting every LGR_BUSY_LOOK_MS instead, so a peer's TCP hang-up
 * and the port's events reach it as they reach a thread that sleeps there.
 * (Otherwise a readiness descriptor, which keeps the token with the
 * progress thread, left a killed peer to TEST_LINK.) The channels are not
 * in the set then: the owner polls the CQs itself. *@next_ms: when to look
 * next.
 */
static void lgr_busy_look(struct lgr *lgr, long *next_ms)
{
	struct epoll_event ev[LGR_EP_EVENTS];
	long now = clock_now_ms();
	int n;

	if (now < *next_ms)
		return;
	*next_ms = now + LGR_BUSY_LOOK_MS;
	n = epoll_wait(lgr->ep, ev, LGR_EP_EVENTS, 0);
	eng_count(&lgr->st, ENG_SYSCALLS, 1);
	lgr_handle_events(lgr, ev, n, false);
}

/*
 * The epoll set follows the engine's links: a link the engine runs since
 * the last look (smcr_eng_link_add()) has its verbs context's async events
 * added (its channel comes with the token: lgr_ep_channels()); one it no
 * longer runs has them removed, before its objects are destroyed.
 */
static void lgr_ep_links(struct lgr *lgr)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		struct smcr_link *lnk = smcr_eng_link(&lgr->eng, i);
		struct smcr_link *had = lgr->ep_links[i];
		struct epoll_event async = {.events = EPOLLIN,
					    .data.u64 = LGR_EP_ASYNC | (uint64_t)i};

		if (lnk == had)
			continue;
		lgr_ep_link_del(lgr, i);
		if (!lnk)
			continue;
		if (fcntl(lnk->ib->async_fd, F_SETFL,
			  fcntl(lnk->ib->async_fd, F_GETFL) | O_NONBLOCK) ||
		    epoll_ctl(lgr->ep, EPOLL_CTL_ADD, lnk->ib->async_fd, &async)) {
			/* no events from it: it cannot be run on its own */
			usmc_log(lgr->sctx->log, USMC_LOG_INFO,
				 "link group %x link %u: cannot watch its events: %s", lgr->id,
				 lnk->link_num, log_errname(-errno));
			lgr_link_error(lnk, -errno, false);
			continue;
		}
		lgr->ep_links[i] = lnk;
	}
}

void lgr_ep_link_del(struct lgr *lgr, int slot)
{
	struct smcr_link *had = lgr->ep_links[slot];

	if (!had)
		return;
	if (lgr->ch_watched[slot])
		epoll_ctl(lgr->ep, EPOLL_CTL_DEL, had->ch->fd, NULL);
	epoll_ctl(lgr->ep, EPOLL_CTL_DEL, had->ib->async_fd, NULL);
	lgr->ep_links[slot] = NULL;
	lgr->ch_watched[slot] = false;
}

/*
 * The channels in the progress thread's epoll set only while it holds the
 * token: an application owner (or an event loop) reads them otherwise.
 * Out of the set, not in it with no events: epoll watches EPOLLERR and
 * EPOLLHUP whatever it is asked, and the channel's wake-up carries no
 * events to tell them apart (ib_uverbs wakes its queue without a key), so
 * each completion would wake this thread inside epoll_wait() for nothing.
 * Level-triggered: the event read after each report clears it, so the
 * registration changes only when the token does, not once per event.
 */
static void lgr_ep_channels(struct lgr *lgr, bool want)
{
	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		struct smcr_link *lnk = lgr->ep_links[i];
		struct epoll_event ch = {.events = EPOLLIN, .data.u64 = LGR_EP_CH | (uint64_t)i};

		if (!lnk || lgr->ch_watched[i] == want)
			continue;
		eng_count(&lgr->st, ENG_SYSCALLS, 1);
		if (epoll_ctl(lgr->ep, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, lnk->ch->fd, &ch)) {
			usmc_log(lgr->sctx->log, USMC_LOG_INFO,
				 "link group %x link %u: cannot watch its channel: %s", lgr->id,
				 lnk->link_num, log_errname(-errno));
			lgr_link_error(lnk, -errno, false);
			continue;
		}
		lgr->ch_watched[i] = want;
	}
}

int lgr_watch_tcp(struct lgr *lgr, uint32_t token, int fd)
{
	/* one-shot: a hang-up is reported once, then the socket is left alone */
	struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT,
				 .data.u64 = LGR_EP_TCP | token};

	return epoll_ctl(lgr->ep, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

void lgr_unwatch_tcp(struct lgr *lgr, int fd)
{
	epoll_ctl(lgr->ep, EPOLL_CTL_DEL, fd, NULL);
}

/* Timers; true if the link group unlinked itself for the thread to free it. */
static bool lgr_tick(struct lgr *lgr)
{
	long now = clock_now_ms();

	for (int i = 0; i < SMCR_LINKS_MAX; i++) {
		struct smcr_link *lnk = &lgr->lnk[i];

		if (atomic_load(&lnk->state) == SMCR_LNK_ACTIVE &&
		    atomic_load(&lgr->state) == LGR_ACTIVE && smcr_wr_stalled(lnk, now)) {
			usmc_log(lgr->sctx->log, USMC_LOG_INFO,
				 "link group %x: link %u: its sends completed nothing for %d ms",
				 lgr->id, lnk->link_num, SMCR_SQ_STALL_MS);
			lgr_link_error(lnk, -ETIMEDOUT, false);
		}
	}
	smcr_llc_tick(lgr, now);
	smcr_llc_add_link_tick(lgr, now);
	lgr->ops->tick(lgr);
	return lgr_idle_unlink(lgr);
}

static void *lgr_progress(void *arg)
{
	struct lgr *lgr = arg;
	long next_tick = 0, next_look = 0;
	int64_t last_yield_ns = 0;

	thread_name_set(pthread_self(), "usmc-lgr/%x", lgr->id);
	while (!atomic_load(&lgr->stop)) {
		bool tick = clock_now_ms() >= next_tick;
		bool owner = smcr_eng_progress_take(&lgr->eng, tick);
		int n;

		if (owner)
			lgr_links_reap(lgr); /* nobody else polls them now */
		lgr_ep_links(lgr);
		n = owner ? smcr_eng_drain(&lgr->eng) : 0;
		if (tick) {
			if (lgr_tick(lgr)) {
				/* free ourselves: nobody can reach this LGR any more */
				if (owner)
					smcr_eng_progress_release(&lgr->eng, true);
				pthread_detach(pthread_self());
				lgr->thread_started = false;
				lgr_free(lgr);
				return NULL;
			}
			next_tick = clock_now_ms() + LGR_TICK_MS;
		}
		/* an application thread waits, or nobody needs us: give it up */
		if (owner && smcr_eng_progress_release(&lgr->eng, false))
			owner = false;
		if (owner) {
			if (lgr->cfg.busy_poll)
				lgr_busy_look(lgr, &next_look);
			if (n)
				continue;
			if (lgr->cfg.busy_poll) {
				smcr_eng_progress_busy_idle(&lgr->eng, &last_yield_ns);
				continue;
			}
			/* arm, then drain once more so no completion slips between */
			smcr_eng_progress_arm(&lgr->eng);
			if (smcr_eng_drain(&lgr->eng))
				continue;
		}
		lgr_ep_channels(lgr, owner);
		lgr_wait_event(lgr, owner);
	}
	return NULL;
}

int lgr_start(struct lgr *lgr)
{
	struct epoll_event stop = {.events = EPOLLIN, .data.u64 = LGR_EP_STOP};
	int rc;

	if (epoll_ctl(lgr->ep, EPOLL_CTL_ADD, lgr->stop_fd, &stop))
		return -errno;
	/* the first link's events are watched from the start (an error there
	 * is the caller's, not the thread's) */
	lgr_ep_links(lgr);
	if (!lgr->ep_links[LGR_FIRST_LINK])
		return -EIO;
	rc = pthread_create(&lgr->thread, NULL, lgr_progress, lgr);
	if (rc)
		return -rc;
	lgr->thread_started = true;
	return 0;
}

void lgr_stop_thread(struct lgr *lgr)
{
	uint64_t one = 1;

	if (!lgr->thread_started)
		return;
	atomic_store(&lgr->stop, true);
	if (write(lgr->stop_fd, &one, sizeof(one)) < 0) {
		/* the tick ends the wait anyway */
	}
	pthread_join(lgr->thread, NULL);
	lgr->thread_started = false;
}
