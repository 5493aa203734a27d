/* SPDX-License-Identifier: MIT */
/*
 * The Linux kernel's SMC as a test peer (rxe guest with --smc --setup two,
 * root): AF_SMC sockets, and its verdicts read back through smc_kctl
 * (smc_diag dump, SMC-R link group list). Helpers return errors instead of
 * failing, so they work in any thread; the caller asserts.
 */
#ifndef USMC_TEST_KERNEL_PEER_H
#define USMC_TEST_KERNEL_PEER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <usmc/usmc.h>

#ifndef AF_SMC
#define AF_SMC 43
#endif
#define SMCPROTO_SMC 0 /* SMC over IPv4 */

struct kdiag {
	char mode[16]; /* "SMC-R", "fallback", ... */
	unsigned int fallback, peer_diagnosis;
};

/* The smc_diag line of the kernel socket local:lport -> peer:pport.
 * Returns 0, or -ENOENT if the kernel lists no such socket. */
static inline int kpeer_diag(const char *kctl, const char *local, int lport, const char *peer,
			     int pport, struct kdiag *d)
{
	char cmd[512], line[1024], want[160];
	bool found = false;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "'%s' diag", kctl);
	snprintf(want, sizeof(want), "local=%s:%d peer=%s:%d ", local, lport, peer, pport);
	f = popen(cmd, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		const char *m = strstr(line, "mode="), *fb = strstr(line, "fallback=");
		const char *pd = strstr(line, "peer_diagnosis=");

		if (!strstr(line, want) || !m || !fb || !pd)
			continue;
		sscanf(m, "mode=%15s", d->mode);
		d->fallback = (unsigned int)strtoul(fb + 9, NULL, 16);
		d->peer_diagnosis = (unsigned int)strtoul(pd + 15, NULL, 16);
		found = true;
	}
	pclose(f);
	return found ? 0 : -ENOENT;
}

/* ---- one end of a connection: a kernel socket (fd >= 0) or a usmc conn */

struct end {
	int fd;
	struct usmc_conn *c;
};

static inline ssize_t end_send(struct end *e, const void *buf, size_t len)
{
	ssize_t n;

	if (e->fd < 0)
		return usmc_send(e->c, buf, len, 0);
	n = send(e->fd, buf, len, MSG_NOSIGNAL);
	return n < 0 ? -errno : n;
}

static inline ssize_t end_recv(struct end *e, void *buf, size_t len)
{
	ssize_t n;

	if (e->fd < 0)
		return usmc_recv(e->c, buf, len, 0);
	do
		n = recv(e->fd, buf, len, 0);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

static inline int end_close(struct end *e)
{
	int rc = e->fd < 0 ? usmc_close(e->c) : (close(e->fd) ? -errno : 0);

	e->fd = -1;
	e->c = NULL;
	return rc;
}

#define KPEER_MAX_LGRS 64

struct klgr {
	unsigned int id, conns;
	char role[8]; /* "client" / "server" */
	char version[12];
};

/* The kernel's SMC-R link groups (smc_kctl lgr); returns how many, or < 0. */
static inline int kpeer_lgrs(const char *kctl, struct klgr *out, int max)
{
	char cmd[512], line[512];
	int n = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "'%s' lgr", kctl);
	f = popen(cmd, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		struct klgr g = {0};

		if (sscanf(line, "lgr id=%x role=%7s conns=%u version=%11s", &g.id, g.role,
			   &g.conns, g.version) != 4)
			continue;
		if (n < max)
			out[n] = g;
		n++;
	}
	pclose(f);
	return n;
}

/* Link groups of @now that are not in @before (by id and role). */
static inline int kpeer_new_lgrs(const struct klgr *before, int nb, const struct klgr *now, int nn,
				 struct klgr *out)
{
	int k = 0;

	for (int i = 0; i < nn && i < KPEER_MAX_LGRS; i++) {
		bool old = false;

		for (int j = 0; j < nb && j < KPEER_MAX_LGRS; j++)
			old |= before[j].id == now[i].id && !strcmp(before[j].role, now[i].role);
		if (!old)
			out[k++] = now[i];
	}
	return k;
}

static inline struct sockaddr_in kpeer_addr(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* An AF_SMC listener on ip:port; returns the fd or -errno. */
static inline int kpeer_listen(const char *ip, int port, int backlog)
{
	struct sockaddr_in a = kpeer_addr(ip, port);
	int one = 1, fd = socket(AF_SMC, SOCK_STREAM | SOCK_CLOEXEC, SMCPROTO_SMC);

	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, backlog)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

/* An AF_SMC connection from src to dst:port; returns the fd or -errno. */
static inline int kpeer_connect(const char *src, const char *dst, int port)
{
	struct sockaddr_in s = kpeer_addr(src, 0), d = kpeer_addr(dst, port);
	int fd = socket(AF_SMC, SOCK_STREAM | SOCK_CLOEXEC, SMCPROTO_SMC);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&s, sizeof(s)) ||
	    connect(fd, (struct sockaddr *)&d, sizeof(d))) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

static inline int kpeer_local_port(int fd)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);

	return getsockname(fd, (struct sockaddr *)&a, &len) ? -errno : ntohs(a.sin_port);
}

/* Read or write a /proc/sys value (e.g. net/smc/smcr_testlink_time). */
static inline int kpeer_sysctl_get(const char *path, long *v)
{
	FILE *f = fopen(path, "r");
	int ok = f && fscanf(f, "%ld", v) == 1;

	if (f)
		fclose(f);
	return ok ? 0 : -EIO;
}

static inline int kpeer_sysctl_set(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	int ok = f && fprintf(f, "%ld\n", v) > 0;

	if (f && fclose(f))
		ok = 0;
	return ok ? 0 : -EIO;
}

#endif
