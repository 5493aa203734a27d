// SPDX-License-Identifier: MIT
/*
 * A link group's last words (lgr.c lgr_terminate()): the orderly
 * DELETE_LINK ALL goes over the link the LLC spoke on while the link
 * group lived. After a failover that is not the first link, which failed:
 * posted there, the DELETE_LINK never reached the peer (a kernel peer's
 * link group was seen to outlive one run into the next). No device: the
 * fake link group of tests/common/fake_lgr.h with a second link, and
 * ibv_modify_qp() wrapped (the links' QPs go to ERR at the end).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmocka.h>

#include "bufpool.h"
#include "lgr.h"
#include "llc.h"
#include "smcr_conn.h"
#include "smcr_llc.h"
#include "smcr_wr.h"

#include "common/fake_lgr.h"

#define SECOND_SLOT 1

/* The QPs taken to ERR: the fake QPs have no provider behind them. */
static int qp_errors;

int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int __wrap_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	(void)qp;
	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
		qp_errors++;
	return 0;
}

static struct ibv_qp second_qp;

/* The one DELETE_LINK sent: ALL, orderly, on @qp. */
static void assert_delete_all_on(struct ibv_qp *qp)
{
	struct llc_msg m;

	assert_int_equal(fake_nsent, 1);
	assert_ptr_equal(fake_sent_qp[0], qp);
	assert_int_equal(llc_decode(fake_sent[0], LLC_MSG_LEN, &m), 0);
	assert_int_equal(m.type, LLC_DELETE_LINK);
	assert_true(m.flags & LLC_FLAG_DEL_LINK_ALL);
	assert_true(m.flags & LLC_FLAG_DEL_LINK_ORDERLY);
}

/* The first link failed over to the second: the link group's end is said
 * on the second, the one still up. */
static void test_end_after_failover_goes_over_survivor(void **state)
{
	struct fake f;

	(void)state;
	fake_open(&f);
	fake_add_link(&f, SECOND_SLOT, &second_qp);
	atomic_store(&f.lnk->state, SMCR_LNK_INACTIVE); /* the first link failed */
	qp_errors = 0;
	lgr_terminate(f.lgr, -ECONNABORTED, true);
	assert_delete_all_on(&second_qp);
	assert_int_equal(qp_errors, 2); /* and both QPs went to ERR */
	fake_close(&f);
}

/* Both links up: the first, as ever. */
static void test_end_with_both_links_goes_over_first(void **state)
{
	struct fake f;

	(void)state;
	fake_open(&f);
	fake_add_link(&f, SECOND_SLOT, &second_qp);
	lgr_terminate(f.lgr, -ECONNABORTED, true);
	assert_delete_all_on(&f.qp);
	fake_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_end_after_failover_goes_over_survivor),
		cmocka_unit_test(test_end_with_both_links_goes_over_first),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
