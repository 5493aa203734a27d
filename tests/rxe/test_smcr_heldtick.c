// SPDX-License-Identifier: MIT
/*
 * A held EOF that the progress thread's tick gives must reach a reader that
 * holds the engine's token: that reader sleeps on the completion channel,
 * not on its condition, and only a kick wakes it before its own deadline.
 *
 * The hostile peer (hostile_peer.c) plays a Linux peer that closed while
 * blocked on the server's window and has nothing more to write:
 *   1. it writes a little; the server's reader, alone on its link group,
 *      reads it and blocks in usmc_recv(), holding the token, asleep on the
 *      channel until the one-second deadline of a reader with nothing held;
 *   2. 50 ms later it sends PEER_CONN_CLOSED with write_blocked and no new
 *      data: the server holds EOF, asks for the rest (CONS_CURS_UPD_REQ and
 *      an LLC barrier behind it) and sleeps again;
 *   3. it answers the barrier at once and writes nothing: EOF may be given
 *      SMCR_EOF_SETTLE_MS (100 ms) after the question, which the progress
 *      thread's tick (every 250 ms) does.
 * The reader must see EOF within HELD_EOF_MAX_MS of the question: the settle
 * time, one tick and slack. A reader the tick does not kick sleeps on to its
 * deadline, about 950 ms after the question.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "hostile_peer.h"
#include "smcr_common.h"

#define HELD_DATA	  1000 /* bytes the peer writes before its close */
#define HELD_ASLEEP_MS	  50   /* the reader sleeps this long before the close */
#define HELD_EOF_MAX_MS	  700  /* the question to EOF: 100 ms settle + 250 ms tick + slack */
#define HELD_WAIT_MS	  4000 /* for each step of the peer's */
#define HELD_DESTROY_WAIT 10.0 /* s: the context's link group may still be going */

static struct usmc_ctx *cs;
static struct usmc_conn *srv;
static atomic_ulong got;	 /* bytes the server's reader read */
static _Atomic double eof_at;	 /* when it read EOF (mono_s()), 0 before */
static atomic_int reader_rc = 1; /* its last result: 0 EOF, < 0 an error */

static void *reader(void *arg)
{
	uint8_t buf[4096];

	(void)arg;
	for (;;) {
		ssize_t n = usmc_recv(srv, buf, sizeof(buf), 0);

		if (n <= 0) {
			if (!n)
				atomic_store(&eof_at, mono_s());
			atomic_store(&reader_rc, (int)n);
			return NULL;
		}
		atomic_fetch_add(&got, (unsigned long)n);
	}
}

/* Poll the peer's link (answering what it asks) until @done or @ms. */
static bool poll_until(struct hp_link *lk, bool (*done)(void *), void *arg, int ms)
{
	double until = mono_s() + ms / 1e3;

	while (!done(arg) && mono_s() < until)
		hp_poll(lk, 5);
	return done(arg);
}

static bool read_all_data(void *arg)
{
	(void)arg;
	return atomic_load(&got) == HELD_DATA;
}

struct question {
	struct hp_conn *x;
	unsigned testlinks_before;
};

/* The server asked for the rest and its barrier (a TEST_LINK) came. */
static bool asked(void *arg)
{
	struct question *q = arg;

	return q->x->upd_reqs && q->x->lk->testlink_reqs > q->testlinks_before;
}

static bool reader_done(void *arg)
{
	(void)arg;
	return atomic_load(&reader_rc) <= 0;
}

static void destroy_server(struct usmc_listener *lst)
{
	double t0 = mono_s();
	int rc;

	CHECK(!usmc_listener_close(lst), "listener close");
	while ((rc = usmc_ctx_destroy(cs)) == -EBUSY && mono_s() - t0 < HELD_DESTROY_WAIT)
		usleep(100000);
	CHECK(!rc, "server ctx destroy: %s", usmc_strerror(rc));
}

int main(void)
{
	struct sockaddr_in srv_addr, addr_a = host_addr("USMC_TEST_HOST_A", 0);
	uint8_t data[HELD_DATA] = {0};
	struct usmc_listener *lst;
	struct question q;
	struct hp_link lk;
	struct hp_conn x;
	struct cdc_msg m;
	pthread_t th;
	double t_q;
	int rc;

	CHECK(!usmc_ctx_create(&cs), "server ctx");
	lst = listen_b(cs, 4, &srv_addr);
	hp_link_open(&lk, NULL, &addr_a);
	hp_connect(&lk, &x, &srv_addr);
	rc = usmc_accept(lst, 0, &srv);
	CHECK(!rc, "usmc_accept: %s", usmc_strerror(rc));
	expect_smcr(srv, "server");
	pthread_create(&th, NULL, reader, NULL);

	CHECK(!hp_send_data(&x, data, HELD_DATA), "the peer's data");
	CHECK(poll_until(&lk, read_all_data, NULL, HELD_WAIT_MS), "the reader read %lu of %d bytes",
	      atomic_load(&got), HELD_DATA);
	hp_poll(&lk, HELD_ASLEEP_MS); /* the reader is back in usmc_recv(), asleep */

	x.tx_prod_flags = CDC_PF_WRITE_BLOCKED;
	x.tx_state_flags = CDC_CS_PEER_CONN_CLOSED;
	q = (struct question){.x = &x, .testlinks_before = lk.testlink_reqs};
	m = hp_cdc_now(&x);
	CHECK(!hp_send_cdc(&x, &m), "the peer's close");
	CHECK(poll_until(&lk, asked, &q, HELD_WAIT_MS),
	      "the server did not ask for the rest of a held EOF (%u update requests)", x.upd_reqs);
	t_q = mono_s();
	CHECK(poll_until(&lk, reader_done, NULL, HELD_WAIT_MS),
	      "no EOF within %d ms of the question", HELD_WAIT_MS);
	CHECK(atomic_load(&reader_rc) == 0, "the reader ended with %s, not EOF",
	      usmc_strerror(atomic_load(&reader_rc)));
	printf("held EOF given %.0f ms after the server's question (bound %d ms)\n",
	       (atomic_load(&eof_at) - t_q) * 1e3, HELD_EOF_MAX_MS);
	CHECK(atomic_load(&eof_at) - t_q < HELD_EOF_MAX_MS / 1e3,
	      "the reader saw EOF %.0f ms after the question: the tick gave it without waking it",
	      (atomic_load(&eof_at) - t_q) * 1e3);

	pthread_join(th, NULL);
	CHECK(!usmc_close(srv), "server close");
	hp_poll(&lk, 100);
	hp_link_close(&lk);
	destroy_server(lst);
	printf("PASS heldtick\n");
	return 0;
}
