#!/usr/bin/env bash
# lint.sh MANDOC MANDIR PAGE...: the man pages are clean and all listed.
# Each listed page exists; a page is either a ".so man<s>/<page>.<s>" link to
# a real page, or passes mandoc -T lint -W warning (no warning, no error).
# Every page file in MANDIR is in the list (man/CMakeLists.txt), so none is
# left uninstalled.
set -u
mandoc=$1 dir=$2
shift 2
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
[ $fail -eq 0 ] && echo "man_lint: $# pages clean"
exit $fail
