// SPDX-License-Identifier: MIT
/*
 * smc_kctl: the few controls of the Linux kernel's SMC the interop tests need
 * (smc-tools is not in Debian 12), over raw netlink:
 *
 *   smc_kctl ueid add|del <EID>   user EID (generic netlink SMC_GEN_NETLINK)
 *   smc_kctl ueid flush | show
 *   smc_kctl lgr                  SMC-R link groups (role, conns, SMC version)
 *   smc_kctl links                link groups with their type (SINGLE,
 *                                 SYMMETRIC...) and each link: RDMA device,
 *                                 GIDs, state (two links: two RoCE paths)
 *   smc_kctl pnet add <PNETID> eth <netdev> | ib <rdma dev>
 *   smc_kctl pnet flush           the pnet table (generic netlink
 *                                 SMC_PNETID): which devices share a network
 *   smc_kctl stats                the kernel's SMC counters, one line of
 *                                 key=value: SMC-R handshakes, fallbacks and
 *                                 failed handshakes, client and server side
 *   smc_kctl diag                 kernel SMC sockets (smc_diag): mode
 *                                 (SMC-R / SMC-D / fallback), fallback reason,
 *                                 an SMC-R connection's cursors
 *
 * Needs `modprobe smc smc_diag`; root for ueid add/del/flush.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/smc.h>
#include <linux/smc_diag.h>
#include <linux/sock_diag.h>

#include "reason.h"
#include "smc_kstats.h"
#include "smc_nl.h"

#ifndef AF_SMC
#define AF_SMC 43
#endif
#define SMC_EID_LEN 32

static void __attribute__((noreturn)) die(const char *what, int err)
{
	fprintf(stderr, "smc_kctl: %s: %s\n", what, strerror(err));
	exit(1);
}

static int smc_genl(uint8_t cmd, uint16_t flags, const char *eid, nl_cb cb, void *arg)
{
	union nlbuf req;
	int err = genl_start(&req, SMC_GENL_FAMILY_NAME, cmd, SMC_GENL_FAMILY_VERSION, flags);

	if (err)
		die("generic netlink family " SMC_GENL_FAMILY_NAME " (modprobe smc?)", err);
	if (eid)
		nl_attr(&req, SMC_NLA_EID_TABLE_ENTRY, eid, SMC_EID_LEN + 1);
	return nl_talk(NETLINK_GENERIC, &req, cb, arg);
}

/* The kernel wants exactly 32 characters: upper case, blank padded. */
static void make_eid(char out[SMC_EID_LEN + 1], const char *in)
{
	size_t n = strlen(in);

	if (!n || n > SMC_EID_LEN) {
		fprintf(stderr, "smc_kctl: an EID has 1 to %d characters\n", SMC_EID_LEN);
		exit(2);
	}
	memset(out, ' ', SMC_EID_LEN);
	out[SMC_EID_LEN] = '\0';
	for (size_t i = 0; i < n; i++)
		out[i] = (char)toupper((unsigned char)in[i]);
}

static int ueid_show_cb(const struct nlmsghdr *h, void *arg)
{
	for_each_nlattr(a, genl_attrs(h), genl_attrlen(h))
	{
		if (nla_type_of(a) != SMC_NLA_EID_TABLE_ENTRY)
			continue;
		int len = (int)strnlen(nla_data_of(a), nla_len_of(a));
		const char *s = nla_data_of(a);

		while (len && s[len - 1] == ' ')
			len--;
		printf("%.*s\n", len, s);
		++*(int *)arg;
	}
	return 0;
}

static int cmd_ueid(int argc, char **argv)
{
	char eid[SMC_EID_LEN + 1];
	int err, count = 0;

	if (argc == 2 && !strcmp(argv[0], "add")) {
		make_eid(eid, argv[1]);
		err = smc_genl(SMC_NETLINK_ADD_UEID, NLM_F_ACK, eid, NULL, NULL);
	} else if (argc == 2 && !strcmp(argv[0], "del")) {
		make_eid(eid, argv[1]);
		err = smc_genl(SMC_NETLINK_REMOVE_UEID, NLM_F_ACK, eid, NULL, NULL);
	} else if (argc == 1 && !strcmp(argv[0], "flush")) {
		err = smc_genl(SMC_NETLINK_FLUSH_UEID, NLM_F_ACK, NULL, NULL, NULL);
	} else if (argc == 1 && !strcmp(argv[0], "show")) {
		err = smc_genl(SMC_NETLINK_DUMP_UEID, NLM_F_DUMP, NULL, ueid_show_cb, &count);
	} else {
		fprintf(stderr, "usage: smc_kctl ueid add|del <EID> | flush | show\n");
		return 2;
	}
	if (err)
		die("ueid", err);
	return 0;
}

static int lgr_cb(const struct nlmsghdr *h, void *arg)
{
	for_each_nlattr(top, genl_attrs(h), genl_attrlen(h))
	{
		if (nla_type_of(top) != SMC_GEN_LGR_SMCR)
			continue;
		unsigned id = 0, conns = 0, role = 0, ver = 1, rel = 0;
		char eid[SMC_EID_LEN + 1] = "";

		for_each_nlattr(a, nla_data_of(top), nla_len_of(top))
		{
			switch (nla_type_of(a)) {
			case SMC_NLA_LGR_R_ID:
				id = *(const uint32_t *)nla_data_of(a);
				break;
			case SMC_NLA_LGR_R_ROLE:
				role = *(const uint8_t *)nla_data_of(a);
				break;
			case SMC_NLA_LGR_R_CONNS_NUM:
				conns = *(const uint32_t *)nla_data_of(a);
				break;
			case SMC_NLA_LGR_R_V2_COMMON:
				for_each_nlattr(v, nla_data_of(a), nla_len_of(a))
				{
					if (nla_type_of(v) == SMC_NLA_LGR_V2_VER)
						ver = *(const uint8_t *)nla_data_of(v);
					else if (nla_type_of(v) == SMC_NLA_LGR_V2_REL)
						rel = *(const uint8_t *)nla_data_of(v);
					else if (nla_type_of(v) == SMC_NLA_LGR_V2_NEG_EID)
						snprintf(eid, sizeof(eid), "%.*s",
							 (int)nla_len_of(v),
							 (const char *)nla_data_of(v));
				}
				break;
			}
		}
		for (size_t n = strlen(eid); n && eid[n - 1] == ' ';)
			eid[--n] = '\0';
		printf("lgr id=0x%x role=%s conns=%u version=SMC-Rv%u release=%u eid=\"%s\"\n", id,
		       role ? "server" : "client", conns, ver, rel, eid);
		++*(int *)arg;
	}
	return 0;
}

static int cmd_lgr(void)
{
	int count = 0, err = smc_genl(SMC_NETLINK_GET_LGR_SMCR, NLM_F_DUMP, NULL, lgr_cb, &count);

	if (err)
		die("link group dump", err);
	if (!count)
		printf("no SMC-R link group\n");
	return 0;
}

/* The pnet table (net/smc/smc_pnet.c smc_pnet_enter()): an Ethernet or
 * RDMA device (port 1) gets a PNETID; link groups only use devices of the
 * PNETID of their first link's. */
static int cmd_pnet(int argc, char **argv)
{
	union nlbuf req;
	uint8_t cmd = argc == 1 && !strcmp(argv[0], "flush") ? SMC_PNETID_FLUSH : SMC_PNETID_ADD;
	int err;

	if (cmd == SMC_PNETID_ADD && (argc != 4 || strcmp(argv[0], "add") ||
				      (strcmp(argv[2], "eth") && strcmp(argv[2], "ib")))) {
		fprintf(stderr, "usage: smc_kctl pnet add <PNETID> eth <netdev> | ib <rdma dev>\n"
				"       smc_kctl pnet flush\n");
		return 2;
	}
	/* These commands answer nothing but the ack: ask for it. */
	err = genl_start(&req, SMCR_GENL_FAMILY_NAME, cmd, SMCR_GENL_FAMILY_VERSION, NLM_F_ACK);
	if (err)
		die("generic netlink family " SMCR_GENL_FAMILY_NAME " (modprobe smc?)", err);
	if (cmd == SMC_PNETID_ADD) {
		uint8_t port = 1;

		nl_attr(&req, SMC_PNETID_NAME, argv[1], strlen(argv[1]) + 1);
		if (!strcmp(argv[2], "eth")) {
			nl_attr(&req, SMC_PNETID_ETHNAME, argv[3], strlen(argv[3]) + 1);
		} else {
			nl_attr(&req, SMC_PNETID_IBNAME, argv[3], strlen(argv[3]) + 1);
			nl_attr(&req, SMC_PNETID_IBPORT, &port, sizeof(port));
		}
	}
	err = nl_talk(NETLINK_GENERIC, &req, NULL, NULL);
	if (err && !(cmd == SMC_PNETID_FLUSH && err == ENOENT)) /* an empty table */
		die("pnet table", err);
	return 0;
}

/* enum smc_lgr_type and enum smc_link_state of net/smc/smc_core.h (kernel
 * internal), as the link dump carries them. */
static const char *lgr_type_name(unsigned t)
{
	static const char *const names[] = {"NONE", "SINGLE", "SYMMETRIC", "ASYMMETRIC_PEER",
					    "ASYMMETRIC_LOCAL"};

	return t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

static const char *link_state_name(unsigned s)
{
	static const char *const names[] = {"UNUSED", "INACTIVE", "ACTIVATING", "ACTIVE"};

	return s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

static unsigned nla_uint(const struct nlattr *a)
{
	switch (nla_len_of(a)) {
	case 1:
		return *(const uint8_t *)nla_data_of(a);
	case 2:
		return *(const uint16_t *)nla_data_of(a);
	case 4:
		return *(const uint32_t *)nla_data_of(a);
	}
	return 0;
}

/* A link dump answer: a link group (SMC_GEN_LGR_SMCR) or one of its usable
 * links (SMC_GEN_LINK_SMCR), in that order (net/smc/smc_core.c
 * smc_nl_handle_lgr()). */
static int links_cb(const struct nlmsghdr *h, void *arg)
{
	for_each_nlattr(top, genl_attrs(h), genl_attrlen(h))
	{
		if (nla_type_of(top) == SMC_GEN_LGR_SMCR) {
			unsigned id = 0, role = 0, type = 0, conns = 0;

			for_each_nlattr(a, nla_data_of(top), nla_len_of(top))
			{
				if (nla_type_of(a) == SMC_NLA_LGR_R_ID)
					id = nla_uint(a);
				else if (nla_type_of(a) == SMC_NLA_LGR_R_ROLE)
					role = nla_uint(a);
				else if (nla_type_of(a) == SMC_NLA_LGR_R_TYPE)
					type = nla_uint(a);
				else if (nla_type_of(a) == SMC_NLA_LGR_R_CONNS_NUM)
					conns = nla_uint(a);
			}
			printf("lgr id=0x%x role=%s type=%s conns=%u\n", id,
			       role ? "server" : "client", lgr_type_name(type), conns);
			++*(int *)arg;
		} else if (nla_type_of(top) == SMC_GEN_LINK_SMCR) {
			unsigned id = 0, port = 0, conns = 0, state = 0, ifindex = 0;
			char dev[64] = "?", gid[64] = "?", peer[64] = "?";

			for_each_nlattr(a, nla_data_of(top), nla_len_of(top))
			{
				const char *str = nla_data_of(a);
				int len = (int)strnlen(str, nla_len_of(a));

				switch (nla_type_of(a)) {
				case SMC_NLA_LINK_ID:
					id = nla_uint(a);
					break;
				case SMC_NLA_LINK_IB_DEV:
					snprintf(dev, sizeof(dev), "%.*s", len, str);
					break;
				case SMC_NLA_LINK_IB_PORT:
					port = nla_uint(a);
					break;
				case SMC_NLA_LINK_GID:
					snprintf(gid, sizeof(gid), "%.*s", len, str);
					break;
				case SMC_NLA_LINK_PEER_GID:
					snprintf(peer, sizeof(peer), "%.*s", len, str);
					break;
				case SMC_NLA_LINK_CONN_CNT:
					conns = nla_uint(a);
					break;
				case SMC_NLA_LINK_NET_DEV:
					ifindex = nla_uint(a);
					break;
				case SMC_NLA_LINK_STATE:
					state = nla_uint(a);
					break;
				}
			}
			printf("  link id=%u dev=%s port=%u ifindex=%u gid=%s peer_gid=%s state=%s "
			       "conns=%u\n",
			       id, dev, port, ifindex, gid, peer, link_state_name(state), conns);
		}
	}
	return 0;
}

static int cmd_links(void)
{
	int count = 0,
	    err = smc_genl(SMC_NETLINK_GET_LINK_SMCR, NLM_F_DUMP, NULL, links_cb, &count);

	if (err)
		die("link dump", err);
	if (!count)
		printf("no SMC-R link group\n");
	return 0;
}

static const char *state_name(unsigned s)
{
	/* enum smc_state of net/smc/smc.h (kernel internal). */
	switch (s) {
	case 1:
		return "ACTIVE";
	case 2:
		return "INIT";
	case 7:
		return "CLOSED";
	case 10:
		return "LISTEN";
	case 20:
		return "PEERCLOSEWAIT1";
	case 21:
		return "PEERCLOSEWAIT2";
	case 22:
		return "APPCLOSEWAIT1";
	case 23:
		return "APPCLOSEWAIT2";
	case 24:
		return "APPFINCLOSEWAIT";
	case 25:
		return "PEERFINCLOSEWAIT";
	case 26:
		return "PEERABORTWAIT";
	case 27:
		return "PROCESSABORT";
	}
	return "?";
}

static void format_addr(char *out, size_t size, const __be32 a[4], __be16 port)
{
	char ip[INET6_ADDRSTRLEN];

	if (!a[1] && !a[2] && !a[3]) {
		inet_ntop(AF_INET, a, ip, sizeof(ip));
		snprintf(out, size, "%s:%u", ip, ntohs(port));
	} else {
		inet_ntop(AF_INET6, a, ip, sizeof(ip));
		snprintf(out, size, "[%s]:%u", ip, ntohs(port));
	}
}

/* The connection's cursors (net/smc/smc_diag.c __smc_diag_dump(): rx_* as
 * the peer's last CDC set them, tx_* as this end's next CDC will carry
 * them, tx_prep/sent/fin in its send buffer) and flags, as wrap:count. */
static void print_conninfo(const struct smc_diag_conninfo *ci)
{
	printf(" token=%08x rmbe=%u peer_rmbe=%u rx_prod=%u:%u rx_cons=%u:%u tx_prod=%u:%u "
	       "tx_cons=%u:%u rx_flags=%02x/%02x tx_flags=%02x/%02x tx_prep=%u:%u tx_sent=%u:%u "
	       "tx_fin=%u:%u",
	       ci->token, ci->rmbe_size, ci->peer_rmbe_size, ci->rx_prod.wrap, ci->rx_prod.count,
	       ci->rx_cons.wrap, ci->rx_cons.count, ci->tx_prod.wrap, ci->tx_prod.count,
	       ci->tx_cons.wrap, ci->tx_cons.count, ci->rx_prod_flags, ci->rx_conn_state_flags,
	       ci->tx_prod_flags, ci->tx_conn_state_flags, ci->tx_prep.wrap, ci->tx_prep.count,
	       ci->tx_sent.wrap, ci->tx_sent.count, ci->tx_fin.wrap, ci->tx_fin.count);
}

static int diag_cb(const struct nlmsghdr *h, void *arg)
{
	const char *data = NLMSG_DATA(h);
	/* Netlink aligns to 4, smc_diag_msg has a u64: copy it out. */
	struct smc_diag_msg msg, *m = &msg;
	const struct smc_diag_fallback *fb = NULL;
	const struct smc_diag_lgrinfo *lgr = NULL;
	const struct smc_diag_conninfo *ci = NULL;
	const char *mode = "?", *rsn = "-";
	char src[64], dst[64];
	size_t off = NLMSG_ALIGN(sizeof(*m));

	if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
		return 0;
	memcpy(&msg, data, sizeof(msg));
	for_each_nlattr(a, data + off, h->nlmsg_len - NLMSG_LENGTH(off))
	{
		if (nla_type_of(a) == SMC_DIAG_FALLBACK && nla_len_of(a) >= sizeof(*fb))
			fb = nla_data_of(a);
		else if (nla_type_of(a) == SMC_DIAG_LGRINFO && nla_len_of(a) >= sizeof(*lgr))
			lgr = nla_data_of(a);
		else if (nla_type_of(a) == SMC_DIAG_CONNINFO && nla_len_of(a) >= sizeof(*ci))
			ci = nla_data_of(a);
	}
	switch (m->diag_mode) {
	case SMC_DIAG_MODE_SMCR:
		mode = "SMC-R";
		break;
	case SMC_DIAG_MODE_SMCD:
		mode = "SMC-D";
		break;
	case SMC_DIAG_MODE_FALLBACK_TCP:
		mode = "fallback";
		break;
	}
	if (fb && fb->reason) {
		const struct usmc_reason_desc *d = usmc_reason_lookup(fb->reason);

		rsn = d ? d->name : "unknown";
	}
	format_addr(src, sizeof(src), m->id.idiag_src, m->id.idiag_sport);
	format_addr(dst, sizeof(dst), m->id.idiag_dst, m->id.idiag_dport);
	printf("sock inode=%llu state=%s mode=%s local=%s peer=%s fallback=0x%08x(%s) "
	       "peer_diagnosis=0x%08x",
	       (unsigned long long)m->diag_inode, state_name(m->diag_state), mode, src, dst,
	       fb ? fb->reason : 0, rsn, fb ? fb->peer_diagnosis : 0);
	if (lgr)
		printf(" ibdev=%.*s role=%s gid=%.40s peer_gid=%.40s",
		       (int)sizeof(lgr->lnk[0].ibname), (const char *)lgr->lnk[0].ibname,
		       lgr->role ? "server" : "client", (const char *)lgr->lnk[0].gid,
		       (const char *)lgr->lnk[0].peer_gid);
	if (ci)
		print_conninfo(ci);
	printf("\n");
	++*(int *)arg;
	return 0;
}

static int cmd_diag(void)
{
	struct smc_diag_req r = {
		.diag_family = AF_SMC,
		.diag_ext = 1 << (SMC_DIAG_LGRINFO - 1) | 1 << (SMC_DIAG_CONNINFO - 1),
	};
	union nlbuf req;
	int count = 0, err;

	nl_init(&req, SOCK_DIAG_BY_FAMILY, NLM_F_DUMP);
	nl_put(&req, &r, sizeof(r));
	err = nl_talk(NETLINK_SOCK_DIAG, &req, diag_cb, &count);
	if (err)
		die("smc_diag dump (modprobe smc_diag?)", err);
	if (!count)
		printf("no SMC socket\n");
	return 0;
}

static int cmd_stats(void)
{
	struct smc_kstats ks;
	int err = smc_kstats_read(&ks);

	if (err)
		die("the kernel's SMC statistics (modprobe smc?)", err);
	printf("clnt_smcr=%llu srv_smcr=%llu clnt_fback=%llu srv_fback=%llu clnt_hs_err=%llu "
	       "srv_hs_err=%llu\n",
	       (unsigned long long)ks.clnt_smcr, (unsigned long long)ks.srv_smcr,
	       (unsigned long long)ks.clnt_fback, (unsigned long long)ks.srv_fback,
	       (unsigned long long)ks.clnt_hs_err, (unsigned long long)ks.srv_hs_err);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "ueid"))
		return cmd_ueid(argc - 2, argv + 2);
	if (argc == 2 && !strcmp(argv[1], "lgr"))
		return cmd_lgr();
	if (argc >= 2 && !strcmp(argv[1], "pnet"))
		return cmd_pnet(argc - 2, argv + 2);
	if (argc == 2 && !strcmp(argv[1], "links"))
		return cmd_links();
	if (argc == 2 && !strcmp(argv[1], "diag"))
		return cmd_diag();
	if (argc == 2 && !strcmp(argv[1], "stats"))
		return cmd_stats();
	fprintf(stderr,
		"usage: smc_kctl ueid add|del <EID> | ueid flush | ueid show\n"
		"       smc_kctl pnet add <PNETID> eth <netdev> | ib <rdma dev> | pnet flush\n"
		"       smc_kctl lgr | links | diag | stats\n");
	return 2;
}
