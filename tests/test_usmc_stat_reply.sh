#!/usr/bin/env bash
# usmc-stat and the size and pace of a reply (label tcp): a publisher that
# cuts its snapshot short, sends more than usmc-stat reads (16 MiB), packs
# more values than it parses (1,048,576: the memory of the parsed reply),
# or trickles its bytes, gets a clear message on stderr and exit 3, in
# bounded memory (the tool's peak RSS, measured) and time (10 s for the
# whole reply). The honest snapshot beside them reads as before.
#
# Usage: test_usmc_stat_reply.sh <stat_fake_publisher> <usmc-stat>
set -euo pipefail
FAKE=${1:?stat_fake_publisher}
STAT=${2:?usmc-stat}
MAX_RSS_MB=256 # measured: 120 (release), 186 (ASan) for the value bomb
# shellcheck source=common/stat_fake.sh
. "$(dirname "$0")/common/stat_fake.sh"

python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
snap = {"schema": 1, "pid": 1, "comm": "fake", "version": "0", "context": 0,
        "kernel_compat": False, "kernel_compat_cgroup": None, "devices": [],
        "counters": {}, "fallback_reasons": [], "listeners": [], "connections": [],
        "link_groups": []}
text = json.dumps(snap)
open(d + "/honest.json", "w").write(text)
open(d + "/cut.json", "w").write(text[:len(text) // 2])
# a valid snapshot of 17 MiB: over what usmc-stat reads
snap["comm"] = "x" * (17 << 20)
open(d + "/long.json", "w").write(json.dumps(snap))
# 15 MiB of one array, 7.8 million values: under the byte bound only
n = (15 << 20) // 2
open(d + "/bomb.json", "w").write("[" + "0," * (n - 1) + "0]")
PY

# stat CASE: usmc-stat -p the publisher, its exit status in $rc, its
# stderr in $tmp/CASE.err, its peak RSS (MB) in $rss, its time (s) in $secs
stat() {
	python3 - "$tmp/$1" "$STAT" -p "$fake_pid" <<'PY' >"$tmp/$1.res"
import resource, subprocess, sys, time
t = time.monotonic()
r = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[1] + ".err", "w"))
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
      int(time.monotonic() - t))
PY
	read -r rc rss secs <"$tmp/$1.res"
	echo "$1: exit $rc, peak RSS $rss MB, $secs s: $(cat "$tmp/$1.err")"
}

# expect CASE MESSAGE: exit 3, MESSAGE on stderr, bounded memory
expect() {
	[ "$rc" = 3 ] || fail "$1: exit $rc, expected 3"
	grep -q "$2" "$tmp/$1.err" || fail "$1: no \"$2\" on stderr"
	[ "$rss" -le $MAX_RSS_MB ] || fail "$1: peak RSS $rss MB, over $MAX_RSS_MB MB"
}

fake_start self 0 1 "$tmp/honest.json"
stat honest
[ "$rc" = 0 ] || fail "honest: exit $rc"
fake_stop

fake_start self 0 1 "$tmp/cut.json"
stat cut
expect cut "snapshot cut short: ignored"
fake_stop

fake_start self 0 1 "$tmp/long.json"
stat long
expect long "reply of 16 MiB or more: ignored"
fake_stop

fake_start self 0 1 "$tmp/bomb.json"
stat bomb
expect bomb "snapshot of too many values (over 1048576): ignored"
fake_stop

# one byte every 200 ms: the honest snapshot would take about 50 s
fake_start self 0 1 "$tmp/honest.json" 200
stat trickle
expect trickle "no whole reply within 10 s"
[ "$secs" -le 12 ] || fail "trickle: $secs s"
fake_stop
echo "PASS: short, long, dense and slow replies refused in bounded memory and time"
