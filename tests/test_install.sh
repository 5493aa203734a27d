#!/usr/bin/env bash
# test_install.sh BUILD_DIR SOURCE_DIR: what a user of an installed libusmc
# does. Installs BUILD_DIR into a temporary prefix, builds
# examples/installed/hello.c against it twice (pkg-config usmc; a CMake
# project with find_package(usmc)), runs both, and reads a man page from the
# prefix. Leaves nothing behind but a temporary directory, which it removes
# (cmake --install writes BUILD_DIR/install_manifest.txt: restored as found).
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
manifest=$build/install_manifest.txt
[ -e "$manifest" ] && cp -p "$manifest" "$tmp/manifest.saved"
cleanup() {
	if [ -e "$tmp/manifest.saved" ]; then
		mv -f "$tmp/manifest.saved" "$manifest"
	else
		rm -f "$manifest"
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
prefix=$tmp/prefix
export USMC_KERNEL_COMPAT=0 # no BPF program to load for a hello

step() { printf '== %s\n' "$*"; }
expect_hello() { # name output
	echo "$2"
	if ! grep -Eq '^libusmc [0-9]+\.[0-9]+\.[0-9]+: received "hello" over (TCP|SMC-R) \([A-Z_]+\)$' <<<"$2"; then
		echo "FAIL: $1 printed the above"
		exit 1
	fi
}

step "cmake --install $build --prefix <tmp>"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
pcdir=$(dirname "$(find "$prefix" -name usmc.pc)")
libdir=$(dirname "$pcdir")

step "pkg-config: cc hello.c \$(pkg-config --cflags --libs usmc)"
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs usmc)
echo "pkg-config: $flags"
case "$flags" in
*/usr/local*|*libnl*|*rdmacm*) echo "FAIL: usmc.pc points outside the prefix or leaks a dependency"; exit 1 ;;
esac
# shellcheck disable=SC2086
cc -Wall -Wextra -Werror -o "$tmp/hello_pc" "$src/examples/installed/hello.c" $flags
expect_hello hello_pc "$(LD_LIBRARY_PATH=$libdir "$tmp/hello_pc")"

step "cmake: find_package(usmc CONFIG REQUIRED)"
cmake -S "$src/examples/installed" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo >"$tmp/cmake.log" || { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cmake" >"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
expect_hello "hello (usmc::usmc)" "$("$tmp/cmake/hello")"
if [ -e "$libdir/libusmc.a" ]; then
	expect_hello "hello_static (usmc::usmc_static)" "$("$tmp/cmake/hello_static")"
fi

step "man pages"
man -l "$prefix/share/man/man3/usmc_listen.3" 2>/dev/null | grep -q 'usmc_listen, usmc_listener_close' ||
	{ echo "FAIL: man -l usmc_listen.3"; exit 1; }
man -l "$prefix/share/man/man1/usmc-stat.1" 2>/dev/null | grep -q 'what the processes using libusmc are doing' ||
	{ echo "FAIL: man -l usmc-stat.1"; exit 1; }
[ -x "$prefix/bin/usmc-stat" ] || { echo "FAIL: bin/usmc-stat not installed"; exit 1; }
for page in usmc usmc_listener_close usmc_version usmc_bench usmc-stat usmc_listen_fd \
	usmc_conn_getsockopt usmc_ctx_stats_sized; do
	MANPATH=$prefix/share/man man -w "$page" >/dev/null ||
		{ echo "FAIL: man $page not found under the prefix"; exit 1; }
done
echo "test_install: passed"
