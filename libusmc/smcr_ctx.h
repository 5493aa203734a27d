/* SPDX-License-Identifier: MIT */
/*
 * A context's SMC-R state: its system identifier, its UEID, its link groups
 * and a cache of address -> RoCE port lookups. Owned by struct usmc_ctx
 * (ctx.h); the SMC-R files see only this.
 */
#ifndef USMC_SMCR_CTX_H
#define USMC_SMCR_CTX_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bufpool.h"
#include "eng_stats.h"
#include "smcr_dev.h"

#define SMCR_SYSTEM_ID_LEN 8
#define SMCR_UEID_LEN	   32
#define SMCR_DEFAULT_UEID  "LIBUSMC" /* blank padded to 32 bytes */
#define SMCR_DEV_CACHE	   8

/*
 * What happens to the links of the context's link groups, counted for
 * usmc_ctx_stats() (smcr_ctx_count_link_event()).
 */
enum smcr_link_event {
	/* a link beyond its link group's first became ACTIVE (ADD_LINK,
	 * net/smc/smc_llc.c smc_llc_process_cli/srv_add_link()): whoever
	 * activates it counts it, never the first contact's link */
	SMCR_LINK_ADDED,
	/* an ACTIVE link went down on an error of its own (a failed work
	 * request, a stall, its port's or QP's async event, an unanswered
	 * TEST_LINK, the peer's DELETE_LINK of it): lgr.c lgr_link_error();
	 * not the links an orderly end takes down */
	SMCR_LINK_FAILED,
	/* a connection moved from a failed link to another of its link group
	 * (net/smc/smc_core.c smc_switch_conns()): counted per connection */
	SMCR_LINK_FAILOVER,
	SMCR_LINK_EVENTS
};

/* The two roles a link group is created in. */
enum smcr_role { SMCR_ROLE_CLIENT = 0, SMCR_ROLE_SERVER = 1 };

struct lgr;
struct lgr_pending;
struct usmc_logger;

/*
 * Told when something a parked handshake may be waiting for happened in
 * the context (smcr_ctx_hs_event()): a first contact ended (lgr_unclaim()),
 * an LLC flow ended or its answer came, a link group died (smcr_llc.c). A
 * listener retries its waiting handshakes then, not on a timer. @moved runs
 * with watch_lock held, so it must take no lock (a listener writes its
 * eventfd).
 */
struct smcr_hs_watch {
	void (*moved)(struct smcr_hs_watch *w);
	struct smcr_hs_watch *next; /* with the context's watch_lock */
};

struct smcr_ctx {
	pthread_mutex_t lock; /* protects lgrs, all, pending, and each lgr's next, all_next */
	struct lgr *lgrs;     /* published link groups (lgr_publish) */
	struct lgr *all;      /* every link group from lgr_create() to lgr_free() */
	/* engine counters of the link groups already freed (with lock) */
	struct eng_stats retired;
	/*
	 * First contacts in progress, one per peer (lgr_claim): a second
	 * handshake with the same peer waits for it instead of creating a
	 * second link group; handshakes with other peers never wait. (Linux
	 * serialises all first contacts of a role with smc_server_lgr_pending
	 * and smc_client_lgr_pending in net/smc/af_smc.c.)
	 */
	struct lgr_pending *pending;
	/* with lock: a link group was published, a first contact ended, or
	 * lgrs_open hit 0 */
	pthread_cond_t lgrs_cond;
	/* handshake events so far (smcr_ctx_hs_event()) and who hears of them */
	atomic_uint hs_events;
	pthread_mutex_t watch_lock; /* protects hs_watch; a leaf */
	struct smcr_hs_watch *hs_watch;
	uint8_t system_id[SMCR_SYSTEM_ID_LEN]; /* set once at init */
	struct usmc_logger *log;	       /* the context's (log.h), set once; may be NULL */

	pthread_mutex_t ueid_lock;   /* protects ueid */
	uint8_t ueid[SMCR_UEID_LEN]; /* blank padded */

	atomic_uint token_seq; /* generation part of the next alert token */
	atomic_uint lgr_seq;   /* the last link group id handed out */
	atomic_uint_least64_t lgrs_created;
	atomic_int lgrs_open; /* created and not yet freed */
	/* with lock: of those, reclaimed for a first contact (lgr_find.c) and
	 * not yet freed by their progress thread: their places are taken */
	int lgrs_leaving;
	atomic_uint_least64_t lgrs_reclaimed; /* idle ones reclaimed at a full cap */
	/* LLC messages over all link groups (smcr_llc.c): usmc_ctx_stats() */
	atomic_uint_least64_t llc_sent, llc_received;
	/* by enum smcr_link_event (smcr_ctx_count_link_event()) */
	atomic_uint_least64_t link_events[SMCR_LINK_EVENTS];
	/* the registered memory of all its link groups' pools
	 * (USMC_OPT_REG_MEM_MAX; smcr_ctx_pool_config()) */
	struct bufpool_budget regmem;

	/* last device lookups (address -> port/GID), so that a PROPOSAL leaves
	 * right after the connect instead of after a GID table scan */
	pthread_mutex_t dev_lock; /* protects dev_addr, dev_cache, dev_n, devs */
	struct in_addr dev_addr[SMCR_DEV_CACHE];
	struct smcr_dev dev_cache[SMCR_DEV_CACHE];
	int dev_n;
	struct smcr_dev_set devs; /* the ports it may use (usmc_ctx_set_devices()) */
};

/* Fills the system id, the UEID (USMC_UEID in @env, env.h, else
 * SMCR_DEFAULT_UEID) and the ports it may use (USMC_DEVICES, else all). */
int smcr_ctx_init(struct smcr_ctx *s, const char *const *env);
/* Frees every link group, then the context's own state. */
void smcr_ctx_fini(struct smcr_ctx *s);

/*
 * smcr_ctx_hs_events() - how many handshake events @s had so far: a
 * handshake that reads it before it looks at what it waits for can tell
 * later whether anything moved since.
 * smcr_ctx_hs_event() - count one, then tell every watcher. Any thread,
 * any lock held but watch_lock.
 * smcr_ctx_hs_watch() - @w->moved is called after each event (after the
 * count moved on) until smcr_ctx_hs_unwatch(), which returns once no call
 * is running.
 */
unsigned int smcr_ctx_hs_events(struct smcr_ctx *s);
void smcr_ctx_hs_event(struct smcr_ctx *s);
void smcr_ctx_hs_watch(struct smcr_ctx *s, struct smcr_hs_watch *w);
void smcr_ctx_hs_unwatch(struct smcr_ctx *s, struct smcr_hs_watch *w);

/*
 * smcr_ctx_regmem_apply() - the budget of registered memory from
 * USMC_OPT_REG_MEM_MAX @opt (0: RLIMIT_MEMLOCK's soft limit, unless the
 * kernel pins without one; -1: none); free buffers beyond a lowered budget
 * are deregistered at once.
 */
void smcr_ctx_regmem_apply(struct smcr_ctx *s, long opt);
/* The budget the link group @lgr's pools (@cfg) count against, and who
 * tells its peer about an RMB a shrink takes (DELETE_RKEY). */
void smcr_ctx_pool_config(struct smcr_ctx *s, struct lgr *lgr, struct bufpool_config *cfg);

/*
 * smcr_ctx_count_link_event() - @n more events @ev of the links of @s's
 * link groups (usmc_ctx_stats() links_added, link_failures, failovers).
 * Any thread, any lock held: one relaxed atomic add.
 * smcr_ctx_link_events() - how many there were.
 */
void smcr_ctx_count_link_event(struct smcr_ctx *s, enum smcr_link_event ev, unsigned int n);
uint64_t smcr_ctx_link_events(const struct smcr_ctx *s, enum smcr_link_event ev);

/* The engine counters of every link group @s ever had, added into @out. */
void smcr_ctx_engine_stats(struct smcr_ctx *s, struct usmc_engine_stats *out);

/* smcr_dev_lookup() - smcr_dev_find() among the context's ports, through
 * its cache. */
int smcr_dev_lookup(struct smcr_ctx *s, const struct in_addr *addr, struct smcr_dev *dev);
/* smcr_ctx_set_devices() - the ports @s may use from now on ("name[:port],...",
 * "" all); drops the lookups cached. -EINVAL for a malformed list.
 * smcr_ctx_devices() - a copy of them. */
int smcr_ctx_set_devices(struct smcr_ctx *s, const char *list);
void smcr_ctx_devices(struct smcr_ctx *s, struct smcr_dev_set *out);

/* smcr_ctx_ueid() - a copy of the context's UEID (blank padded). */
void smcr_ctx_ueid(struct smcr_ctx *s, uint8_t out[SMCR_UEID_LEN]);
/* smcr_ctx_set_ueid() - validate, pad and store; -EINVAL if malformed. */
int smcr_ctx_set_ueid(struct smcr_ctx *s, const char *ueid);
/* smcr_ueid_pad() - validate and blank-pad a UEID (A-Z 0-9 . -). */
int smcr_ueid_pad(const char *in, uint8_t out[SMCR_UEID_LEN]);

#endif
