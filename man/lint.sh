#!/usr/bin/env bash
# lint.sh MANDOC MANDIR MAPFILE PAGE...: the man pages are clean and all
# listed, and the API they document is complete.
# Each listed page exists; a page is either a ".so man<s>/<page>.<s>" link to
# a real page, or passes mandoc -T lint -W warning (no warning, no error).
# Every page file in MANDIR is in the list (man/CMakeLists.txt), so none is
# left uninstalled. Every usmc_* symbol that MAPFILE (libusmc/libusmc.map,
# the version script) exports has a listed man3 page of its name.
set -u
mandoc=$1 dir=$2 map=$3
shift 3
fail=0
for p in "$@"; do
	f=$dir/$p
	if [ ! -f "$f" ]; then
		echo "$p: listed in man/CMakeLists.txt but missing"
		fail=1
	elif first=$(head -n 1 "$f") && [[ $first == ".so "* ]]; then
		target=${first#.so }
		if [ ! -f "$dir/${target#*/}" ] || [[ " $* " != *" ${target#*/} "* ]]; then
			echo "$p: $first: no such listed page"
			fail=1
		fi
	elif ! (cd "$dir" && "$mandoc" -T lint -W warning "$p"); then
		echo "$p: mandoc -T lint reports the above"
		fail=1
	fi
done
for f in "$dir"/*.[1-8]; do
	p=${f##*/}
	if [[ " $* " != *" $p "* ]]; then
		echo "$p: not listed in man/CMakeLists.txt (it would not be installed)"
		fail=1
	fi
done
if [ ! -r "$map" ]; then
	echo "$map: cannot read the version script"
	fail=1
fi
nsym=0
for sym in $(sed -n 's/^[[:space:]]*\(usmc_[A-Za-z0-9_]*\)[[:space:]]*;.*/\1/p' "$map" 2>/dev/null); do
	nsym=$((nsym + 1))
	if [[ " $* " != *" $sym.3 "* ]]; then
		echo "$sym: exported by ${map##*/} but has no man3 page (write man/$sym.3 or a .so link)"
		fail=1
	fi
done
if [ -r "$map" ] && [ $nsym -eq 0 ]; then
	echo "$map: no usmc_* symbol found"
	fail=1
fi
[ $fail -eq 0 ] && echo "man_lint: $# pages clean, $nsym exported symbols documented"
exit $fail
