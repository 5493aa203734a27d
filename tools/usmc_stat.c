// SPDX-License-Identifier: MIT
/*
 * usmc-stat - what the processes using libusmc on this host are doing:
 * their connections (mode, fallback reason), listeners, link groups and
 * counters, as smcss / smcr linkgroup show / smcr stats do for the
 * kernel's SMC. Each libusmc context publishes itself on an abstract UNIX
 * socket "@usmc-stat/<pid>/<n>" (docs/usmc-stat.md); this tool finds them
 * in /proc/net/unix (of its network namespace), reads one JSON snapshot
 * from each and prints a table, or the snapshots as one JSON array.
 *
 * usage: usmc-stat [--json] [-p PID] [--mode smcr|tcp] [--reason NAME]
 *                  [-w SECONDS]
 * Exit: 0 at least one snapshot read and every query answered; 1 no
 * libusmc process found (or none with -p PID); 2 usage error; 3 some
 * process did not answer (not the same uid, exited, or malformed reply).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NAME_PREFIX    "@usmc-stat/"
#define READ_TIMEOUT_S 3
#define MAX_REPLY      (64u << 20)

/* ---- a small JSON DOM --------------------------------------------------- */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jtype t;
	bool b;
	char *s;	   /* J_STR: the string; J_NUM: its text */
	struct jv **items; /* J_ARR, J_OBJ */
	char **keys;	   /* J_OBJ */
	size_t n;
};

struct jp {
	const char *p, *end;
	int depth;
};

static void jv_free(struct jv *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++) {
		jv_free(v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->s);
	free(v);
}

static void jp_ws(struct jp *p)
{
	while (p->p < p->end && (*p->p == ' ' || *p->p == '\n' || *p->p == '\t' || *p->p == '\r'))
		p->p++;
}

static struct jv *jp_value(struct jp *p);

static char *jp_string(struct jp *p)
{
	size_t cap = 16, n = 0;
	char *s;

	if (p->p >= p->end || *p->p != '"')
		return NULL;
	p->p++;
	s = malloc(cap);
	while (s && p->p < p->end && *p->p != '"') {
		char c = *p->p++;

		if (c == '\\') {
			if (p->p >= p->end)
				break;
			c = *p->p++;
			switch (c) {
			case 'n':
				c = '\n';
				break;
			case 't':
				c = '\t';
				break;
			case 'r':
				c = '\r';
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'u': /* control characters only come this way: keep ASCII */
				if (p->end - p->p < 4)
					goto bad;
				c = (char)strtol((char[]){p->p[2], p->p[3], 0}, NULL, 16);
				p->p += 4;
				break;
			default: /* '"', '\\', '/' */
				break;
			}
		}
		if (n + 2 > cap) {
			char *ns = realloc(s, cap *= 2);

			if (!ns)
				goto bad;
			s = ns;
		}
		s[n++] = c;
	}
	if (!s || p->p >= p->end)
		goto bad;
	p->p++;
	s[n] = '\0';
	return s;
bad:
	free(s);
	return NULL;
}

static bool jv_push(struct jv *v, char *key, struct jv *item)
{
	struct jv **ni = realloc(v->items, (v->n + 1) * sizeof(*ni));

	if (!ni)
		return false;
	v->items = ni;
	if (v->t == J_OBJ) {
		char **nk = realloc(v->keys, (v->n + 1) * sizeof(*nk));

		if (!nk)
			return false;
		v->keys = nk;
		v->keys[v->n] = key;
	}
	v->items[v->n++] = item;
	return true;
}

static struct jv *jp_container(struct jp *p, struct jv *v, char close)
{
	p->p++;
	jp_ws(p);
	if (p->p < p->end && *p->p == close) {
		p->p++;
		return v;
	}
	for (;;) {
		char *key = NULL;
		struct jv *item;

		jp_ws(p);
		if (v->t == J_OBJ) {
			key = jp_string(p);
			jp_ws(p);
			if (!key || p->p >= p->end || *p->p != ':') {
				free(key);
				goto bad;
			}
			p->p++;
		}
		item = jp_value(p);
		if (!item || !jv_push(v, key, item)) {
			free(key);
			jv_free(item);
			goto bad;
		}
		jp_ws(p);
		if (p->p < p->end && *p->p == ',') {
			p->p++;
			continue;
		}
		if (p->p < p->end && *p->p == close) {
			p->p++;
			return v;
		}
		goto bad;
	}
bad:
	jv_free(v);
	return NULL;
}

static struct jv *jp_value(struct jp *p)
{
	struct jv *v;

	jp_ws(p);
	if (p->p >= p->end || ++p->depth > 32)
		return NULL;
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	switch (*p->p) {
	case '{':
		v->t = J_OBJ;
		v = jp_container(p, v, '}');
		break;
	case '[':
		v->t = J_ARR;
		v = jp_container(p, v, ']');
		break;
	case '"':
		v->t = J_STR;
		v->s = jp_string(p);
		if (!v->s) {
			jv_free(v);
			v = NULL;
		}
		break;
	default:
		if (!strncmp(p->p, "true", 4) || !strncmp(p->p, "false", 5)) {
			v->t = J_BOOL;
			v->b = *p->p == 't';
			p->p += v->b ? 4 : 5;
		} else if (!strncmp(p->p, "null", 4)) {
			v->t = J_NULL;
			p->p += 4;
		} else {
			const char *s = p->p;

			while (p->p < p->end && strchr("-+0123456789.eE", *p->p))
				p->p++;
			if (p->p == s) {
				jv_free(v);
				v = NULL;
				break;
			}
			v->t = J_NUM;
			v->s = strndup(s, (size_t)(p->p - s));
		}
	}
	p->depth--;
	return v;
}

static struct jv *jv_parse(const char *s, size_t len)
{
	struct jp p = {.p = s, .end = s + len};
	struct jv *v = jp_value(&p);

	jp_ws(&p);
	if (v && p.p != p.end) {
		jv_free(v);
		return NULL;
	}
	return v;
}

static struct jv *jv_get(const struct jv *o, const char *key)
{
	if (!o || o->t != J_OBJ)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (!strcmp(o->keys[i], key))
			return o->items[i];
	return NULL;
}

static const char *jv_str(const struct jv *o, const char *key)
{
	const struct jv *v = jv_get(o, key);

	return v && v->t == J_STR ? v->s : "";
}

static uint64_t jv_u64(const struct jv *o, const char *key)
{
	const struct jv *v = jv_get(o, key);

	return v && v->t == J_NUM ? strtoull(v->s, NULL, 10) : 0;
}

static bool jv_bool(const struct jv *o, const char *key)
{
	const struct jv *v = jv_get(o, key);

	return v && v->t == J_BOOL && v->b;
}

static void jv_write_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void jv_write(FILE *f, const struct jv *v)
{
	switch (v->t) {
	case J_NULL:
		fputs("null", f);
		break;
	case J_BOOL:
		fputs(v->b ? "true" : "false", f);
		break;
	case J_NUM:
		fputs(v->s, f);
		break;
	case J_STR:
		jv_write_str(f, v->s);
		break;
	case J_ARR:
	case J_OBJ:
		fputc(v->t == J_ARR ? '[' : '{', f);
		for (size_t i = 0; i < v->n; i++) {
			if (i)
				fputc(',', f);
			if (v->t == J_OBJ) {
				jv_write_str(f, v->keys[i]);
				fputc(':', f);
			}
			jv_write(f, v->items[i]);
		}
		fputc(v->t == J_ARR ? ']' : '}', f);
		break;
	}
}

/* ---- finding and reading the contexts ----------------------------------- */

struct target {
	char name[108]; /* "usmc-stat/<pid>/<n>", without the '@' */
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
		pid = strtol(path + strlen(NAME_PREFIX) - 1, NULL, 10);
		if (only_pid && pid != only_pid)
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

/* One snapshot; NULL (with a message) if it could not be read. */
static struct jv *query(const struct target *t)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = READ_TIMEOUT_S};
	size_t len = 0, cap = 65536, nl = strlen(t->name);
	char *buf = NULL;
	struct jv *v = NULL;
	int fd;

	memcpy(sa.sun_path + 1, t->name, nl);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa,
		    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl))) {
		fprintf(stderr, "usmc-stat: @%s: %s\n", t->name, strerror(errno));
		goto out;
	}
	buf = malloc(cap);
	while (buf) {
		ssize_t r;

		if (len == cap) {
			char *nb = cap >= MAX_REPLY ? NULL : realloc(buf, cap *= 2);

			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
		}
		r = recv(fd, buf + len, cap - len, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r < 0)
				fprintf(stderr, "usmc-stat: @%s: %s\n", t->name, strerror(errno));
			break;
		}
		len += (size_t)r;
	}
	if (!buf || !len) {
		if (buf)
			fprintf(stderr, "usmc-stat: @%s: no answer (not the same user?)\n",
				t->name);
		goto out;
	}
	v = jv_parse(buf, len);
	if (!v || v->t != J_OBJ) {
		fprintf(stderr, "usmc-stat: @%s: malformed snapshot\n", t->name);
		jv_free(v);
		v = NULL;
	}
out:
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
	       " lgrs_open=%" PRIu64 "\n",
	       jv_u64(cnt, "connects"), jv_u64(cnt, "accepts"), jv_u64(cnt, "smcr"),
	       jv_u64(cnt, "fallbacks"), jv_u64(cnt, "hs_errors"), jv_u64(cnt, "open_conns"),
	       jv_u64(cnt, "lgrs_created"), jv_u64(cnt, "lgrs_open"));
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

		printf("  LGR 0x%08" PRIx64 " %s %s %s/%" PRIu64 " peer=%s gid %s -> %s qp %" PRIu64
		       " -> %" PRIu64 " conns=%" PRIu64 "/%" PRIu64 "\n",
		       jv_u64(g, "id"), jv_str(g, "role"), jv_str(g, "state"), jv_str(g, "device"),
		       jv_u64(g, "port"), jv_str(g, "peer_id"), jv_str(g, "local_gid"),
		       jv_str(g, "peer_gid"), jv_u64(g, "qp_num"), jv_u64(g, "peer_qp_num"),
		       jv_u64(g, "connections"), jv_u64(g, "max_connections"));
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
		} else {
			print_human(s);
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
