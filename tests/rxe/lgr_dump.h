/* SPDX-License-Identifier: MIT */
/*
 * What a test says when link groups outlive their connections: every link
 * group of a context with its state, references and connections, read
 * from the library's internals (a test's diagnosis, not an API). Racy by
 * nature (it reads while the progress threads run), so only for printing.
 */
#ifndef USMC_TEST_LGR_DUMP_H
#define USMC_TEST_LGR_DUMP_H

#include <stdio.h>

#include "clock.h"
#include "ctx.h"
#include "lgr.h"
#include "smcr_conn.h"

static inline bool lgr_dump_published_locked(const struct smcr_ctx *s, const struct lgr *l)
{
	for (const struct lgr *p = s->lgrs; p; p = p->next)
		if (p == l)
			return true;
	return false;
}

static inline void lgr_dump_conns(struct lgr *l)
{
	pthread_mutex_lock(&l->lock);
	for (int i = 1; i <= SMCR_MAX_CONNS; i++) {
		struct smcr_conn *sc = l->conns[i].conn;

		if (!sc)
			continue;
		fprintf(stderr,
			"  conn token %#x refs %d in_hs %d orphan %d closed %d/%d aborting %d/%d "
			"err %d tcp_fd %d watched %d orphan deadline in %ld ms\n",
			l->conns[i].token, atomic_load(&sc->refs), sc->in_hs, sc->orphan,
			sc->closed, sc->closed_sent, sc->aborting, sc->abort_sent, sc->err,
			sc->tcp_fd, sc->tcp_watched,
			sc->orphan_deadline_ms ? sc->orphan_deadline_ms - clock_now_ms() : 0);
	}
	pthread_mutex_unlock(&l->lock);
}

/* Prints every link group of @ctx's SMC-R state to stderr. */
static inline void lgr_dump(struct usmc_ctx *ctx, const char *why)
{
	struct smcr_ctx *s = &ctx->rdma;

	fprintf(stderr, "link groups (%s): %d open\n", why, atomic_load(&s->lgrs_open));
	pthread_mutex_lock(&s->lock);
	for (struct lgr *l = s->all; l; l = l->all_next) {
		const struct smcr_link *lnk = lgr_conn_link(l);

		fprintf(stderr,
			" lgr %x %s state %d published %d nconns %d refs %d idle since %ld ms "
			"thread %d qp %u peer qp %u\n",
			l->id, l->is_server ? "server" : "client", atomic_load(&l->state),
			lgr_dump_published_locked(s, l), l->nconns, atomic_load(&l->refs),
			l->idle_since_ms ? clock_now_ms() - l->idle_since_ms : -1,
			l->thread_started, lnk->qp ? lnk->qp->qp_num : 0, lnk->peer_qpn);
		lgr_dump_conns(l);
	}
	pthread_mutex_unlock(&s->lock);
}

#endif
