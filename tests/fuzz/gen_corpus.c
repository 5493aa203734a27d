// SPDX-License-Identifier: MIT
/*
 * Writes the seed corpus (tests/fuzz/corpus/<target>/<name>) from the test
 * vectors in wire_vectors.h. Run by hand after changing the vectors:
 *   build/tests/fuzz/gen_corpus tests/fuzz/corpus
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "wire_vectors.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static int write_set(const char *root, const char *target, const struct wire_vector *v,
		     size_t count)
{
	static uint8_t buf[8192];
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", root, target);
	if (mkdir(path, 0755) && errno != EEXIST) {
		perror(path);
		return -1;
	}
	for (size_t i = 0; i < count; i++) {
		int n = wire_hex(v[i].hex, buf, sizeof(buf));
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s/%s", root, target, v[i].name);
		f = fopen(path, "wb");
		if (n < 0 || !f || fwrite(buf, 1, (size_t)n, f) != (size_t)n) {
			perror(path);
			if (f)
				fclose(f);
			return -1;
		}
		fclose(f);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s <corpus-dir>\n", argv[0]);
		return 2;
	}
	if (mkdir(argv[1], 0755) && errno != EEXIST) {
		perror(argv[1]);
		return 1;
	}
	if (write_set(argv[1], "clc", clc_vectors, ARRAY_SIZE(clc_vectors)) ||
	    write_set(argv[1], "llc", llc_vectors, ARRAY_SIZE(llc_vectors)) ||
	    write_set(argv[1], "cdc", cdc_vectors, ARRAY_SIZE(cdc_vectors)))
		return 1;
	return 0;
}
