// SPDX-License-Identifier: MIT
/*
 * The link group's view of its connections (lgr.h struct lgr_conn_ops):
 * what it calls, each handed to its mechanism (smcr_conn_int.h), and the
 * two calls that serve several: the progress thread's tick and the answer
 * to an LLC barrier.
 */
#include "clock.h"
#include "smcr_conn.h"
#include "smcr_conn_int.h"

/* The progress thread's tick: each connection's deadlines and due work,
 * one pass over the table for all of them, and none while no connection
 * has any (the link group's counters). */
static void sc_tick(struct lgr *lgr)
{
	struct smcr_conn *list[SMCR_MAX_CONNS];
	bool eof = atomic_exchange(&lgr->tcp_eof_seen, false), again = false;
	long now = clock_now_ms();
	int n;

	if (!eof && !atomic_load(&lgr->orphans) && !atomic_load(&lgr->tcp_unwatched) &&
	    !atomic_load(&lgr->eof_holds) && !atomic_load(&lgr->failover_watches))
		return;
	n = lgr_conns_get(lgr, list);
	for (int i = 0; i < n; i++) {
		struct smcr_conn *sc = list[i];
		bool reap;

		pthread_mutex_lock(&sc->lock);
		sc_watch_due_locked(sc, now);
		if (eof && sc_eof_check_locked(sc, now))
			again = true;
		reap = sc_orphan_expired_locked(sc, now);
		sc_orphan_probe_locked(sc, now);
		sc_eof_expire_locked(sc, now); /* an event loop's reader waits for it */
		sc_failover_check_locked(sc, now);
		pthread_mutex_unlock(&sc->lock);
		if (reap)
			lgr_conn_del(lgr, sc->token);
		smcr_conn_put(sc);
	}
	if (again)
		atomic_store(&lgr->tcp_eof_seen, true);
}

/* The answer to LLC barrier @gen came: for a hang-up that sent one
 * (sc_eof_check_locked()) and for a held EOF's question
 * (sc_eof_answer_locked()). */
static void sc_barrier(struct lgr *lgr, uint32_t gen)
{
	struct smcr_conn *list[SMCR_MAX_CONNS];
	int n = lgr_conns_get(lgr, list);

	for (int i = 0; i < n; i++) {
		struct smcr_conn *sc = list[i];

		pthread_mutex_lock(&sc->lock);
		sc_hup_answer_locked(sc, gen);
		sc_eof_answer_locked(sc, gen);
		pthread_mutex_unlock(&sc->lock);
		smcr_conn_put(sc);
	}
}

const struct lgr_conn_ops smcr_conn_lgr_ops = {
	.get = sc_get,
	.put = smcr_conn_put,
	.cdc_rx = sc_cdc_rx,
	.tx_done = sc_tx_done,
	.kick_pending = sc_kick_pending,
	.barrier = sc_barrier,
	.fail = sc_lgr_dead,
	.tcp_hup = sc_tcp_hup,
	.tick = sc_tick,
	.switch_link = sc_switch_link,
};
