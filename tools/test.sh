#!/usr/bin/env bash
# The test command: installs what is missing, then builds and tests every
# flavour. A fresh Debian 12 machine needs nothing else.
#
#   tools/test.sh            everything (what CI runs through .ci/run)
#   tools/test.sh STAGE...   only some: release asan tsan fuzz valgrind rxe rxe_asan
#
# Build trees: build/ (release), build-asan/, build-tsan/, build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(release asan tsan fuzz valgrind rxe rxe_asan)

log() { printf '\n=== %s: %s\n' "$(date +%T)" "$*"; }

configure_build() { # dir [cmake args...]
	local dir=$1
	shift
	cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
	cmake --build "$dir" -j "$jobs"
}

stage_release() {
	log "release build (-Werror): unit, tcp, tsan-labelled and bench tests"
	configure_build build
	ctest --test-dir build -LE 'rxe|fuzz' --output-on-failure
}

stage_asan() {
	log "ASan + UBSan build: unit, tcp and tsan-labelled tests"
	configure_build build-asan -DUSMC_SANITIZE=address,undefined
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --test-dir build-asan -LE 'rxe|fuzz|bench' --output-on-failure
}

stage_tsan() {
	log "ThreadSanitizer build: concurrency tests"
	configure_build build-tsan -DUSMC_SANITIZE=thread
	TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan -L tsan --output-on-failure
}

stage_fuzz() {
	log "libFuzzer targets (clang, ASan+UBSan), 1,000,000 runs each"
	CC=clang configure_build build-fuzz -DUSMC_FUZZ=ON
	ctest --test-dir build-fuzz -L fuzz --output-on-failure -V | grep -E 'Done [0-9]+ runs|DONE|INITED|Test +#|tests passed'
}

# The unit and TCP tests under valgrind: no leak, no invalid access.
# Kernel-compat mode stays off here: valgrind does not model the bpf()
# system call (it flags libbpf's attribute structs); and the listener takes
# connections with accept4(): valgrind runs one thread at a time and does
# not let go of the others while one sleeps in io_uring_enter(), where the
# accept thread sleeps in io_uring mode (a hang). ASan covers both.
stage_valgrind() {
	log "valgrind: leaks and invalid accesses"
	[ -d build ] || configure_build build
	local vg=(env USMC_KERNEL_COMPAT=0 USMC_ACCEPT_URING=0 valgrind -q --leak-check=full --errors-for-leak-kinds=definite,possible
		--error-exitcode=99 --track-fds=no --child-silent-after-fork=yes)
	for t in test_api test_api_conn test_clc test_llc test_cdc test_cdc_cursor test_wire_err \
		test_bufpool test_tcp_interop; do
		echo "valgrind $t"
		"${vg[@]}" "build/tests/$t" >/dev/null
	done
	echo "valgrind test_tcp_echo 20 connections x 4 MiB"
	"${vg[@]}" build/tests/test_tcp_echo 20 4
	echo "valgrind: 10 passed, 0 failed"
}

stage_rxe() {
	log "soft-RoCE: rxe tests inside the qemu guest"
	[ -d build ] || configure_build build
	tests/rxe/harness-selftest.sh build
	USMC_RXE_TIMEOUT=1800 tests/rxe/run-rxe-tests.sh build
}

# The soft-RoCE suite again in the ASan+UBSan build: link group life cycles,
# hostile peers and kernel interop with every access checked. Left to the
# release build, for CI's 30-minute budget: the fault campaign's subset and
# the preloaded programs (minutes of guest time each under ASan), and the
# full size of the kernel interop runs (16 MiB instead of 64 MiB each way,
# 100 sequential connections instead of 300: the same code paths).
stage_rxe_asan() {
	log "soft-RoCE: rxe tests under ASan + UBSan in the qemu guest"
	[ -d build-asan ] || configure_build build-asan -DUSMC_SANITIZE=address,undefined
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		USMC_INTEROP_BYTES=16777216 USMC_INTEROP_SEQ=100 \
		USMC_RXE_TIMEOUT=1500 tests/rxe/run-rxe-tests.sh build-asan -E 'faults_|preload'
}

tools/install-deps.sh
for s in "${stages[@]}"; do
	"stage_$s"
done
log "all stages passed: ${stages[*]}"
