#!/usr/bin/env bash
# The wire codecs do no I/O: every symbol their objects leave undefined must
# be a pure libc function (memory and string helpers, no syscalls) or a
# compiler / sanitizer runtime hook. A read(), send(), malloc() or printf()
# added to a codec makes this test fail (docs/wire.md, "The wire library").
# usage: test_wire_symbols.sh NM OBJECT...
set -euo pipefail
nm=$1
shift

# Pure libc: no I/O, no allocation, no global state beyond errno text.
allowed='^(memcpy|memmove|memset|memcmp|strlen|strerror|__stack_chk_fail|_GLOBAL_OFFSET_TABLE_)$'
# Instrumentation of the ASan/UBSan and libFuzzer builds, including the
# linker-made bounds of the coverage sections (__start___sancov_cntrs).
hooks='^(__asan_|__ubsan_|__sanitizer_|__sancov_|__msan_|__tsan_|__(start|stop)___sancov_)'

# One codec may call another (wire_strerror(), a shared helper).
declare -A own
while read -r sym; do
	own[$sym]=1
done < <("$nm" --defined-only "$@" | awk 'NF == 3 {print $3}')

bad=0
for obj in "$@"; do
	while read -r sym; do
		sym=${sym%%@*} # memcpy@GLIBC_2.14 and the like
		if [[ $sym =~ $allowed || $sym =~ $hooks || -n ${own[$sym]:-} ]]; then
			continue
		fi
		echo "$(basename "$obj"): undefined symbol '$sym' is not allowed in a wire codec"
		bad=1
	done < <("$nm" -u "$obj" | awk '{print $NF}')
done
if [ "$bad" = 0 ]; then
	echo "wire objects: $# checked, only pure libc and sanitizer symbols undefined"
fi
exit "$bad"
