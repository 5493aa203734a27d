// SPDX-License-Identifier: MIT
/*
 * Run to completion under stress (libusmc/smcr_eng.c): many
 * connections on ONE link group per side, each direction of each
 * connection written by one thread and read by another, with random chunk
 * sizes and random sleeps, so the engine's token moves between readers,
 * writers (waiting for room), the progress thread and back. A third of the
 * connections read through their readiness descriptor (usmc_conn_fd() and
 * poll(), non-blocking receives), which makes the progress thread step in
 * and hand the token back. Every byte is checked; the whole run has a
 * deadline, and each blocking call one too (a wait that only the engine's
 * 1 s safety re-check ends, repeated, would miss it). Meant for the
 * ThreadSanitizer build as well (tools/test.sh stage rxe under TSan:
 * build-tsan). Env: USMC_TEST_CONNS (12), USMC_TEST_BYTES (262144) per
 * direction and connection.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../common/pattern.h"
#include "smcr_common.h"

#define DEADLINE_S 240.0
#define CHUNK_MAX  20000

static struct usmc_ctx *cs, *cc;
static struct usmc_listener *lst;
static struct sockaddr_in srv_addr;
static long nconns;
static uint64_t nbytes;
static atomic_long done_threads;

struct dir {
	struct usmc_conn *c;
	uint64_t seed;
	bool use_fd; /* the reader polls usmc_conn_fd() */
	unsigned int rnd;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nap(unsigned int *rnd)
{
	unsigned int r = (unsigned int)rand_r(rnd);

	if (r % 4 == 0)
		usleep(r % 2000); /* up to 2 ms, a quarter of the time */
}

static void *writer(void *arg)
{
	struct dir *d = arg;
	uint8_t *buf = malloc(CHUNK_MAX);

	CHECK(buf, "malloc");
	for (uint64_t off = 0; off < nbytes;) {
		size_t n = 1 + (size_t)rand_r(&d->rnd) % CHUNK_MAX;

		if (n > nbytes - off)
			n = (size_t)(nbytes - off);
		pattern_fill(d->seed, off, buf, n);
		send_all(d->c, buf, n);
		off += n;
		nap(&d->rnd);
	}
	free(buf);
	atomic_fetch_add(&done_threads, 1);
	return NULL;
}

static void *reader(void *arg)
{
	struct dir *d = arg;
	uint8_t *buf = malloc(CHUNK_MAX);
	int fd = d->use_fd ? usmc_conn_fd(d->c) : -1;

	CHECK(buf, "malloc");
	CHECK(!d->use_fd || fd >= 0, "usmc_conn_fd: %d", fd);
	for (uint64_t got = 0; got < nbytes;) {
		size_t want = 1 + (size_t)rand_r(&d->rnd) % CHUNK_MAX;
		ssize_t n;
		long long bad;

		if (d->use_fd) {
			struct pollfd p = {.fd = fd, .events = POLLIN};

			n = usmc_recv(d->c, buf, want, MSG_DONTWAIT);
			if (n == -EAGAIN) {
				/* readiness is exact: readable comes, or the link is stuck */
				CHECK(poll(&p, 1, 20000) == 1, "readiness: nothing in 20 s at %llu",
				      (unsigned long long)got);
				continue;
			}
		} else {
			n = usmc_recv(d->c, buf, want, 0);
		}
		CHECK(n > 0, "recv at %llu: %zd (%s)", (unsigned long long)got, n,
		      n < 0 ? usmc_strerror((int)n) : "EOF");
		bad = pattern_check(d->seed, got, buf, (size_t)n);
		CHECK(bad < 0, "stream %llu differs at %lld", (unsigned long long)d->seed, bad);
		got += (uint64_t)n;
		nap(&d->rnd);
	}
	free(buf);
	atomic_fetch_add(&done_threads, 1);
	return NULL;
}

static void *watchdog(void *arg)
{
	double t0 = now_s();

	(void)arg;
	while (atomic_load(&done_threads) < nconns * 4) {
		if (now_s() - t0 > DEADLINE_S)
			die("stuck: %ld of %ld threads done after %.0f s (a lost wake-up?)",
			    atomic_load(&done_threads), nconns * 4, DEADLINE_S);
		usleep(100000);
	}
	return NULL;
}

int main(void)
{
	struct usmc_conn **c, **s;
	struct dir *d;
	pthread_t *th, wd;
	struct usmc_conn_info ia, ib;
	struct usmc_ctx_stats st;
	double t0;

	signal(SIGPIPE, SIG_IGN);
	nconns = env_long("USMC_TEST_CONNS", 12);
	nbytes = (uint64_t)env_long("USMC_TEST_BYTES", 262144);
	c = calloc((size_t)nconns, sizeof(*c));
	s = calloc((size_t)nconns, sizeof(*s));
	d = calloc((size_t)nconns * 2, sizeof(*d));
	th = calloc((size_t)nconns * 4, sizeof(*th));
	CHECK(c && s && d && th, "calloc");
	CHECK(!usmc_ctx_create(&cs) && !usmc_ctx_create(&cc), "ctx");
	lst = listen_b(cs, 64, &srv_addr);
	for (long i = 0; i < nconns; i++) {
		int rc = usmc_connect(cc, (struct sockaddr *)&srv_addr, sizeof(srv_addr), 0, &c[i]);

		CHECK(!rc, "connect: %s", usmc_strerror(rc));
		rc = usmc_accept(lst, 0, &s[i]);
		CHECK(!rc, "accept: %s", usmc_strerror(rc));
		expect_smcr(c[i], "client");
		expect_smcr(s[i], "server");
		usmc_conn_info(c[i], &ia);
		usmc_conn_info(c[0], &ib);
		CHECK(ia.lgr_id == ib.lgr_id, "connection %ld on another link group", i);
	}
	t0 = now_s();
	pthread_create(&wd, NULL, watchdog, NULL);
	for (long i = 0; i < nconns; i++) {
		/* client -> server and server -> client, each its own writer and reader */
		d[2 * i] = (struct dir){.c = c[i], .seed = 2 * (uint64_t)i + 1, .rnd = (unsigned)i};
		d[2 * i + 1] = (struct dir){
			.c = s[i], .seed = 2 * (uint64_t)i + 2, .rnd = (unsigned)i * 7 + 3};
		pthread_create(&th[4 * i], NULL, writer, &d[2 * i]);
		pthread_create(&th[4 * i + 1], NULL, writer, &d[2 * i + 1]);
	}
	for (long i = 0; i < nconns; i++) {
		/* each reader reads what the other end's writer sent */
		static struct dir rd[1024];

		CHECK(nconns <= 512, "USMC_TEST_CONNS at most 512");
		rd[2 * i] = (struct dir){.c = s[i],
					 .seed = d[2 * i].seed,
					 .use_fd = i % 3 == 0,
					 .rnd = (unsigned)i * 13 + 1};
		rd[2 * i + 1] = (struct dir){.c = c[i],
					     .seed = d[2 * i + 1].seed,
					     .use_fd = i % 3 == 1,
					     .rnd = (unsigned)i * 17 + 5};
		pthread_create(&th[4 * i + 2], NULL, reader, &rd[2 * i]);
		pthread_create(&th[4 * i + 3], NULL, reader, &rd[2 * i + 1]);
	}
	for (long i = 0; i < nconns * 4; i++)
		pthread_join(th[i], NULL);
	pthread_join(wd, NULL);
	usmc_ctx_stats(cc, &st);
	printf("%ld connections, %llu bytes each way each: %.2f s; client engine: wakeups=%llu "
	       "channel_sleeps=%llu spins_ok=%llu cqes=%llu\n",
	       nconns, (unsigned long long)nbytes, now_s() - t0,
	       (unsigned long long)st.engine.wakeups, (unsigned long long)st.engine.channel_sleeps,
	       (unsigned long long)st.engine.spins_ok, (unsigned long long)st.engine.cqes);
	for (long i = 0; i < nconns; i++) {
		CHECK(!usmc_close(c[i]) && !usmc_close(s[i]), "close");
	}
	CHECK(!usmc_listener_close(lst), "listener close");
	CHECK(!usmc_ctx_destroy(cc) && !usmc_ctx_destroy(cs), "ctx destroy");
	free(c);
	free(s);
	free(d);
	free(th);
	printf("PASS engine stress\n");
	return 0;
}
