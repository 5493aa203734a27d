// SPDX-License-Identifier: MIT
/*
 * usmc-stat - what the processes using libusmc on this host are doing:
 * their connections (mode, fallback reason), listeners, link groups and
 * counters, as smcss / smcr linkgroup show / smcr stats do for the
 * kernel's SMC. Each libusmc context publishes itself on an abstract UNIX
 * socket "@usmc-stat/<pid>/<n>/<nonce>" (docs/usmc-stat.md); this tool
 * finds them in /proc/net/unix (of its network namespace), reads one JSON
 * snapshot from each socket that the process of its name answers, and
 * prints a table, or the snapshots as one JSON array. The replies come
 * from other processes: bounded, parsed strictly, printed escaped.
 *
 * usage: usmc-stat [--json] [-p PID] [--mode smcr|tcp] [--reason NAME]
 *                  [-w SECONDS]
 * Exit: 0 at least one snapshot read and every query answered; 1 no
 * libusmc process found (or none with -p PID); 2 usage error; 3 some
 * process did not answer (not the same uid, exited, or malformed reply) or
 * another process answered for it.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "usmc_stat_json.h"

#define NAME_PREFIX	  "@usmc-stat/"
#define NAME_NONCE_DIGITS 16 /* stat.c STAT_NAME_FMT */
/*
 * What one reply may cost: it comes from another process. An honest
 * snapshot spends about 16 bytes per value (a connection: 10-12 values,
 * 170-200 bytes): these allow about 60,000 connections. The values bound
 * the memory of the parsed reply (about 110 bytes each, so 115 MB at
 * most) however densely a reply packs them; the deadline bounds a
 * publisher that trickles.
 */
#define MAX_REPLY	 (16u << 20)
#define MAX_VALUES	 (MAX_REPLY / 16)
#define REPLY_DEADLINE_S 10

/* ---- finding and reading the contexts ----------------------------------- */

struct target {
	char name[108]; /* "usmc-stat/<pid>/<n>/<nonce>", without the '@' */
	long pid;
};

struct opts {
	bool json;
	long pid;	    /* 0: all */
	const char *mode;   /* NULL, "SMC-R" or "TCP" */
	const char *reason; /* NULL or a reason name */
	long watch_s;
};

static int cmp_target(const void *a, const void *b)
{
	const struct target *x = a, *y = b;

	return x->pid != y->pid ? (x->pid < y->pid ? -1 : 1) : strcmp(x->name, y->name);
}

/*
 * The pid of a name "usmc-stat/<pid>/<n>/<nonce: 16 hex digits>" (libusmc
 * before the nonce wrote "usmc-stat/<pid>/<n>"), or 0 if @name is not one:
 * anyone may bind an abstract name, so whatever does not parse is neither
 * queried nor printed.
 */
static long target_pid(const char *name)
{
	const char *s = name + strlen(NAME_PREFIX) - 1;
	char *end;
	long pid;

	if (!isdigit((unsigned char)*s))
		return 0;
	pid = strtol(s, &end, 10);
	if (pid <= 0 || *end != '/' || !isdigit((unsigned char)end[1]))
		return 0;
	strtoul(end + 1, &end, 10);
	if (!*end)
		return pid;
	if (*end != '/')
		return 0;
	end++;
	if (strlen(end) != NAME_NONCE_DIGITS ||
	    strspn(end, "0123456789abcdef") != NAME_NONCE_DIGITS)
		return 0;
	return pid;
}

/* The listening usmc-stat sockets in /proc/net/unix; their number. */
static size_t find_targets(struct target **out, long only_pid)
{
	FILE *f = fopen("/proc/net/unix", "re");
	struct target *v = NULL;
	size_t n = 0;
	char line[512];

	*out = NULL;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long flags;
		char *path = strstr(line, " " NAME_PREFIX);
		struct target *nv;
		long pid;

		/* Num RefCount Protocol Flags Type St Inode Path: only the
		 * listening socket (__SO_ACCEPTCON), not the accepted ones
		 * that carry the same name */
		if (!path || sscanf(line, "%*s %*s %*s %lx", &flags) != 1 || !(flags & 0x10000))
			continue;
		path += 2;
		path[strcspn(path, "\n")] = '\0';
		pid = target_pid(path);
		if (!pid || strlen(path) >= sizeof(v->name) || (only_pid && pid != only_pid))
			continue;
		nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv)
			break;
		v = nv;
		snprintf(v[n].name, sizeof(v[n].name), "%s", path);
		v[n].pid = pid;
		n++;
	}
	fclose(f);
	qsort(v, n, sizeof(*v), cmp_target);
	*out = v;
	return n;
}

static int connect_to(const struct target *t)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t nl = strlen(t->name);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	memcpy(sa.sun_path + 1, t->name, nl);
	if (connect(fd, (struct sockaddr *)&sa,
		    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl))) {
		fprintf(stderr, "usmc-stat: @%s: %s\n", t->name, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Bytes to read on @fd before @deadline_ms (now_ms()). */
static bool wait_readable(int fd, int64_t deadline_ms)
{
	for (;;) {
		int64_t left = deadline_ms - now_ms();
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n;

		if (left <= 0)
			return false;
		n = poll(&p, 1, (int)left);
		if (n > 0)
			return true;
		if (n < 0 && errno != EINTR)
			return false;
	}
}

/* The whole reply, up to its EOF, into *@out: its length (0: none), or -1
 * with a message (longer than MAX_REPLY, too slow, a read error). */
static ssize_t read_reply(int fd, const struct target *t, char **out)
{
	int64_t deadline = now_ms() + REPLY_DEADLINE_S * 1000;
	size_t len = 0, cap = 0;
	char *buf = NULL, *nb;
	ssize_t r;

	for (;;) {
		if (len == cap) {
			if (cap == MAX_REPLY) {
				fprintf(stderr,
					"usmc-stat: @%s: reply of %u MiB or more: ignored\n",
					t->name, MAX_REPLY >> 20);
				goto err;
			}
			cap = cap ? 2 * cap : 65536;
			nb = realloc(buf, cap);
			if (!nb)
				goto err;
			buf = nb;
		}
		if (!wait_readable(fd, deadline)) {
			fprintf(stderr, "usmc-stat: @%s: no whole reply within %d s\n", t->name,
				REPLY_DEADLINE_S);
			goto err;
		}
		r = recv(fd, buf + len, cap - len, 0);
		if (r == 0)
			break;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fprintf(stderr, "usmc-stat: @%s: %s\n", t->name, strerror(errno));
			goto err;
		}
		len += (size_t)r;
	}
	*out = buf;
	return (ssize_t)len;
err:
	free(buf);
	return -1;
}

/*
 * Abstract names have no owner: any process may bind "@usmc-stat/<pid>/..."
 * with another's pid. The kernel's word on who listens there (SO_PEERCRED:
 * the process that called listen()) must be the name's pid, or the answer
 * is not read.
 */
static bool peer_is_named(int fd, const struct target *t)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) || len != sizeof(cr)) {
		fprintf(stderr, "usmc-stat: @%s: SO_PEERCRED: %s\n", t->name, strerror(errno));
		return false;
	}
	if (cr.pid == t->pid)
		return true;
	fprintf(stderr,
		"usmc-stat: @%s: answered by pid %ld (uid %lu), not by pid %ld: ignored (another "
		"process holds the name, or the process runs in another PID namespace)\n",
		t->name, (long)cr.pid, (unsigned long)cr.uid, t->pid);
	return false;
}

/* One snapshot; NULL (with a message) if it could not be read. */
static struct jv *query(const struct target *t)
{
	enum jv_error err = JV_MALFORMED;
	struct jv *v = NULL;
	char *buf = NULL;
	ssize_t len;
	int fd = connect_to(t);

	if (fd < 0)
		return NULL;
	if (!peer_is_named(fd, t)) {
		close(fd);
		return NULL;
	}
	len = read_reply(fd, t, &buf);
	if (len == 0)
		fprintf(stderr, "usmc-stat: @%s: no answer (not the same user?)\n", t->name);
	if (len > 0)
		v = jv_parse(buf, (size_t)len, MAX_VALUES, &err);
	if (v && v->t != J_OBJ) {
		jv_free(v);
		v = NULL;
		err = JV_MALFORMED;
	}
	if (!v && err == JV_TOO_MANY_VALUES)
		fprintf(stderr, "usmc-stat: @%s: %s (over %u): ignored\n", t->name,
			jv_error_text(err), MAX_VALUES);
	else if (!v && len > 0)
		fprintf(stderr, "usmc-stat: @%s: %s: ignored\n", t->name, jv_error_text(err));
	free(buf);
	close(fd);
	return v;
}

/* ---- filters and output ------------------------------------------------- */

static bool conn_matches(const struct opts *o, const struct jv *c)
{
	const struct jv *r = jv_get(c, "reason");

	if (o->mode && strcmp(jv_str(c, "mode"), o->mode))
		return false;
	if (o->reason && (!r || r->t != J_OBJ || strcasecmp(jv_str(r, "name"), o->reason)))
		return false;
	return true;
}

/* Drop the connections that do not match the filters. */
static void filter_conns(const struct opts *o, struct jv *snap)
{
	struct jv *cs = jv_get(snap, "connections");
	size_t k = 0;

	if (!cs || cs->t != J_ARR)
		return;
	for (size_t i = 0; i < cs->n; i++) {
		if (conn_matches(o, cs->items[i]))
			cs->items[k++] = cs->items[i];
		else
			jv_free(cs->items[i]);
	}
	cs->n = k;
}

static void print_fallbacks(const char *indent, const struct jv *arr)
{
	if (!arr || arr->t != J_ARR || !arr->n)
		return;
	printf("%sfallbacks:", indent);
	for (size_t i = 0; i < arr->n; i++)
		printf(" %s=%" PRIu64, jv_str(arr->items[i], "name"),
		       jv_u64(arr->items[i], "count"));
	printf("\n");
}

static void print_pool(const char *name, const struct jv *arr)
{
	if (!arr || arr->t != J_ARR)
		return;
	for (size_t i = 0; i < arr->n; i++)
		printf(" %s%" PRIu64 "K:%" PRIu64 "/%" PRIu64, name,
		       jv_u64(arr->items[i], "size") / 1024, jv_u64(arr->items[i], "in_use"),
		       jv_u64(arr->items[i], "free"));
}

/* The registered buffer memory (USMC_OPT_REG_MEM_MAX): a publisher older
 * than these counters sends none, and shows no line. */
static void print_pinned(const struct jv *cnt)
{
	uint64_t max = jv_u64(cnt, "pinned_max");

	if (!jv_get(cnt, "pinned_bytes"))
		return;
	printf("  pinned=%" PRIu64 "K max=", jv_u64(cnt, "pinned_bytes") / 1024);
	if (max)
		printf("%" PRIu64 "K", max / 1024);
	else
		printf("none");
	printf(" pool_shrinks=%" PRIu64 " pinned_refused=%" PRIu64 "\n",
	       jv_u64(cnt, "pool_shrinks"), jv_u64(cnt, "pinned_refused"));
}

/*
 * A link group's line, then one line per link: each its port, GIDs, QPs
 * and send queue. A publisher older than the links array sends the one
 * link's on the link group's line instead.
 */
static void print_lgr_line(const struct jv *g)
{
	const struct jv *links = jv_get(g, "links");

	printf("  LGR 0x%08" PRIx64 " %s %s", jv_u64(g, "id"), jv_str(g, "role"),
	       jv_str(g, "state"));
	if (!links || links->t != J_ARR) {
		printf(" %s/%" PRIu64 " peer=%s gid %s -> %s qp %" PRIu64 " -> %" PRIu64
		       " conns=%" PRIu64 "/%" PRIu64 "\n",
		       jv_str(g, "device"), jv_u64(g, "port"), jv_str(g, "peer_id"),
		       jv_str(g, "local_gid"), jv_str(g, "peer_gid"), jv_u64(g, "qp_num"),
		       jv_u64(g, "peer_qp_num"), jv_u64(g, "connections"),
		       jv_u64(g, "max_connections"));
		return;
	}
	printf(" peer=%s conns=%" PRIu64 "/%" PRIu64 " links=%zu\n", jv_str(g, "peer_id"),
	       jv_u64(g, "connections"), jv_u64(g, "max_connections"), links->n);
	for (size_t i = 0; i < links->n; i++) {
		const struct jv *k = links->items[i];

		printf("    link %" PRIu64 " slot %" PRIu64 " %s %s/%" PRIu64
		       " gid %s -> %s qp %" PRIu64 " -> %" PRIu64 " sq %" PRIu64 "/%" PRIu64 "\n",
		       jv_u64(k, "link_num"), jv_u64(k, "slot"), jv_str(k, "state"),
		       jv_str(k, "device"), jv_u64(k, "port"), jv_str(k, "local_gid"),
		       jv_str(k, "peer_gid"), jv_u64(k, "qp_num"), jv_u64(k, "peer_qp_num"),
		       jv_u64(k, "sq_used"), jv_u64(k, "sq_size"));
	}
}

/* The links' life cycle: a publisher older than these counters sends
 * none, and shows no line. */
static void print_link_counters(const struct jv *cnt)
{
	if (!jv_get(cnt, "link_failures"))
		return;
	printf("  links_added=%" PRIu64 " link_failures=%" PRIu64 " failovers=%" PRIu64 "\n",
	       jv_u64(cnt, "links_added"), jv_u64(cnt, "link_failures"), jv_u64(cnt, "failovers"));
}

static void print_human(const struct jv *s)
{
	const struct jv *cnt = jv_get(s, "counters"), *arr;

	printf("PID %" PRIu64 " %s  libusmc %s  context %" PRIu64 "%s\n", jv_u64(s, "pid"),
	       jv_str(s, "comm"), jv_str(s, "version"), jv_u64(s, "context"),
	       jv_bool(s, "kernel_compat") ? "  kernel-compat" : "");
	if (jv_bool(s, "kernel_compat") && *jv_str(s, "kernel_compat_cgroup"))
		printf("  kernel-compat BPF program in cgroup %s (all its TCP connections)\n",
		       jv_str(s, "kernel_compat_cgroup"));
	printf("  connects=%" PRIu64 " accepts=%" PRIu64 " smcr=%" PRIu64 " fallbacks=%" PRIu64
	       " hs_errors=%" PRIu64 " open_conns=%" PRIu64 " lgrs_created=%" PRIu64
	       " lgrs_open=%" PRIu64 " lgrs_reclaimed=%" PRIu64 "\n",
	       jv_u64(cnt, "connects"), jv_u64(cnt, "accepts"), jv_u64(cnt, "smcr"),
	       jv_u64(cnt, "fallbacks"), jv_u64(cnt, "hs_errors"), jv_u64(cnt, "open_conns"),
	       jv_u64(cnt, "lgrs_created"), jv_u64(cnt, "lgrs_open"),
	       jv_u64(cnt, "lgrs_reclaimed"));
	print_pinned(cnt);
	print_link_counters(cnt);
	print_fallbacks("  ", jv_get(s, "fallback_reasons"));
	arr = jv_get(s, "listeners");
	for (size_t i = 0; arr && i < arr->n; i++) {
		const struct jv *l = arr->items[i], *lc = jv_get(l, "counters");

		printf("  LISTEN %s backlog=%" PRIu64 " accepted=%" PRIu64 " smcr=%" PRIu64
		       " fallbacks=%" PRIu64 " hs_failed=%" PRIu64 " in_handshake=%" PRIu64
		       " queued=%" PRIu64 " listen_drops=%" PRIu64 "\n",
		       jv_str(l, "address"), jv_u64(l, "backlog"), jv_u64(lc, "accepted"),
		       jv_u64(lc, "smcr"), jv_u64(lc, "fallbacks"), jv_u64(lc, "hs_failed"),
		       jv_u64(lc, "in_handshake"), jv_u64(lc, "queued"),
		       jv_u64(lc, "listen_drops"));
		print_fallbacks("    ", jv_get(l, "fallback_reasons"));
	}
	arr = jv_get(s, "connections");
	if (arr && arr->n) {
		printf("  %-23s %-23s %-6s %-10s %-18s %12s %12s\n", "Local Address",
		       "Peer Address", "Role", "Mode", "Reason/LGR", "Sent", "Received");
		for (size_t i = 0; i < arr->n; i++) {
			const struct jv *c = arr->items[i], *r = jv_get(c, "reason");
			char why[40];

			if (r && r->t == J_OBJ)
				snprintf(why, sizeof(why), "%s%s", jv_str(r, "name"),
					 jv_bool(c, "peer_declined") ? " (peer)" : "");
			else if (jv_u64(c, "lgr_id"))
				snprintf(why, sizeof(why), "lgr 0x%08" PRIx64, jv_u64(c, "lgr_id"));
			else
				snprintf(why, sizeof(why), "-");
			printf("  %-23s %-23s %-6s %-10s %-18s %12" PRIu64 " %12" PRIu64 "\n",
			       jv_str(c, "local"), jv_str(c, "peer"), jv_str(c, "role"),
			       jv_str(c, "mode"), why, jv_u64(c, "bytes_sent"),
			       jv_u64(c, "bytes_received"));
		}
	}
	arr = jv_get(s, "link_groups");
	for (size_t i = 0; arr && i < arr->n; i++) {
		const struct jv *g = arr->items[i], *llc = jv_get(g, "llc"),
				*b = jv_get(g, "buffers"), *e = jv_get(g, "engine");

		print_lgr_line(g);
		printf("    buffers (in use/free):");
		print_pool("rmb ", jv_get(b, "rmb"));
		print_pool("snd ", jv_get(b, "sndbuf"));
		printf("\n    llc: test_link_sent=%" PRIu64 " test_link_answered=%" PRIu64
		       " rkey_confirmed=%" PRIu64 " rkey_deleted=%" PRIu64 "\n",
		       jv_u64(llc, "test_link_sent"), jv_u64(llc, "test_link_answered"),
		       jv_u64(llc, "rkey_confirmed"), jv_u64(llc, "rkey_deleted"));
		if (e)
			printf("    engine: cqes=%" PRIu64 " wakeups=%" PRIu64
			       " channel_sleeps=%" PRIu64 " spins_ok=%" PRIu64 " doorbells=%" PRIu64
			       " cq_arms=%" PRIu64 " ready_ops=%" PRIu64 " syscalls=%" PRIu64 "\n",
			       jv_u64(e, "cqes"), jv_u64(e, "wakeups"), jv_u64(e, "channel_sleeps"),
			       jv_u64(e, "spins_ok"), jv_u64(e, "doorbells"), jv_u64(e, "cq_arms"),
			       jv_u64(e, "ready_ops"), jv_u64(e, "syscalls"));
	}
}

/* One round: query, filter, print. Returns the exit code. */
static int run_once(const struct opts *o)
{
	struct target *t;
	size_t n = find_targets(&t, o->pid), got = 0;
	int rc = 0;

	if (o->json)
		printf("[");
	for (size_t i = 0; i < n; i++) {
		struct jv *s = query(&t[i]);

		if (!s) {
			rc = 3;
			continue;
		}
		filter_conns(o, s);
		if (o->json) {
			if (got)
				printf(",");
			printf("\n");
			jv_write(stdout, s);
		} else if (jv_make_printable(s)) {
			/* the strings are the publisher's: no escape sequence of
			 * theirs reaches the operator's terminal */
			print_human(s);
		} else {
			fprintf(stderr, "usmc-stat: @%s: out of memory\n", t[i].name);
			rc = 3;
		}
		got++;
		jv_free(s);
	}
	if (o->json)
		printf("\n]\n");
	else if (!n)
		printf("no libusmc process found%s\n", o->pid ? " with that pid" : "");
	fflush(stdout);
	free(t);
	return !n ? 1 : rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: usmc-stat [--json] [-p PID] [--mode smcr|tcp] [--reason NAME] "
		   "[-w SECONDS]\n"
		   "  --json         the snapshots as one JSON array (docs/usmc-stat.md)\n"
		   "  -p PID         only this process\n"
		   "  --mode M       only connections running SMC-R (smcr) or TCP (tcp)\n"
		   "  --reason NAME  only connections that fell back for NAME (e.g. PEERNOSMC)\n"
		   "  -w SECONDS     repeat every SECONDS until interrupted\n"
		   "exit: 0 ok, 1 no libusmc process found, 2 usage, 3 a process did not "
		   "answer\n");
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"pid", required_argument, NULL, 'p'},
		{"mode", required_argument, NULL, 'm'},
		{"reason", required_argument, NULL, 'r'},
		{"watch", required_argument, NULL, 'w'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct opts o = {0};
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "jp:m:r:w:h", lopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			o.json = true;
			break;
		case 'p':
			o.pid = strtol(optarg, &end, 10);
			if (*end || o.pid <= 0)
				goto bad;
			break;
		case 'm':
			if (!strcasecmp(optarg, "smcr") || !strcasecmp(optarg, "smc-r"))
				o.mode = "SMC-R";
			else if (!strcasecmp(optarg, "tcp"))
				o.mode = "TCP";
			else
				goto bad;
			break;
		case 'r':
			o.reason = optarg;
			break;
		case 'w':
			o.watch_s = strtol(optarg, &end, 10);
			if (*end || o.watch_s <= 0)
				goto bad;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (optind != argc)
		goto bad;
	if (!o.watch_s)
		return run_once(&o);
	for (;;) {
		time_t now = time(NULL);
		char ts[64];

		strftime(ts, sizeof(ts), "%F %T", localtime(&now));
		if (!o.json)
			printf("--- %s\n", ts);
		run_once(&o);
		sleep((unsigned int)o.watch_s);
	}
bad:
	usage(stderr);
	return 2;
}
