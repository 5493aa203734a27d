// SPDX-License-Identifier: MIT
/*
 * Kernel-compatible mode, its program (docs/kernel-compat.md): which mode
 * the environment asks for, loading the BPF program and attaching it to
 * the process's cgroup, or borrowing a parent's after fork(); its maps.
 * kcompat_sock.c marks the sockets and reads what the program recorded.
 */
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

#include "kcompat_int.h"
#include "log.h"
#include "env.h"
#include "opts.h"
#include "treiber.h"

#ifdef USMC_HAVE_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "smc_synopt_bpf.h" /* generated: the BPF object as a C array */
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

#else /* !USMC_HAVE_BPF: built without libbpf or clang */

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

#endif /* USMC_HAVE_BPF */
