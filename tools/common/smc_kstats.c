// SPDX-License-Identifier: MIT
/* The kernel's SMC statistics over generic netlink (smc_kstats.h). */
#include "smc_kstats.h"

#include <string.h>

#include <linux/smc.h>

#include "smc_nl.h"

/* SMC_NLA_STATS_SMCR_TECH: the handshakes done, v1 and v2 */
static void smcr_tech(const struct nlattr *attrs, size_t len, struct smc_kstats *ks)
{
	for_each_nlattr(a, attrs, len)
	{
		switch (nla_type_of(a)) {
		case SMC_NLA_STATS_T_CLNT_V1_SUCC:
		case SMC_NLA_STATS_T_CLNT_V2_SUCC:
			ks->clnt_smcr += nla_u64_of(a);
			break;
		case SMC_NLA_STATS_T_SRV_V1_SUCC:
		case SMC_NLA_STATS_T_SRV_V2_SUCC:
			ks->srv_smcr += nla_u64_of(a);
			break;
		}
	}
}

static int stats_cb(const struct nlmsghdr *h, void *arg)
{
	struct smc_kstats *ks = arg;

	for_each_nlattr(top, genl_attrs(h), genl_attrlen(h))
	{
		if (nla_type_of(top) != SMC_GEN_STATS)
			continue;
		for_each_nlattr(a, nla_data_of(top), nla_len_of(top))
		{
			switch (nla_type_of(a)) {
			case SMC_NLA_STATS_SMCR_TECH:
				smcr_tech(nla_data_of(a), nla_len_of(a), ks);
				break;
			case SMC_NLA_STATS_CLNT_HS_ERR_CNT:
				ks->clnt_hs_err = nla_u64_of(a);
				break;
			case SMC_NLA_STATS_SRV_HS_ERR_CNT:
				ks->srv_hs_err = nla_u64_of(a);
				break;
			}
		}
	}
	return 0;
}

/* Each fallback reason is an answer of its own; the first carries the
 * totals of both sides (net/smc/smc_stats.c smc_nl_get_fback_details()),
 * and there is none before the first fallback. */
static int fback_cb(const struct nlmsghdr *h, void *arg)
{
	struct smc_kstats *ks = arg;

	for_each_nlattr(top, genl_attrs(h), genl_attrlen(h))
	{
		if (nla_type_of(top) != SMC_GEN_FBACK_STATS)
			continue;
		for_each_nlattr(a, nla_data_of(top), nla_len_of(top))
		{
			switch (nla_type_of(a)) {
			case SMC_NLA_FBACK_STATS_SRV_CNT:
				ks->srv_fback = nla_u64_of(a);
				break;
			case SMC_NLA_FBACK_STATS_CLNT_CNT:
				ks->clnt_fback = nla_u64_of(a);
				break;
			}
		}
	}
	return 0;
}

static int dump(uint8_t cmd, nl_cb cb, struct smc_kstats *ks)
{
	union nlbuf req;
	int err = genl_start(&req, SMC_GENL_FAMILY_NAME, cmd, SMC_GENL_FAMILY_VERSION, NLM_F_DUMP);

	return err ? err : nl_talk(NETLINK_GENERIC, &req, cb, ks);
}

int smc_kstats_read(struct smc_kstats *ks)
{
	int err;

	memset(ks, 0, sizeof(*ks));
	err = dump(SMC_NETLINK_GET_STATS, stats_cb, ks);
	return err ? err : dump(SMC_NETLINK_GET_FBACK_STATS, fback_cb, ks);
}
