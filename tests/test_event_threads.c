// SPDX-License-Identifier: MIT
/*
 * The event API with threads (label tsan; also under ASan): two threads
 * poll one context while a third accepts connections, watches them,
 * changes their watches and closes them, some while their event is being
 * taken. Every connection given data and kept open must be reported READ
 * to a poller within 2 s; no event may name a user pointer that was never
 * watched; a closed connection's watch must not be touched after it is
 * freed (ASan), nor raced (TSan).
 *
 * usage: test_event_threads [connections=400]
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/event_pair.h"

#define POLLERS 2
#define SEEN_MS 2000

struct stub {
	atomic_int seen; /* READ events reported for it */
};

static struct usmc_ctx *ctx;
static struct stub *stubs;
static int nconns = 400;
static atomic_bool stop;
static atomic_long strangers, events;

static void *poller(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		struct usmc_event ev[8];
		int n = usmc_ctx_poll(ctx, ev, 8, 20);

		CHECK(n >= 0, "usmc_ctx_poll: %s", usmc_strerror(n));
		for (int i = 0; i < n; i++) {
			struct stub *s = ev[i].user;

			/* the connection may be closed by now: only the stub is ours */
			if (s < stubs || s >= stubs + nconns || !ev[i].conn)
				atomic_fetch_add(&strangers, 1);
			else if (ev[i].events & USMC_EV_READ)
				atomic_fetch_add(&s->seen, 1);
			atomic_fetch_add(&events, 1);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_storage addr;
	socklen_t alen;
	struct usmc_listener *l;
	pthread_t th[POLLERS];
	int checked = 0;

	if (argc > 1)
		nconns = atoi(argv[1]);
	CHECK(nconns > 0, "usage: test_event_threads [connections]");
	stubs = calloc((size_t)nconns, sizeof(*stubs));
	CHECK(stubs, "calloc");
	CHECK(!usmc_ctx_create(&ctx), "usmc_ctx_create");
	l = ev_listen(ctx, USMC_LISTEN_TCP_ONLY, &addr, &alen);
	for (int i = 0; i < POLLERS; i++)
		CHECK(!pthread_create(&th[i], NULL, poller, NULL), "pthread_create");
	for (int i = 0; i < nconns; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct usmc_conn *c;
		int rc;

		CHECK(fd >= 0 && !connect(fd, (struct sockaddr *)&addr, alen), "connect");
		rc = usmc_accept(l, USMC_NONBLOCK, &c);
		CHECK(!rc, "usmc_accept: %s", usmc_strerror(rc));
		CHECK(!usmc_conn_watch(c, USMC_EV_READ, &stubs[i]), "watch");
		CHECK(write(fd, "d", 1) == 1, "write");
		switch (i % 3) {
		case 0: { /* kept: it must be told */
			long until = ev_now_ms() + SEEN_MS;

			while (!atomic_load(&stubs[i].seen) && ev_now_ms() < until)
				usleep(200);
			CHECK(atomic_load(&stubs[i].seen), "connection %d: no READ within %d ms", i,
			      SEEN_MS);
			checked++;
			break;
		}
		case 1: /* its watch changed while the pollers may be taking it */
			CHECK(!usmc_conn_watch(c, USMC_EV_READ | USMC_EV_WRITE, &stubs[i]),
			      "watch");
			CHECK(!usmc_conn_watch(c, USMC_EV_READ, &stubs[i]), "watch");
			break;
		default: /* closed at once, its event perhaps in a poller's hands */
			break;
		}
		CHECK(!usmc_close(c), "usmc_close");
		close(fd);
	}
	atomic_store(&stop, true);
	for (int i = 0; i < POLLERS; i++)
		pthread_join(th[i], NULL);
	CHECK(atomic_load(&strangers) == 0, "%ld events named no watched connection",
	      atomic_load(&strangers));
	CHECK(!usmc_listener_close(l), "usmc_listener_close");
	CHECK(!usmc_ctx_destroy(ctx), "usmc_ctx_destroy");
	printf("test_event_threads: %d connections, %d checked, %ld events\n", nconns, checked,
	       atomic_load(&events));
	free(stubs);
	return 0;
}
