// SPDX-License-Identifier: MIT
/*
 * Echo through the event API, TCP mode: N connections each send M KiB and
 * get them back, every byte checked at its offset (common/pattern.h). The
 * server is an event loop on usmc_ctx_poll() of its own context (accept
 * events, READ, WRITE when its send buffer is full, HUP), in a thread; the
 * clients are another one on a second context, in the main thread. Nothing
 * uses usmc_conn_fd(). A lost event stalls a loop: the test fails at its
 * deadline (60 s) with the connections' progress.
 *
 * usage: test_event_echo [connections=200] [KiB=256]
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/event_pair.h"
#include "common/pattern.h"

#define CHUNK	    (16 * 1024)
#define MAX_EV	    64
#define DEADLINE_MS 60000

static int nconns = 200;
static uint64_t total;
static atomic_bool stop;

/* ---- the server: echo everything, then half-close and close ----------- */

struct echo {
	struct usmc_conn *c;
	uint8_t buf[CHUNK];
	size_t len, off; /* bytes buf[off..len) wait to be sent back */
	bool eof;
};

/* Returns true when the connection is done (closed and freed). */
static bool echo_step(struct echo *e)
{
	for (;;) {
		ssize_t n;

		if (e->off < e->len) {
			n = usmc_send(e->c, e->buf + e->off, e->len - e->off, 0);
			if (n == -EAGAIN) {
				/* full: wait for room only, as a loop with back-pressure */
				CHECK(!usmc_conn_watch(e->c, USMC_EV_WRITE, e), "watch WRITE");
				return false;
			}
			CHECK(n > 0, "server send: %s", usmc_strerror((int)n));
			e->off += (size_t)n;
			continue;
		}
		if (e->eof) {
			CHECK(!usmc_shutdown(e->c, SHUT_WR), "server shutdown");
			CHECK(!usmc_close(e->c), "server close");
			free(e);
			return true;
		}
		n = usmc_recv(e->c, e->buf, sizeof(e->buf), 0);
		if (n == -EAGAIN) {
			CHECK(!usmc_conn_watch(e->c, USMC_EV_READ, e), "watch READ");
			return false;
		}
		CHECK(n >= 0, "server recv: %s", usmc_strerror((int)n));
		e->eof = n == 0;
		e->len = (size_t)n;
		e->off = 0;
	}
}

struct server {
	struct usmc_ctx *ctx;
	struct usmc_listener *l;
	int accepted, finished;
};

static void *server_main(void *arg)
{
	struct server *sv = arg;
	int open = 0;

	while (!atomic_load(&stop) || open) {
		struct usmc_event ev[MAX_EV];
		int n = usmc_ctx_poll(sv->ctx, ev, MAX_EV, 100);

		CHECK(n >= 0, "server poll: %s", usmc_strerror(n));
		for (int i = 0; i < n; i++) {
			struct usmc_conn *c;
			int rc;

			if (ev[i].listener) {
				CHECK(ev[i].listener == sv->l && ev[i].events == USMC_EV_ACCEPT,
				      "a listener's event: %#x", ev[i].events);
				while (!(rc = usmc_accept(sv->l, USMC_NONBLOCK, &c))) {
					struct echo *e = calloc(1, sizeof(*e));

					CHECK(e, "calloc");
					e->c = c;
					CHECK(!usmc_conn_watch(c, USMC_EV_READ, e), "watch");
					open++;
					sv->accepted++;
				}
				CHECK(rc == -EAGAIN, "usmc_accept: %s", usmc_strerror(rc));
				continue;
			}
			CHECK(ev[i].conn && ev[i].user, "a connection's event names it");
			CHECK(ev[i].conn == ((struct echo *)ev[i].user)->c, "its user pointer");
			if (echo_step(ev[i].user)) {
				open--;
				sv->finished++;
			}
		}
	}
	return NULL;
}

/* ---- the clients: stream out, check what comes back, then EOF -------- */

struct client {
	struct usmc_conn *c;
	uint64_t seed, sent, rcvd;
	bool shut, done;
};

static uint32_t client_wants(const struct client *k)
{
	return USMC_EV_READ | (k->sent < total ? USMC_EV_WRITE : 0);
}

/* Returns true when the client is done (all back, checked, and EOF). */
static bool client_step(struct client *k, uint32_t events)
{
	static uint8_t buf[CHUNK];
	uint32_t before = client_wants(k);

	if (events & USMC_EV_WRITE) {
		while (k->sent < total) {
			size_t len = total - k->sent < CHUNK ? (size_t)(total - k->sent) : CHUNK;
			ssize_t n;

			pattern_fill(k->seed, k->sent, buf, len);
			n = usmc_send(k->c, buf, len, MSG_DONTWAIT);
			if (n == -EAGAIN)
				break;
			CHECK(n > 0, "client send: %s", usmc_strerror((int)n));
			k->sent += (uint64_t)n;
		}
		if (k->sent == total && !k->shut) {
			CHECK(!usmc_shutdown(k->c, SHUT_WR), "client shutdown");
			k->shut = true;
		}
	}
	if (events & (USMC_EV_READ | USMC_EV_HUP | USMC_EV_ERR)) {
		for (;;) {
			ssize_t n = usmc_recv(k->c, buf, sizeof(buf), MSG_DONTWAIT);
			long long bad;

			if (n == -EAGAIN)
				break;
			CHECK(n >= 0, "client recv: %s", usmc_strerror((int)n));
			if (n == 0) {
				CHECK(k->rcvd == total && k->shut, "EOF after %llu of %llu bytes",
				      (unsigned long long)k->rcvd, (unsigned long long)total);
				CHECK(!usmc_close(k->c), "client close");
				k->done = true;
				return true;
			}
			bad = pattern_check(k->seed, k->rcvd, buf, (size_t)n);
			CHECK(bad < 0, "seed %llu: byte %lld differs", (unsigned long long)k->seed,
			      bad);
			k->rcvd += (uint64_t)n;
			CHECK(k->rcvd <= k->sent, "more back than sent");
		}
	}
	if (client_wants(k) != before)
		CHECK(!usmc_conn_watch(k->c, client_wants(k), k), "client watch");
	return false;
}

int main(int argc, char **argv)
{
	struct usmc_ctx *cctx;
	struct sockaddr_storage addr;
	socklen_t alen;
	struct server sv = {0};
	struct client *k;
	pthread_t th;
	int done = 0, rc;
	long until;

	if (argc > 1)
		nconns = atoi(argv[1]);
	total = (argc > 2 ? strtoull(argv[2], NULL, 0) : 256) * 1024;
	CHECK(nconns > 0 && total > 0, "usage: test_event_echo [connections] [KiB]");
	CHECK(!usmc_ctx_create(&sv.ctx) && !usmc_ctx_create(&cctx), "usmc_ctx_create");
	sv.l = ev_listen(sv.ctx, USMC_LISTEN_NONBLOCK, &addr, &alen);
	CHECK(!usmc_listener_watch(sv.l, USMC_EV_ACCEPT, NULL), "listener watch");
	CHECK(!pthread_create(&th, NULL, server_main, &sv), "pthread_create");
	k = calloc((size_t)nconns, sizeof(*k));
	CHECK(k, "calloc");
	for (int i = 0; i < nconns; i++) {
		k[i].seed = 0xe7e0 + (uint64_t)i;
		rc = usmc_connect(cctx, (struct sockaddr *)&addr, alen, 0, &k[i].c);
		CHECK(!rc, "usmc_connect %d: %s", i, usmc_strerror(rc));
		CHECK(!usmc_conn_watch(k[i].c, client_wants(&k[i]), &k[i]), "client watch");
	}
	until = ev_now_ms() + DEADLINE_MS;
	while (done < nconns) {
		struct usmc_event ev[MAX_EV];
		int n = usmc_ctx_poll(cctx, ev, MAX_EV, 1000);

		CHECK(n >= 0, "client poll: %s", usmc_strerror(n));
		if (ev_now_ms() > until) {
			uint64_t sent = 0, rcvd = 0;

			for (int i = 0; i < nconns; i++)
				sent += k[i].sent, rcvd += k[i].rcvd;
			die("stalled: %d of %d connections done, %llu bytes sent, %llu back, "
			    "server accepted %d, finished %d",
			    done, nconns, (unsigned long long)sent, (unsigned long long)rcvd,
			    sv.accepted, sv.finished);
		}
		for (int i = 0; i < n; i++) {
			struct client *c = ev[i].user;

			CHECK(c >= k && c < k + nconns && ev[i].conn == c->c && !c->done,
			      "an event of a live client");
			done += client_step(c, ev[i].events);
		}
	}
	atomic_store(&stop, true);
	pthread_join(th, NULL);
	CHECK(sv.accepted == nconns && sv.finished == nconns, "server: %d accepted, %d finished",
	      sv.accepted, sv.finished);
	CHECK(!usmc_listener_close(sv.l), "listener close");
	CHECK(!usmc_ctx_destroy(sv.ctx) && !usmc_ctx_destroy(cctx), "usmc_ctx_destroy");
	free(k);
	printf("test_event_echo: %d connections x %llu bytes echoed and checked\n", nconns,
	       (unsigned long long)total);
	return 0;
}
