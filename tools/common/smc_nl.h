/* SPDX-License-Identifier: MIT */
/*
 * A small netlink client for talking to the Linux kernel's SMC (smc-tools
 * is not everywhere): build a request, send it, walk the answers and their
 * attributes. Used for generic netlink (the "SMC_GEN_NETLINK" family:
 * UEIDs, link groups, statistics) and for sock_diag dumps (smc_diag).
 *
 *   union nlbuf req;
 *   int err = genl_start(&req, SMC_GENL_FAMILY_NAME, SMC_NETLINK_GET_STATS,
 *                        SMC_GENL_FAMILY_VERSION, NLM_F_DUMP);
 *   if (!err)
 *           err = nl_talk(NETLINK_GENERIC, &req, my_cb, &state);
 *
 * Errors are positive errno values (0: success), as the kernel's acks.
 */
#ifndef USMC_TOOLS_SMC_NL_H
#define USMC_TOOLS_SMC_NL_H

#include <stddef.h>
#include <stdint.h>

#include <linux/genetlink.h>
#include <linux/netlink.h>

union nlbuf {
	struct nlmsghdr h;
	char raw[32768];
};

/* Called for each answer message; a non-zero return ends nl_talk() with it. */
typedef int (*nl_cb)(const struct nlmsghdr *h, void *arg);

/* Starts a request of @type (a netlink family or message type). */
void nl_init(union nlbuf *b, uint16_t type, uint16_t flags);
/* Appends raw payload (a family header) to the message; returns where. */
void *nl_put(union nlbuf *b, const void *data, size_t len);
/* Appends the attribute (@type, @data, @len) to the message. */
void nl_attr(union nlbuf *b, uint16_t type, const void *data, size_t len);
/* Sends @req on a new socket of protocol @proto (NETLINK_GENERIC,
 * NETLINK_SOCK_DIAG, ...); calls @cb (may be NULL) for each answer until the
 * ack, NLMSG_DONE or the single answer of a non-dump request. */
int nl_talk(int proto, union nlbuf *req, nl_cb cb, void *arg);

/* Starts a generic netlink request @cmd to the family named @family,
 * looked up first; ENOENT if the kernel has no such family. */
int genl_start(union nlbuf *b, const char *family, uint8_t cmd, uint8_t version, uint16_t flags);

/* The attributes of a generic netlink answer. */
#define genl_attrs(h)	((const char *)NLMSG_DATA(h) + GENL_HDRLEN)
#define genl_attrlen(h) ((size_t)(h)->nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN))

/* Walks the attributes in [data, data + len), stopping at a malformed one. */
#define for_each_nlattr(a, data, len)                                        \
	for (const struct nlattr *a = (const void *)(data);                  \
	     (const char *)a + NLA_HDRLEN <= (const char *)(data) + (len) && \
	     a->nla_len >= NLA_HDRLEN &&                                     \
	     (const char *)a + a->nla_len <= (const char *)(data) + (len);   \
	     a = (const void *)((const char *)a + NLA_ALIGN(a->nla_len)))

static inline int nla_type_of(const struct nlattr *a)
{
	return a->nla_type & NLA_TYPE_MASK;
}

static inline const void *nla_data_of(const struct nlattr *a)
{
	return (const char *)a + NLA_HDRLEN;
}

static inline size_t nla_len_of(const struct nlattr *a)
{
	return (size_t)a->nla_len - NLA_HDRLEN;
}

/* The attribute's value as a u64 (netlink aligns to 4: copied out), 0 if
 * it is shorter. */
uint64_t nla_u64_of(const struct nlattr *a);

#endif
