// SPDX-License-Identifier: MIT
/*
 * LLC decoder under libFuzzer. The input is one receive completion (its
 * size is byte_len). Oracle: decode -> encode -> decode gives the same
 * message, and the encoding is a fixed point.
 */
#include <errno.h>
#include <string.h>

#include "llc.h"
#include "wire_err.h"
#include "fuzz_common.h"

static struct llc_msg a, b;
static uint8_t out1[LLC_V2_BUF_LEN], out2[LLC_V2_BUF_LEN];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int n1, n2, rc;

	rc = llc_decode(data, size, &a);
	FUZZ_ASSERT(rc == 0 || wire_is_err(rc));
	if (rc)
		return 0;
	n1 = llc_encode(&a, out1, sizeof(out1));
	FUZZ_ASSERT(n1 >= LLC_MSG_LEN && (size_t)n1 == llc_msg_len(&a));
	/* never longer than what it was decoded from */
	FUZZ_ASSERT((size_t)n1 <= size);
	memset(&b, 0xA5, sizeof(b));
	FUZZ_ASSERT(llc_decode(out1, (size_t)n1, &b) == 0);
	FUZZ_ASSERT(!memcmp(&a, &b, sizeof(a)));
	n2 = llc_encode(&b, out2, sizeof(out2));
	FUZZ_ASSERT(n2 == n1 && !memcmp(out1, out2, (size_t)n1));
	FUZZ_ASSERT(llc_encode(&b, out2, (size_t)n1 - 1) == -ENOSPC);
	return 0;
}
