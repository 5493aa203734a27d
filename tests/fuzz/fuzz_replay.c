// SPDX-License-Identifier: MIT
/*
 * Corpus replay driver: without libFuzzer (USMC_FUZZ=OFF) each fuzz target
 * is linked with this main() and run over its committed seed corpus, so
 * normal CI exercises the oracles too. Arguments: files or directories.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"

#define REPLAY_MAX_INPUT (1u << 16)

static int replay_file(const char *path)
{
	static uint8_t buf[REPLAY_MAX_INPUT];
	FILE *f = fopen(path, "rb");
	size_t n;
	uint8_t *copy;

	if (!f) {
		perror(path);
		return -1;
	}
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	/* an exact-size heap copy, so ASan catches any read past the input */
	copy = malloc(n ? n : 1);
	if (!copy)
		return -1;
	memcpy(copy, buf, n);
	LLVMFuzzerTestOneInput(copy, n);
	free(copy);
	return 0;
}

static int replay_path(const char *path, unsigned int *count)
{
	char child[4096];
	struct dirent *de;
	struct stat st;
	DIR *d;
	int rc = 0;

	if (stat(path, &st)) {
		perror(path);
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		(*count)++;
		return replay_file(path);
	}
	d = opendir(path);
	if (!d) {
		perror(path);
		return -1;
	}
	while (!rc && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(child, sizeof(child), "%s/%s", path, de->d_name);
		rc = replay_path(child, count);
	}
	closedir(d);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned int count = 0;

	for (int i = 1; i < argc; i++)
		if (replay_path(argv[i], &count))
			return 1;
	printf("replayed %u inputs\n", count);
	/* an empty corpus would make this test pass without testing anything */
	return count ? 0 : 1;
}
