// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kcompat.h"
#include "log.h"
#include "env.h"
#include "opts.h"
#include "treiber.h"

#ifdef USMC_HAVE_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "smc_synopt_bpf.h" /* generated: the BPF object as a C array */
#endif

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71 /* Linux 5.14 */
#endif

#define KC_ENV	       "USMC_KERNEL_COMPAT"
#define KC_ENV_CGROUP  "USMC_KERNEL_COMPAT_CGROUP"
#define KC_ENV_VERBOSE "USMC_KERNEL_COMPAT_VERBOSE" /* let libbpf print its errors */
#define KC_PROG_NAME   "usmc_smc_synopt"
#define KC_ADOPT_NAME  "usmc_adopt_listener" /* cgroup/setsockopt: adopted listeners */

/*
 * The mode asked for. In a privileged process (env.h) the caller would
 * have the library load a BPF program and attach it to a cgroup, with the
 * program's privileges: kernel-compat is off there, whatever the
 * environment, and its variables are not read.
 */
static int kcompat_env_mode(const char *const *env, enum kc_mode *mode)
{
	if (env_privileged()) {
		*mode = KC_MODE_OFF;
		return 0;
	}
	return kcompat_mode_parse(env_secure_get(env, KC_ENV), mode);
}

#ifdef USMC_HAVE_BPF

/* The maps a child of fork() borrows (borrow_parent()), by index. */
enum { KC_MAP_SOCKS, KC_MAP_LISTENERS, KC_MAP_ESTAB, KC_MAPS_SHARED };

struct kcompat {
	struct bpf_object *obj;
	struct bpf_link *link;
	struct bpf_link *adopt_link; /* NULL: adopted listeners stay probed */
	int socks_fd;		     /* usmc_socks: per-socket flags, keyed by fd */
	int listeners_fd;	     /* usmc_listeners: per-port congestion + counters */
	char cgroup[PATH_MAX];	     /* where the program is attached (set once) */
	pid_t pid;		     /* the process that loaded it */
	bool can_adopt;		     /* the setsockopt hook is attached */
	/* a child of fork() using its parent's program (borrow_parent()): obj
	 * and the links are the parent's, socks_fd and listeners_fd duplicates,
	 * link_fd holds the program attached */
	bool borrowed;
	int link_fd;
	uint32_t ids[KC_MAPS_SHARED]; /* the maps' IDs, which a child checks */
	/* a child of fork() that loaded its own program: its parent's
	 * usmc_socks, if the parent had one (-1: none), which tells what the
	 * parent's program answered to a listener's connections queued before
	 * this process registered the port (kcompat_server_peer()) */
	int parent_socks_fd;

	/* usmc_peers, mapped read-only (NULL: not mappable, every client
	 * asks with bpf()); a connecting client holds one slot, taken from
	 * free_slots, until it has read it */
	const uint64_t *peers;
	size_t peers_len;
	const struct kc_lsn_estab *estab; /* usmc_estab, mapped read-only, or NULL */
	size_t estab_len;
	struct treiber_stack free_slots;
	_Atomic uint32_t slot_next[KC_PEER_SLOTS]; /* free_slots' links */
	uint32_t slot_gen[KC_PEER_SLOTS];	   /* each written by its slot's holder */
};

/* The instance this process loaded, for its children of fork() that
 * cannot load their own (borrow_parent()); its pid is written first. */
static _Atomic(struct kcompat *) kc_live;
static _Atomic pid_t kc_live_pid;

/* ---- loading ----------------------------------------------------------- */

static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return 0;
}

/* The cgroup v2 mount point, from /proc/self/mountinfo. */
static int cgroup2_mount(char *out, size_t cap)
{
	char line[1024], mnt[PATH_MAX];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	int rc = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		/* "... <mount point> <options> - cgroup2 <source> ..." */
		const char *sep = strstr(line, " - cgroup2 ");

		if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
			continue;
		if (snprintf(out, cap, "%s", mnt) < (int)cap)
			rc = 0;
		break;
	}
	fclose(f);
	return rc;
}

/* The process's own cgroup v2 directory ("0::<path>" in /proc/self/cgroup). */
static int own_cgroup(char *out, size_t cap)
{
	char mnt[PATH_MAX], line[PATH_MAX];
	FILE *f;
	int rc = cgroup2_mount(mnt, sizeof(mnt));

	if (rc)
		return rc;
	f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return -errno;
	rc = -ENOENT;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3))
			continue;
		line[strcspn(line, "\n")] = '\0';
		rc = snprintf(out, cap, "%s%s", mnt, line + 3) < (int)cap ? 0 : -ENAMETOOLONG;
		break;
	}
	fclose(f);
	return rc;
}

static int map_fd(struct bpf_object *obj, const char *name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(obj, name);

	return m ? bpf_map__fd(m) : -ENOENT;
}

/* The ID of the map behind @fd, 0 if it is none. */
static uint32_t map_id(int fd)
{
	struct bpf_map_info info = {0};
	uint32_t len = sizeof(info);

	return fd >= 0 && !bpf_obj_get_info_by_fd(fd, &info, &len) ? info.id : 0;
}

/* The program runs for every TCP socket of every process in the cgroup
 * and its descendants: say where, loudly if that is the whole host. */
static void log_attached(struct usmc_logger *log, const char *path, const char *how)
{
	char mnt[PATH_MAX];
	size_t n;
	bool root = false;

	if (!cgroup2_mount(mnt, sizeof(mnt))) {
		n = strlen(mnt);
		while (n > 1 && mnt[n - 1] == '/')
			n--;
		/* the mount point itself, with or without trailing slashes */
		root = !strncmp(path, mnt, n) && strspn(path + n, "/") == strlen(path + n);
	}
	usmc_log(log, USMC_LOG_INFO, "kernel-compat: BPF sock_ops program %s cgroup %s%s", how,
		 path,
		 root ? " (the root cgroup: it runs for every TCP connection of the host; "
			"USMC_KERNEL_COMPAT_CGROUP narrows it)"
		      : " (it runs for every TCP connection of the processes in this cgroup "
			"and below)");
}

/* Program @name attached to cgroup @cg with a link, which is detached
 * when this process exits, whatever happens; NULL if it cannot be. */
static struct bpf_link *attach_prog(struct kcompat *kc, const char *name, int cg)
{
	struct bpf_program *prog = bpf_object__find_program_by_name(kc->obj, name);

	if (!prog || !bpf_program__autoload(prog)) {
		errno = ENOENT;
		return NULL;
	}
	return bpf_program__attach_cgroup(prog, cg); /* NULL with errno */
}

/* Attach to @cgroup (USMC_KERNEL_COMPAT_CGROUP), or NULL: the process's own. */
static int attach(struct kcompat *kc, struct usmc_logger *log, const char *cgroup)
{
	char path[PATH_MAX];
	int cg, rc;

	if (cgroup && snprintf(path, sizeof(path), "%s", cgroup) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if (!cgroup && (rc = own_cgroup(path, sizeof(path))))
		return rc;
	cg = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg < 0)
		return -errno;
	kc->link = attach_prog(kc, KC_PROG_NAME, cg);
	rc = kc->link ? 0 : -errno;
	/* without it only listeners adopted already listening are probed */
	if (!rc)
		kc->adopt_link = attach_prog(kc, KC_ADOPT_NAME, cg);
	kc->can_adopt = kc->adopt_link != NULL;
	close(cg);
	if (rc) {
		kc->link = NULL;
		return rc;
	}
	snprintf(kc->cgroup, sizeof(kc->cgroup), "%s", path);
	log_attached(log, path, "attached to");
	return 0;
}

const char *kcompat_cgroup(const struct kcompat *kc)
{
	return kc && kc->cgroup[0] ? kc->cgroup : NULL;
}

/* A BPF_F_MMAPABLE array, mapped read-only: NULL if it cannot be. */
static const void *map_array_fd(int fd, size_t size, size_t *len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	void *p;

	*len = (size + page - 1) & ~(page - 1);
	if (fd < 0)
		return NULL;
	p = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

static const void *map_array(struct kcompat *kc, const char *name, size_t size, size_t *len)
{
	return map_array_fd(map_fd(kc->obj, name), size, len);
}

/* The mapping's stride is the array's element size, a multiple of 8
 * (kcompat_abi.h): usmc_peers holds __u64, and usmc_estab this. */
_Static_assert(sizeof(struct kc_lsn_estab) % 8 == 0,
	       "a mapped array's values are 8-byte aligned: no padding between ours");

/* The clients' slots: without them every client asks with bpf(). */
static void map_client_slots(struct kcompat *kc)
{
	kc->peers = map_array(kc, "usmc_peers", sizeof(uint64_t) * KC_PEER_SLOTS, &kc->peers_len);
	if (!kc->peers)
		return;
	treiber_init(&kc->free_slots, kc->slot_next, KC_PEER_SLOTS);
	for (uint32_t i = KC_PEER_SLOTS; i-- > 0;)
		treiber_push(&kc->free_slots, i);
}

/* Open and load the object; without @adopt its cgroup/setsockopt hook is
 * left out. */
static int load_obj(struct kcompat *kc, bool adopt)
{
	struct bpf_program *prog;

	kc->obj = bpf_object__open_mem(usmc_synopt_bpf, usmc_synopt_bpf_len, NULL);
	if (!kc->obj)
		return -errno ? -errno : -EINVAL;
	prog = bpf_object__find_program_by_name(kc->obj, KC_ADOPT_NAME);
	if (prog && !adopt)
		bpf_program__set_autoload(prog, false);
	return bpf_object__load(kc->obj);
}

static int load(struct kcompat *kc, struct usmc_logger *log, const char *cgroup)
{
	int rc = load_obj(kc, true);

	/* a kernel older than bpf_setsockopt() in cgroup/setsockopt (Linux
	 * 5.15) refuses the hook: the sock_ops program alone, as before */
	if (rc && rc != -EPERM) {
		bpf_object__close(kc->obj);
		rc = load_obj(kc, false);
	}
	if (rc)
		return rc;
	kc->socks_fd = map_fd(kc->obj, "usmc_socks");
	kc->listeners_fd = map_fd(kc->obj, "usmc_listeners");
	if (kc->socks_fd < 0 || kc->listeners_fd < 0)
		return -ENOENT;
	kc->ids[KC_MAP_SOCKS] = map_id(kc->socks_fd);
	kc->ids[KC_MAP_LISTENERS] = map_id(kc->listeners_fd);
	kc->ids[KC_MAP_ESTAB] = map_id(map_fd(kc->obj, "usmc_estab"));
	/* not mappable: every accepted socket's kind by a bpf() lookup */
	kc->estab = map_array(kc, "usmc_estab", sizeof(struct kc_lsn_estab) * KC_LSN_SLOTS,
			      &kc->estab_len);
	map_client_slots(kc);
	return attach(kc, log, cgroup);
}

void kcompat_close(struct kcompat *kc)
{
	if (!kc)
		return;
	if (kc->peers)
		munmap((void *)kc->peers, kc->peers_len);
	if (kc->estab)
		munmap((void *)kc->estab, kc->estab_len);
	if (kc->borrowed) { /* the parent's object, our duplicates */
		int fds[] = {kc->socks_fd, kc->listeners_fd, kc->link_fd};

		for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
			if (fds[i] >= 0)
				close(fds[i]);
		free(kc);
		return;
	}
	if (atomic_load(&kc_live_pid) == kc->pid) {
		struct kcompat *live = kc;

		atomic_compare_exchange_strong(&kc_live, &live, NULL);
	}
	if (kc->parent_socks_fd >= 0)
		close(kc->parent_socks_fd);
	bpf_link__destroy(kc->adopt_link);
	bpf_link__destroy(kc->link);
	bpf_object__close(kc->obj);
	free(kc);
}

/* A duplicate of the parent's map descriptor @fd, if it is still map @id:
 * the child may have closed it, and the number be another file now. */
static int dup_map(int fd, uint32_t id)
{
	int own = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;

	if (own >= 0 && (!id || map_id(own) != id)) {
		close(own);
		return -1;
	}
	return own;
}

/* The parent's usmc_estab, mapped again from a duplicate; NULL if not. */
static const struct kc_lsn_estab *borrow_estab(const struct kcompat *parent, size_t *len)
{
	int fd = dup_map(map_fd(parent->obj, "usmc_estab"), parent->ids[KC_MAP_ESTAB]);
	const void *p;

	if (fd < 0)
		return NULL;
	p = map_array_fd(fd, sizeof(struct kc_lsn_estab) * KC_LSN_SLOTS, len);
	close(fd); /* the mapping holds the map */
	return p;
}

/*
 * A child of fork() that cannot load its own program (it dropped its
 * privileges before making its context: nginx's workers) uses the one its
 * parent loaded, through the descriptors it inherited: the maps, and the
 * program's link, which a duplicate keeps attached while the child lives.
 * One program then serves the parent and all its children (their
 * listeners share the port's entry), whose sockets it already sees: they
 * are in the parent's cgroup unless moved. Without client slots (the
 * parent's free list is a copy): each connect asks with bpf().
 */
static struct kcompat *borrow_parent(struct usmc_logger *log)
{
	struct kcompat *parent = atomic_load(&kc_live), *kc;

	if (atomic_load(&kc_live_pid) == getpid() || !parent || !parent->link)
		return NULL;
	kc = calloc(1, sizeof(*kc));
	if (!kc)
		return NULL;
	kc->borrowed = true;
	kc->parent_socks_fd = -1; /* socks_fd is the parent's */
	kc->socks_fd = dup_map(parent->socks_fd, parent->ids[KC_MAP_SOCKS]);
	kc->listeners_fd = dup_map(parent->listeners_fd, parent->ids[KC_MAP_LISTENERS]);
	kc->link_fd = fcntl(bpf_link__fd(parent->link), F_DUPFD_CLOEXEC, 0);
	if (kc->socks_fd < 0 || kc->listeners_fd < 0 || kc->link_fd < 0) {
		kcompat_close(kc);
		return NULL;
	}
	kc->estab = borrow_estab(parent, &kc->estab_len);
	kc->can_adopt = parent->can_adopt;
	kc->pid = getpid();
	snprintf(kc->cgroup, sizeof(kc->cgroup), "%s", parent->cgroup);
	log_attached(log, kc->cgroup, "of the parent process, attached to");
	return kc;
}

/* In a child of fork() whose parent loaded a program: a duplicate of the
 * parent's usmc_socks, which the child's own program does not replace for
 * the sockets the parent's answered (an inherited listener's queue); -1 if
 * none. */
static int parent_socks(void)
{
	struct kcompat *parent = atomic_load(&kc_live);

	if (atomic_load(&kc_live_pid) == getpid() || !parent)
		return -1;
	return dup_map(parent->socks_fd, parent->ids[KC_MAP_SOCKS]);
}

int kcompat_open(struct kcompat **out, struct usmc_logger *log, const char *const *env)
{
	bool quiet = !env_secure_get(env, KC_ENV_VERBOSE);
	struct kcompat *kc;
	enum kc_mode mode;
	libbpf_print_fn_t old = NULL;
	int rc = kcompat_env_mode(env, &mode);

	*out = NULL;
	if (rc || mode == KC_MODE_OFF)
		return rc;
	kc = calloc(1, sizeof(*kc));
	if (!kc)
		return mode == KC_MODE_ON ? -ENOMEM : 0;
	kc->parent_socks_fd = -1;
	/* libbpf prints its failures to stderr; in auto mode a failure is an
	 * answer, not an error. (The print hook is process-wide.) */
	if (quiet)
		old = libbpf_set_print(quiet_print);
	rc = load(kc, log, env_secure_get(env, KC_ENV_CGROUP));
	if (quiet)
		libbpf_set_print(old);
	if (rc) {
		usmc_log(log, USMC_LOG_DEBUG, "kernel-compat: not attached: %s", log_errname(rc));
		kcompat_close(kc);
		*out = borrow_parent(log);
		return *out || mode != KC_MODE_ON ? 0 : rc;
	}
	kc->pid = getpid();
	kc->parent_socks_fd = parent_socks();
	/* the pid first: a reader that sees its own pid does not follow the
	 * pointer, which another thread may be closing */
	atomic_store(&kc_live_pid, kc->pid);
	atomic_store(&kc_live, kc);
	*out = kc;
	return 0;
}

/* ---- sockets ----------------------------------------------------------- */

/* A failure leaves the socket unmarked: the old rule applies to it. */
static int mark_sock(struct kcompat *kc, int fd, const struct kc_sock *s)
{
	return bpf_map_update_elem(kc->socks_fd, &fd, s, BPF_ANY);
}

static void mark(struct kcompat *kc, int fd)
{
	struct kc_sock s = {.flags = KC_SOCK_USMC};

	(void)mark_sock(kc, fd, &s);
}

/* A socket marked before its listen(): 0 or a negative errno. */
static int mark_listener(struct kcompat *kc, int fd)
{
	struct kc_sock s = {.flags = KC_SOCK_USMC};

	return mark_sock(kc, fd, &s) ? -errno : 0;
}

/* What usmc_socks @map_fd says about socket @fd. */
static enum kc_peer peer_in(int map_fd, int fd)
{
	struct kc_sock s;
	bool found = bpf_map_lookup_elem(map_fd, &fd, &s) == 0;

	return kc_peer_from_flags(found, found ? s.flags : 0);
}

static enum kc_peer peer_of(struct kcompat *kc, int fd)
{
	return peer_in(kc->socks_fd, fd);
}

uint32_t kcompat_mark_client(struct kcompat *kc, int fd)
{
	struct kc_sock s = {.flags = KC_SOCK_USMC};
	uint32_t slot;

	if (!kc)
		return 0;
	if (kc->peers && treiber_pop(&kc->free_slots, &slot)) {
		s.slot = slot + 1;
		do /* 0 is what a slot never written holds */
			s.gen = ++kc->slot_gen[slot];
		while (!s.gen);
	}
	if (mark_sock(kc, fd, &s))
		kcompat_client_forget(kc, &s.slot);
	return s.slot;
}

void kcompat_client_forget(struct kcompat *kc, uint32_t *ticket)
{
	if (kc && *ticket)
		treiber_push(&kc->free_slots, *ticket - 1);
	*ticket = 0;
}

enum kc_peer kcompat_client_peer(struct kcompat *kc, int fd, uint32_t *ticket)
{
	uint32_t slot;
	uint64_t v;
	bool mine;

	if (!kc)
		return KC_PEER_UNKNOWN;
	if (!*ticket)
		return peer_of(kc, fd);
	slot = *ticket - 1;
	v = __atomic_load_n(&kc->peers[slot], __ATOMIC_ACQUIRE);
	mine = (uint32_t)(v >> KC_PEER_GEN_SHIFT) == kc->slot_gen[slot];
	kcompat_client_forget(kc, ticket);
	/* not written for this holder: the program did not see the SYN-ACK
	 * (detached since?): the socket's storage says what it knows */
	return mine ? kc_peer_from_flags(true, (uint32_t)(v & KC_PEER_FLAGS_MASK))
		    : peer_of(kc, fd);
}

static int netns_cookie(int fd, uint64_t *out)
{
	socklen_t len = sizeof(*out);

	return getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, out, &len) ? -errno : 0;
}

/* Register @fd's port in usmc_listeners and set @ls's key, slot and
 * taken[]: 0, or a negative errno (ls->key may be set then). */
static int listener_register(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	struct kc_listen_val v = {0};
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint64_t cookie;
	int rc;

	memset(ls, 0, sizeof(*ls));
	if (!kc)
		return -EINVAL;
	if (netns_cookie(fd, &cookie) || getsockname(fd, (struct sockaddr *)&ss, &len))
		return -errno;
	rc = kc_listen_key_make(cookie, (struct sockaddr *)&ss, &ls->key);
	if (rc)
		return rc;
	ls->slot = kc_listen_slot(ls->key.netns_cookie, ls->key.port);
	/* what the slot counted before this listener (one closed on the same
	 * port, one sharing the slot; an adopted socket's queue, which
	 * uncounted covers) is not ours to take */
	for (int k = 0; kc->estab && k < KC_ESTAB_KINDS; k++)
		atomic_init(&ls->taken[k],
			    __atomic_load_n(&kc->estab[ls->slot].n[k], __ATOMIC_RELAXED));
	/* a port shared with another usmc listener (SO_REUSEPORT), or marked
	 * before its listen() (kcompat_listener_mark()), keeps the entry it
	 * has: one congestion state per port */
	if (bpf_map_update_elem(kc->listeners_fd, &ls->key, &v, BPF_NOEXIST) && errno != EEXIST)
		return -errno;
	return 0;
}

void kcompat_listener_prepare(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	if (!listener_register(kc, fd, ls))
		mark(kc, fd);
}

int kcompat_listener_mark(struct kcompat *kc, int fd)
{
	struct kcompat_lsn ls;
	int rc;

	if (!kc)
		return 0;
	rc = listener_register(kc, fd, &ls);
	if (!rc)
		rc = mark_listener(kc, fd);
	return rc;
}

void kcompat_listener_started(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	if (!kc || !ls->key.port)
		return;
	/* the program ran at listen(): it also sees this listener's SYNs */
	ls->active = peer_of(kc, fd) != KC_PEER_UNKNOWN;
	if (!ls->active)
		kcompat_listener_forget(kc, ls);
}

/* The connections in the accept queue of listener @fd: TCP_INFO of a
 * listener reports sk_ack_backlog in tcpi_unacked (net/ipv4/tcp.c
 * tcp_get_info()); 0 if unknown. */
static uint32_t accept_queue_len(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) ? 0 : ti.tcpi_unacked;
}

void kcompat_listener_adopt(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	bool premarked;
	int one = 1;

	if (listener_register(kc, fd, ls)) {
		kcompat_listener_forget(kc, ls);
		return;
	}
	/* marked before its listen() (kcompat_listener_mark()), or adopted
	 * before: the program gave it the option callbacks, and marking it
	 * again would clear KC_SOCK_SEEN. Else the program saw no listen() of
	 * ours: its setsockopt hook gives the listener what
	 * on_connect_or_listen() gives one at listen() */
	premarked = peer_of(kc, fd) != KC_PEER_UNKNOWN;
	if (!premarked)
		mark(kc, fd);
	if (premarked ||
	    (kc->can_adopt && !setsockopt(fd, IPPROTO_TCP, KC_SOCKOPT_ADOPT, &one, sizeof(one))))
		/* queued before this listener was registered: counted in
		 * usmc_estab before taken[] was read (premarked: the port had
		 * its entry), or not at all; each asks the socket's storage
		 * (read after registering: an upper bound) */
		atomic_init(&ls->uncounted, accept_queue_len(fd));
	kcompat_listener_started(kc, fd, ls);
}

void kcompat_listener_set_congested(struct kcompat *kc, struct kcompat_lsn *ls, bool congested)
{
	struct kc_listen_val v;

	/* called by the accept thread and the handshake workers: only the
	 * thread that flips the cached value writes the map */
	if (!kc || !ls->active || atomic_exchange(&ls->congested, congested) == congested)
		return;
	/* read-modify-write of the flag only; the counters are the program's
	 * and may move in between (a lost increment is a statistic) */
	if (bpf_map_lookup_elem(kc->listeners_fd, &ls->key, &v))
		return;
	v.congested = congested;
	(void)bpf_map_update_elem(kc->listeners_fd, &ls->key, &v, BPF_EXIST);
}

void kcompat_listener_set_storm(struct kcompat *kc, struct kcompat_lsn *ls, int64_t until_ns)
{
	struct kc_listen_val v;
	int64_t last;

	if (!kc || !ls->active)
		return;
	last = atomic_load(&ls->storm_until_ns);
	/* one writer per step: the one that moves the cached value on */
	if (until_ns < last + KC_STORM_STEP_NS ||
	    !atomic_compare_exchange_strong(&ls->storm_until_ns, &last, until_ns))
		return;
	if (bpf_map_lookup_elem(kc->listeners_fd, &ls->key, &v))
		return;
	v.storm_until_ns = (__u64)until_ns;
	(void)bpf_map_update_elem(kc->listeners_fd, &ls->key, &v, BPF_EXIST);
}

int kcompat_listener_counters(struct kcompat *kc, const struct kcompat_lsn *ls,
			      struct kc_listen_val *out)
{
	if (!kc || !ls->key.port)
		return -ENOENT;
	return bpf_map_lookup_elem(kc->listeners_fd, &ls->key, out) ? -errno : 0;
}

void kcompat_listener_forget(struct kcompat *kc, struct kcompat_lsn *ls)
{
	/* a borrowed program's entry is the process tree's: pre-fork workers
	 * share it, and one that ends must not take it from the others (it
	 * outlives them: without a marked listener no SYN-ACK reads it) */
	if (kc && ls->key.port && !kc->borrowed)
		(void)bpf_map_delete_elem(kc->listeners_fd, &ls->key);
	memset(ls, 0, sizeof(*ls));
}

static const enum kc_peer peer_of_kind[KC_ESTAB_KINDS] = {
	[KC_ESTAB_PLAIN] = KC_PEER_NOSMC,
	[KC_ESTAB_SMC] = KC_PEER_SMC,
	[KC_ESTAB_CONGESTED] = KC_PEER_CONGESTED,
};

/* The kind whose sockets peer_of_kind[] says are @p's. */
static enum kc_estab_kind kind_of_peer(enum kc_peer p)
{
	for (int k = 0; k < KC_ESTAB_KINDS; k++)
		if (peer_of_kind[k] == p)
			return (enum kc_estab_kind)k;
	return KC_ESTAB_PLAIN; /* unreachable: kcompat_server_peer() maps to one */
}

/* The kind of an accepted socket from the mapped counts, or -1. */
static int estab_kind(struct kcompat *kc, struct kcompat_lsn *ls)
{
	uint64_t est[KC_ESTAB_KINDS], taken[KC_ESTAB_KINDS];

	if (!kc->estab)
		return -1;
	for (int k = 0; k < KC_ESTAB_KINDS; k++) {
		/* the program counted this socket before accept() could take
		 * the socket's lock (kcompat_abi.h usmc_estab), so it is in */
		est[k] = __atomic_load_n(&kc->estab[ls->slot].n[k], __ATOMIC_RELAXED);
		taken[k] = atomic_load_explicit(&ls->taken[k], memory_order_relaxed);
	}
	return kc_estab_deduce(est, taken);
}

/* One of the sockets queued when an adopted listener was registered? The
 * first ones accepted are: the queue is taken in order. */
static bool take_uncounted(struct kcompat_lsn *ls)
{
	unsigned int n = atomic_load_explicit(&ls->uncounted, memory_order_relaxed);

	while (n && !atomic_compare_exchange_weak(&ls->uncounted, &n, n - 1))
		;
	return n != 0;
}

enum kc_peer kcompat_server_peer(struct kcompat *kc, struct kcompat_lsn *ls, int fd)
{
	enum kc_peer p;
	int kind;

	if (!kc || !ls->active)
		return KC_PEER_UNKNOWN;
	if (take_uncounted(ls)) {
		/* established before this listener was registered: the
		 * socket's storage answers, and taken[] stays as it is, as more
		 * taken than counted would hide a pending socket */
		atomic_fetch_add_explicit(&ls->lookups, 1, memory_order_relaxed);
		p = peer_of(kc, fd);
		/* a socket our program never saw: the parent's (which marked
		 * the socket before its listen()) may have answered its SYN */
		if (p == KC_PEER_UNKNOWN && kc->parent_socks_fd >= 0)
			p = peer_in(kc->parent_socks_fd, fd);
		return p == KC_PEER_UNKNOWN ? KC_PEER_NOSMC : p;
	}
	kind = estab_kind(kc, ls);
	if (kind >= 0) {
		p = peer_of_kind[kind];
	} else {
		atomic_fetch_add_explicit(&ls->lookups, 1, memory_order_relaxed);
		p = peer_of(kc, fd);
		/* the program gives an accepted socket storage only when its
		 * SYN had the option: no storage means the peer is plain TCP */
		if (p == KC_PEER_UNKNOWN)
			p = KC_PEER_NOSMC;
		kind = kind_of_peer(p);
	}
	atomic_fetch_add_explicit(&ls->taken[kind], 1, memory_order_relaxed);
	return p;
}

#else /* !USMC_HAVE_BPF: built without libbpf or clang */

struct kcompat {
	int unused;
};

const char *kcompat_cgroup(const struct kcompat *kc)
{
	return NULL;
}

int kcompat_open(struct kcompat **out, struct usmc_logger *log, const char *const *env)
{
	enum kc_mode mode;
	int rc = kcompat_env_mode(env, &mode);

	*out = NULL;
	if (rc)
		return rc;
	return mode == KC_MODE_ON ? -EOPNOTSUPP : 0;
}

void kcompat_close(struct kcompat *kc)
{
}

uint32_t kcompat_mark_client(struct kcompat *kc, int fd)
{
	return 0;
}

void kcompat_client_forget(struct kcompat *kc, uint32_t *ticket)
{
	*ticket = 0;
}

enum kc_peer kcompat_client_peer(struct kcompat *kc, int fd, uint32_t *ticket)
{
	return KC_PEER_UNKNOWN;
}

void kcompat_listener_prepare(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	memset(ls, 0, sizeof(*ls));
}

void kcompat_listener_adopt(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
	memset(ls, 0, sizeof(*ls));
}

int kcompat_listener_mark(struct kcompat *kc, int fd)
{
	return 0;
}

void kcompat_listener_started(struct kcompat *kc, int fd, struct kcompat_lsn *ls)
{
}

void kcompat_listener_set_congested(struct kcompat *kc, struct kcompat_lsn *ls, bool congested)
{
}

void kcompat_listener_set_storm(struct kcompat *kc, struct kcompat_lsn *ls, int64_t until_ns)
{
}

int kcompat_listener_counters(struct kcompat *kc, const struct kcompat_lsn *ls,
			      struct kc_listen_val *out)
{
	return -ENOENT;
}

void kcompat_listener_forget(struct kcompat *kc, struct kcompat_lsn *ls)
{
}

enum kc_peer kcompat_server_peer(struct kcompat *kc, struct kcompat_lsn *ls, int fd)
{
	return KC_PEER_UNKNOWN;
}

#endif /* USMC_HAVE_BPF */
