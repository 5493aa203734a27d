// SPDX-License-Identifier: MIT
/*
 * Run to completion under stress (libusmc/smcr_eng.c), where a lost
 * wake-up must fail the test, not merely slow it: the library heals one
 * within a second (the engine's re-check) or its progress thread's tick
 * (250 ms, when nobody holds the token), so every blocking receive must
 * return within a bound below them of the moment its data was handed to
 * the peer's usmc_send().
 *
 * Phase 1, the crowd: many connections on ONE link group per side, each
 * direction of each connection written by one thread and read by another,
 * with random chunk sizes and random sleeps, so the engine's token moves
 * between readers, writers (waiting for room), the progress thread and
 * back. A third of the connections read through their readiness
 * descriptor (usmc_conn_fd() and poll(), non-blocking receives), which
 * makes the progress thread step in and hand the token back. Every byte is
 * checked; each writer logs when usmc_send() took each byte, and a reader
 * whose blocking receive (or poll()) took longer than CROWD_CALL_MAX_MS
 * past that moment fails (half the re-check: 48 threads share the guest's
 * two CPUs; the phases below hold the tick's bound).
 *
 * Phase 2, turns: TURN_CONNS connections on a link group of their own,
 * with spinning off (every wait sleeps on the completion channel), each a
 * client thread that sends one small message at a time and a server
 * thread that answers it: one message in flight per connection, so no
 * later completion wakes a thread that slept through an earlier one, and
 * the token passes between the waiting threads at every turn. Each message
 * must be received within TURN_CALL_MAX_MS of its send, below the tick.
 *
 * Phase 3, alone: one connection, turns as in phase 2, with every poll of
 * the CQs that found nothing held up for HOLD_UP_US (the test is linked
 * with --wrap=smcr_wr_poll): a completion then often arrives between a
 * token holder's last poll and its arm, which only the poll after the arm
 * finds (nothing else comes to wake it).
 *
 * docs/bench/2026-12-05-engine-wakeups.md has the wake-ups that, removed
 * from smcr_eng.c, make it fail. Meant for the ThreadSanitizer build as
 * well (tests/rxe/run-rxe-tests.sh build-tsan -R engine). Env:
 * USMC_TEST_CONNS (12), USMC_TEST_BYTES (262144) per direction and
 * connection, USMC_TEST_TURNS (1000) per connection of phase 2.
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
#include "smcr_wr.h"

#define DEADLINE_S	  240.0
#define CHUNK_MAX	  20000
#define CROWD_CALL_MAX_MS 500 /* below the re-check: a loss it healed still fails */
#define TURN_CALL_MAX_MS  200 /* below the tick too */
#define SENDS_MAX	  65536
#define TURN_CONNS	  3
#define TURN_MSG	  64
#define HOLD_UP_US	  200 /* phase 3: an empty poll's holder stops this long */

static struct usmc_ctx *cs, *cc;
static struct usmc_listener *lst;
static struct sockaddr_in srv_addr;
static long nconns;
static uint64_t nbytes;
static atomic_long done_threads, threads_total;
static _Atomic double slowest_call;	/* s: the longest a receive waited for handed data */
static atomic_bool hold_up_empty_polls; /* phase 3 */
static atomic_long held_up;

int __real_smcr_wr_poll(struct smcr_link *lnk);
int __wrap_smcr_wr_poll(struct smcr_link *lnk);

/* A poll of a link's CQs that found nothing: in phase 3 its caller stops
 * here, between that poll and what it does next (its arm, its sleep). */
int __wrap_smcr_wr_poll(struct smcr_link *lnk)
{
	int n = __real_smcr_wr_poll(lnk);

	if (!n && atomic_load(&hold_up_empty_polls)) {
		atomic_fetch_add(&held_up, 1);
		usleep(HOLD_UP_US);
	}
	return n;
}

/* When usmc_send() took each piece of one direction's stream. */
struct send_log {
	pthread_mutex_t mu;
	int n;
	uint64_t end[SENDS_MAX]; /* the stream offset after the piece */
	double at[SENDS_MAX];	 /* when the call that took it returned */
};

struct dir {
	struct usmc_conn *c;
	uint64_t seed;
	bool use_fd; /* the reader polls usmc_conn_fd() */
	unsigned int rnd;
	struct send_log *log;
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

static void log_sent(struct send_log *log, uint64_t end)
{
	pthread_mutex_lock(&log->mu);
	CHECK(log->n < SENDS_MAX, "send log full");
	log->end[log->n] = end;
	log->at[log->n++] = now_s();
	pthread_mutex_unlock(&log->mu);
}

/* When the byte at @off was taken by usmc_send(); 0 if not yet. */
static double handed_at(struct send_log *log, uint64_t off)
{
	double t = 0;

	pthread_mutex_lock(&log->mu);
	for (int lo = 0, hi = log->n; lo < hi;) {
		int mid = (lo + hi) / 2;

		if (log->end[mid] > off) {
			t = log->at[mid];
			hi = mid;
		} else {
			lo = mid + 1;
		}
	}
	pthread_mutex_unlock(&log->mu);
	return t;
}

/* A blocking call from @t0 to now returned data from offset @off on: it
 * waited no longer than CROWD_CALL_MAX_MS past the data's hand-over. */
static void check_wait(struct dir *d, double t0, uint64_t off, const char *call)
{
	double handed = handed_at(d->log, off), since, waited;

	if (!handed) /* its writer was stopped between the send and the log */
		return;
	since = handed > t0 ? handed : t0;
	waited = now_s() - since;
	if (waited > atomic_load(&slowest_call))
		atomic_store(&slowest_call, waited);
	CHECK(waited * 1e3 < CROWD_CALL_MAX_MS,
	      "stream %llu at %llu: %s returned %.0f ms after its data was sent (a lost wake-up, "
	      "healed)",
	      (unsigned long long)d->seed, (unsigned long long)off, call, waited * 1e3);
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
		for (size_t k = 0; k < n;) {
			ssize_t w = usmc_send(d->c, buf + k, n - k, 0);

			CHECK(w > 0, "send: %s", usmc_strerror((int)w));
			k += (size_t)w;
			log_sent(d->log, off + k);
		}
		off += n;
		nap(&d->rnd);
	}
	free(buf);
	atomic_fetch_add(&done_threads, 1);
	return NULL;
}

/* One receive of up to @want bytes at @got: blocking, or non-blocking
 * after poll() on the readiness descriptor @fd said readable. */
static ssize_t receive(struct dir *d, int fd, uint8_t *buf, size_t want, uint64_t got)
{
	double t0 = now_s();
	ssize_t n;

	if (fd < 0) {
		n = usmc_recv(d->c, buf, want, 0);
		if (n > 0)
			check_wait(d, t0, got, "a blocking receive");
		return n;
	}
	while ((n = usmc_recv(d->c, buf, want, MSG_DONTWAIT)) == -EAGAIN) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		t0 = now_s();
		CHECK(poll(&p, 1, 20000) == 1, "readiness: nothing in 20 s at %llu",
		      (unsigned long long)got);
		check_wait(d, t0, got, "poll() on the readiness descriptor");
	}
	return n;
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
		ssize_t n = receive(d, fd, buf, want, got);
		long long bad;

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
	while (atomic_load(&done_threads) < atomic_load(&threads_total)) {
		if (now_s() - t0 > DEADLINE_S)
			die("stuck: %ld of %ld threads done after %.0f s",
			    atomic_load(&done_threads), atomic_load(&threads_total), DEADLINE_S);
		usleep(100000);
	}
	return NULL;
}

/* ---- phase 1: the crowd ---- */

static void connect_pairs(struct usmc_ctx *cli, struct usmc_listener *l,
			  const struct sockaddr_in *sa, long n, struct usmc_conn **c,
			  struct usmc_conn **s)
{
	struct usmc_conn_info ia, ib;

	for (long i = 0; i < n; i++) {
		int rc = usmc_connect(cli, (const struct sockaddr *)sa, sizeof(*sa), 0, &c[i]);

		CHECK(!rc, "connect: %s", usmc_strerror(rc));
		rc = usmc_accept(l, 0, &s[i]);
		CHECK(!rc, "accept: %s", usmc_strerror(rc));
		expect_smcr(c[i], "client");
		expect_smcr(s[i], "server");
		usmc_conn_info(c[i], &ia);
		usmc_conn_info(c[0], &ib);
		CHECK(ia.lgr_id == ib.lgr_id, "connection %ld on another link group", i);
	}
}

/* Start a writer and a reader for each direction of each connection. */
static void start_crowd(struct usmc_conn **c, struct usmc_conn **s, struct dir *wr, struct dir *rd,
			struct send_log *logs, pthread_t *th)
{
	for (long i = 0; i < nconns; i++) {
		for (int k = 0; k < 2; k++) {
			struct send_log *log = &logs[2 * i + k];

			pthread_mutex_init(&log->mu, NULL);
			/* client -> server (k = 0) and server -> client */
			wr[2 * i + k] =
				(struct dir){.c = k ? s[i] : c[i],
					     .seed = 2 * (uint64_t)i + 1 + (uint64_t)k,
					     .rnd = (unsigned)i * (k ? 7 : 1) + 3 * (unsigned)k,
					     .log = log};
			rd[2 * i + k] = (struct dir){.c = k ? c[i] : s[i],
						     .seed = wr[2 * i + k].seed,
						     .use_fd = i % 3 == k,
						     .rnd = (unsigned)i * (k ? 17 : 13) + 1 +
							    4 * (unsigned)k,
						     .log = log};
			pthread_create(&th[4 * i + 2 * k], NULL, writer, &wr[2 * i + k]);
			pthread_create(&th[4 * i + 2 * k + 1], NULL, reader, &rd[2 * i + k]);
		}
	}
}

static void run_crowd(void)
{
	struct usmc_conn **c = calloc((size_t)nconns, sizeof(*c));
	struct usmc_conn **s = calloc((size_t)nconns, sizeof(*s));
	struct dir *wr = calloc((size_t)nconns * 2, sizeof(*wr));
	struct dir *rd = calloc((size_t)nconns * 2, sizeof(*rd));
	struct send_log *logs = calloc((size_t)nconns * 2, sizeof(*logs));
	pthread_t *th = calloc((size_t)nconns * 4, sizeof(*th)), wd;
	struct usmc_ctx_stats st;
	double t0;

	CHECK(c && s && wr && rd && logs && th, "calloc");
	connect_pairs(cc, lst, &srv_addr, nconns, c, s);
	t0 = now_s();
	atomic_store(&done_threads, 0);
	atomic_store(&threads_total, nconns * 4);
	pthread_create(&wd, NULL, watchdog, NULL);
	start_crowd(c, s, wr, rd, logs, th);
	for (long i = 0; i < nconns * 4; i++)
		pthread_join(th[i], NULL);
	pthread_join(wd, NULL);
	usmc_ctx_stats(cc, &st);
	printf("crowd: %ld connections, %llu bytes each way each: %.2f s, slowest receive %.1f ms "
	       "after its data was sent; client engine: wakeups=%llu channel_sleeps=%llu "
	       "spins_ok=%llu cqes=%llu\n",
	       nconns, (unsigned long long)nbytes, now_s() - t0, atomic_load(&slowest_call) * 1e3,
	       (unsigned long long)st.engine.wakeups, (unsigned long long)st.engine.channel_sleeps,
	       (unsigned long long)st.engine.spins_ok, (unsigned long long)st.engine.cqes);
	for (long i = 0; i < nconns; i++)
		CHECK(!usmc_close(c[i]) && !usmc_close(s[i]), "close");
	free(c);
	free(s);
	free(wr);
	free(rd);
	free(logs);
	free(th);
}

/* ---- phase 2: turns ---- */

struct turns {
	struct usmc_conn *c, *s;
	long n;
	_Atomic double sent_at; /* the message in flight was sent then */
};

/* Receive one TURN_MSG message on @c and check it came within TURN_CALL_MAX_MS
 * of @t->sent_at. */
static void turn_recv(struct turns *t, struct usmc_conn *c, long i, const char *who)
{
	uint8_t buf[TURN_MSG];
	ssize_t n = usmc_recv(c, buf, sizeof(buf), MSG_WAITALL);
	double waited = now_s() - atomic_load(&t->sent_at);

	CHECK(n == TURN_MSG, "turn %ld: %s received %zd", i, who, n);
	CHECK(buf[0] == (uint8_t)i, "turn %ld: %s received turn %u's message", i, who, buf[0]);
	if (waited > atomic_load(&slowest_call))
		atomic_store(&slowest_call, waited);
	CHECK(waited * 1e3 < TURN_CALL_MAX_MS,
	      "turn %ld: %s received the message %.0f ms after it was sent (a lost wake-up, healed)",
	      i, who, waited * 1e3);
}

static void turn_send(struct turns *t, struct usmc_conn *c, long i)
{
	uint8_t buf[TURN_MSG] = {(uint8_t)i};

	atomic_store(&t->sent_at, now_s());
	send_all(c, buf, sizeof(buf));
}

static void *turn_server(void *arg)
{
	struct turns *t = arg;

	for (long i = 0; i < t->n; i++) {
		turn_recv(t, t->s, i, "the server");
		turn_send(t, t->s, i);
	}
	atomic_fetch_add(&done_threads, 1);
	return NULL;
}

static void *turn_client(void *arg)
{
	struct turns *t = arg;

	for (long i = 0; i < t->n; i++) {
		turn_send(t, t->c, i);
		turn_recv(t, t->c, i, "the client");
	}
	atomic_fetch_add(&done_threads, 1);
	return NULL;
}

static void run_turns(int nconns_turns, long n, const char *what)
{
	struct usmc_ctx *ts, *tc;
	struct usmc_listener *tl;
	struct sockaddr_in sa;
	struct usmc_conn *c[TURN_CONNS], *s[TURN_CONNS];
	struct turns t[TURN_CONNS];
	pthread_t th[2 * TURN_CONNS], wd;
	int k = nconns_turns;
	double t0;

	CHECK(!usmc_ctx_create(&ts) && !usmc_ctx_create(&tc), "ctx");
	CHECK(!usmc_ctx_setopt(ts, USMC_OPT_SPIN, 0) && !usmc_ctx_setopt(tc, USMC_OPT_SPIN, 0),
	      "spin option");
	tl = listen_b(ts, 16, &sa);
	connect_pairs(tc, tl, &sa, k, c, s);
	atomic_store(&slowest_call, 0);
	atomic_store(&done_threads, 0);
	atomic_store(&threads_total, 2 * k);
	pthread_create(&wd, NULL, watchdog, NULL);
	t0 = now_s();
	for (int i = 0; i < k; i++) {
		t[i] = (struct turns){.c = c[i], .s = s[i], .n = n};
		pthread_create(&th[2 * i], NULL, turn_server, &t[i]);
		pthread_create(&th[2 * i + 1], NULL, turn_client, &t[i]);
	}
	for (int i = 0; i < 2 * k; i++)
		pthread_join(th[i], NULL);
	pthread_join(wd, NULL);
	printf("%s: %d connections, %ld round trips each, spinning off: %.2f s, slowest "
	       "message %.1f ms\n",
	       what, k, n, now_s() - t0, atomic_load(&slowest_call) * 1e3);
	for (int i = 0; i < k; i++)
		CHECK(!usmc_close(c[i]) && !usmc_close(s[i]), "close");
	CHECK(!usmc_listener_close(tl), "listener close");
	CHECK(!usmc_ctx_destroy(tc) && !usmc_ctx_destroy(ts), "ctx destroy");
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	nconns = env_long("USMC_TEST_CONNS", 12);
	nbytes = (uint64_t)env_long("USMC_TEST_BYTES", 262144);
	CHECK(nconns > 0 && nconns <= 512, "USMC_TEST_CONNS 1..512");
	CHECK(!usmc_ctx_create(&cs) && !usmc_ctx_create(&cc), "ctx");
	lst = listen_b(cs, 64, &srv_addr);
	run_crowd();
	CHECK(!usmc_listener_close(lst), "listener close");
	CHECK(!usmc_ctx_destroy(cc) && !usmc_ctx_destroy(cs), "ctx destroy");
	run_turns(TURN_CONNS, env_long("USMC_TEST_TURNS", 1000), "turns");
	atomic_store(&hold_up_empty_polls, true);
	run_turns(1, env_long("USMC_TEST_TURNS", 1000) / 2, "alone, empty polls held up");
	atomic_store(&hold_up_empty_polls, false);
	printf("empty polls held up: %ld\n", atomic_load(&held_up));
	printf("PASS engine stress\n");
	return 0;
}
