// SPDX-License-Identifier: MIT
/*
 * A wait for a reply spins only where a CPU is free for it (smcr_spin.h):
 * smcr_eng.c against the simulated link (eng_sim.c), one reader that waits
 * for replies a producer thread pushes a few microseconds after it starts
 * waiting, well within any spin's budget. How many times the reader's
 * engine polled per reply tells a spin (a tight loop of polls) from a
 * sleep (a poll, the arm, one more poll, the wake-up's poll).
 *
 *   - pinned to one CPU (sched_setaffinity), the reader must not spin: a
 *     spinner there takes the CPU the reply needs;
 *   - with two CPUs or more it spins, as before (not checked on a machine
 *     whose affinity or cgroup quota leaves this process fewer).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "common/check.h"
#include "eng_sim.h"
#include "smcr_eng.h"
#include "smcr_spin.h"

#define SPIN_REPLIES	   400
#define SPIN_REPLY_NS	   5000	   /* the reply comes this long after the wait starts */
#define SLEEP_POLLS_MAX	   4.0	   /* polls per reply of a reader that does not spin */
#define SPIN_POLLS_MIN	   8.0	   /* of one that spins */
#define SPIN_WAIT_DEADLINE 5000	   /* ms, per wait: never reached */
#define SPIN_RECHECK_US	   1100000 /* longer than the library keeps a mask */

static struct smcr_eng eng;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond;
static uint64_t got, want; /* replies dispatched, the one the reader waits for */
static atomic_int waiting; /* the reader waits for reply want */
static atomic_long polls;
static atomic_bool stop;

static void dispatch(enum sim_cq cq, int who)
{
	(void)cq;
	(void)who;
	pthread_mutex_lock(&mu);
	got++;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&mu);
}

static void arming(enum sim_cq cq)
{
	(void)cq;
}

static bool ready(void *arg)
{
	(void)arg;
	atomic_fetch_add(&polls, 1); /* the holder looks after each poll */
	return got >= want;
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	CHECK(!sched_setaffinity(0, sizeof(set), &set), "sched_setaffinity");
}

struct phase {
	cpu_set_t reader_cpus; /* the reader's affinity */
	int producer_cpu;      /* -1: the process's */
	double polls_per_reply;
};

static void *producer(void *arg)
{
	struct phase *ph = arg;

	if (ph->producer_cpu >= 0)
		pin(ph->producer_cpu);
	while (!atomic_load(&stop)) {
		uint64_t t0;

		if (!atomic_exchange(&waiting, 0)) {
			sched_yield();
			continue;
		}
		for (t0 = clock_now_ns(); clock_now_ns() - t0 < SPIN_REPLY_NS;)
			;
		sim_push(SIM_RCQ, 0);
	}
	return NULL;
}

/* The reader: SPIN_REPLIES waits for a reply, on @ph's CPUs. */
static void run_phase(struct phase *ph)
{
	pthread_t th;

	CHECK(!sched_setaffinity(0, sizeof(ph->reader_cpus), &ph->reader_cpus), "affinity");
	atomic_store(&stop, false);
	pthread_create(&th, NULL, producer, ph);
	atomic_store(&polls, 0);
	pthread_mutex_lock(&mu);
	for (int i = 0; i < SPIN_REPLIES; i++) {
		want = got + 1;
		atomic_store(&waiting, 1);
		while (got < want)
			smcr_eng_wait(&eng, &mu, &cond, ready, NULL, SMCR_WAIT_REPLY,
				      clock_now_ms() + SPIN_WAIT_DEADLINE);
	}
	pthread_mutex_unlock(&mu);
	atomic_store(&stop, true);
	pthread_join(th, NULL);
	ph->polls_per_reply = (double)atomic_load(&polls) / SPIN_REPLIES;
}

int main(void)
{
	cpu_set_t all;
	struct phase one = {.producer_cpu = -1}, many = {.producer_cpu = -1};
	int first = -1, second = -1, progress_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&cond, &ca);
	sim_init(&(struct sim_hooks){.dispatch = dispatch, .arming = arming});
	CHECK(!smcr_eng_init(&eng, &(struct smcr_eng_setup){.lnk = &sim_lnk,
							    .progress_fd = progress_fd,
							    .spin = true}),
	      "engine init");
	CHECK(!sched_getaffinity(0, sizeof(all), &all), "sched_getaffinity");
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all)) {
			if (first < 0)
				first = c;
			else if (second < 0)
				second = c;
		}
	CPU_ZERO(&one.reader_cpus);
	CPU_SET(first, &one.reader_cpus);
	one.producer_cpu = second; /* -1 on a machine of one CPU: it shares the reader's */
	run_phase(&one);
	printf("reader pinned to CPU %d: %.1f polls per reply\n", first, one.polls_per_reply);
	CHECK(one.polls_per_reply <= SLEEP_POLLS_MAX,
	      "a reader pinned to one CPU spins (%.1f polls per reply)", one.polls_per_reply);

	many.reader_cpus = all;
	CHECK(!sched_setaffinity(0, sizeof(all), &all), "affinity");
	usleep(SPIN_RECHECK_US); /* the library reads a thread's mask again after this */
	if (smcr_spin_cpus(clock_now_ms()) >= 2) {
		run_phase(&many);
		printf("reader on %d CPUs: %.1f polls per reply\n", CPU_COUNT(&all),
		       many.polls_per_reply);
		CHECK(many.polls_per_reply >= SPIN_POLLS_MIN,
		      "a reader with CPUs to spare no longer spins (%.1f polls per reply)",
		      many.polls_per_reply);
	} else {
		printf("fewer than two CPUs for this process: no spin to expect\n");
	}
	smcr_eng_fini(&eng);
	close(progress_fd);
	printf("PASS\n");
	return 0;
}
