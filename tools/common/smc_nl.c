// SPDX-License-Identifier: MIT
/* A small netlink client (see smc_nl.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "smc_nl.h"

void nl_init(union nlbuf *b, uint16_t type, uint16_t flags)
{
	memset(&b->h, 0, sizeof(b->h));
	b->h.nlmsg_len = NLMSG_HDRLEN;
	b->h.nlmsg_type = type;
	b->h.nlmsg_flags = NLM_F_REQUEST | flags;
}

void *nl_put(union nlbuf *b, const void *data, size_t len)
{
	size_t off = NLMSG_ALIGN(b->h.nlmsg_len);
	char *p;

	/* requests are built by our own tools: one that does not fit is a bug */
	if (off > sizeof(b->raw) || len > sizeof(b->raw) - off)
		abort();
	p = (char *)b + off; /* the union as bytes: raw[] is the whole buffer */
	memcpy(p, data, len);
	b->h.nlmsg_len = NLMSG_ALIGN(b->h.nlmsg_len) + len;
	return p;
}

void nl_attr(union nlbuf *b, uint16_t type, const void *data, size_t len)
{
	struct nlattr a = {.nla_len = NLA_HDRLEN + len, .nla_type = type};

	nl_put(b, &a, NLA_HDRLEN);
	nl_put(b, data, len);
}

int nl_talk(int proto, union nlbuf *req, nl_cb cb, void *arg)
{
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
	union nlbuf ans;
	int fd, err = 0;
	bool done = false;

	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, proto);
	if (fd < 0)
		return errno;
	req->h.nlmsg_seq = 1;
	if (sendto(fd, req, req->h.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = errno;
		close(fd);
		return err;
	}
	while (!done) {
		ssize_t n = recv(fd, &ans, sizeof(ans), 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = errno;
			break;
		}
		for (struct nlmsghdr *h = &ans.h; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);

				err = -e->error; /* 0: the ack */
				done = true;
				break;
			}
			if (h->nlmsg_type == NLMSG_DONE) {
				const int *e = NLMSG_DATA(h);

				if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(int)) && *e < 0)
					err = -*e;
				done = true;
				break;
			}
			if (cb && (err = cb(h, arg)) != 0) {
				done = true;
				break;
			}
			if (!(h->nlmsg_flags & NLM_F_MULTI) && !(req->h.nlmsg_flags & NLM_F_ACK)) {
				done = true;
				break;
			}
		}
	}
	close(fd);
	return err;
}

static int family_cb(const struct nlmsghdr *h, void *arg)
{
	for_each_nlattr(a, genl_attrs(h), genl_attrlen(h))
	{
		if (nla_type_of(a) == CTRL_ATTR_FAMILY_ID && nla_len_of(a) >= sizeof(uint16_t))
			memcpy(arg, nla_data_of(a), sizeof(uint16_t));
	}
	return 0;
}

int genl_start(union nlbuf *b, const char *family, uint8_t cmd, uint8_t version, uint16_t flags)
{
	struct genlmsghdr g = {.cmd = CTRL_CMD_GETFAMILY, .version = 1};
	uint16_t id = 0;
	int err;

	nl_init(b, GENL_ID_CTRL, 0);
	nl_put(b, &g, sizeof(g));
	nl_attr(b, CTRL_ATTR_FAMILY_NAME, family, strlen(family) + 1);
	err = nl_talk(NETLINK_GENERIC, b, family_cb, &id);
	if (err)
		return err;
	if (!id)
		return ENOENT;
	g = (struct genlmsghdr){.cmd = cmd, .version = version};
	nl_init(b, id, flags);
	nl_put(b, &g, sizeof(g));
	return 0;
}

uint64_t nla_u64_of(const struct nlattr *a)
{
	uint64_t v = 0;

	if (nla_len_of(a) >= sizeof(v))
		memcpy(&v, nla_data_of(a), sizeof(v));
	return v;
}
