#!/usr/bin/env bash
# Another user squats a process's usmc-stat names (label tcp): before
# stat_target (the victim) creates its context, a stat_fake_publisher run
# as nobody binds "@usmc-stat/<victim's pid>/<n>" for n = 0..63 (every
# name libusmc tried) and answers with a snapshot that claims to be the
# victim. The victim must still publish (under a name nobody can guess),
# and usmc-stat must show the victim's own snapshot only: each squatted
# name is refused on stderr (its listener's pid is not the name's,
# SO_PEERCRED), exit 3.
#
# Needs root (to run the squatter as another uid); skips (77) if not.
#
# Usage: test_usmc_stat_squat.sh <stat_target> <stat_fake_publisher> <usmc-stat>
set -euo pipefail
TARGET=${1:?stat_target}
FAKE=${2:?stat_fake_publisher}
STAT=${3:?usmc-stat}
NOBODY=65534
SQUATTED=64

if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
	echo "SKIP: needs root and setpriv to squat as another uid"
	exit 77
fi
# shellcheck source=common/stat_fake.sh
. "$(dirname "$0")/common/stat_fake.sh"
chmod 0755 "$tmp" # the squatter (nobody) runs from here and reads its reply
cp "$FAKE" "$tmp/stat_fake_publisher" # the build tree may be closed to nobody
FAKE=$tmp/stat_fake_publisher
victim=
cleanup() {
	exec 3>&- 2>/dev/null || true
	[ -z "$victim" ] || kill "$victim" 2>/dev/null || true
	fake_cleanup
}
trap cleanup EXIT

# the victim: a shell that knows its pid, waits for "go", then becomes
# stat_target (exec keeps the pid)
mkfifo "$tmp/go" "$tmp/in"
(
	echo "$BASHPID" >"$tmp/victim.pid"
	read -r _ <"$tmp/go"
	exec env USMC_KERNEL_COMPAT=0 "$TARGET" <"$tmp/in" >"$tmp/out" 2>"$tmp/err"
) &
victim=$!
for _ in $(seq 50); do
	[ -s "$tmp/victim.pid" ] && break
	sleep 0.1
done
[ "$(cat "$tmp/victim.pid")" = "$victim" ] || fail "victim pid unknown"

python3 - "$tmp/squat.json" "$victim" <<'PY'
import json, sys
snap = {"schema": 1, "pid": int(sys.argv[2]), "comm": "squatter", "version": "0",
        "context": 0, "kernel_compat": False, "kernel_compat_cgroup": None, "devices": [],
        "counters": {}, "fallback_reasons": [], "listeners": [], "connections": [],
        "link_groups": []}
open(sys.argv[1], "w").write(json.dumps(snap))
PY
chmod 0644 "$tmp/squat.json"
fake_start setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups -- \
	"$victim" 0 $SQUATTED "$tmp/squat.json"
squatter=$fake_pid
n=$(grep -c "@usmc-stat/$victim/[0-9]*\$" /proc/net/unix || true)
echo "squatter (pid $squatter, uid $NOBODY) holds $n names of pid $victim"
[ "$n" = $SQUATTED ] || fail "the squatter holds $n names, not $SQUATTED"

# the victim creates its context now
echo go >"$tmp/go"
exec 3>"$tmp/in"
for _ in $(seq 100); do
	grep -q '^ready' "$tmp/out" && break
	kill -0 "$victim" 2>/dev/null || fail "stat_target died: $(cat "$tmp/err")"
	sleep 0.1
done
grep -q '^ready' "$tmp/out" || fail "stat_target never got ready"
grep -Eq "@usmc-stat/$victim/[0-9]+/[0-9a-f]{16}\$" /proc/net/unix ||
	fail "the victim did not publish: every name it tried was squatted"

rc=0
"$STAT" --json -p "$victim" >"$tmp/snap.json" 2>"$tmp/stat.err" || rc=$?
head -3 "$tmp/stat.err"
[ "$rc" = 3 ] || fail "usmc-stat exit $rc, expected 3 (names held by another process)"
n=$(grep -c "answered by pid $squatter (uid $NOBODY), not by pid $victim: ignored" \
	"$tmp/stat.err" || true)
[ "$n" = $SQUATTED ] || fail "$n squatted names refused, not $SQUATTED"
python3 - "$tmp/snap.json" "$victim" <<'PY' || fail "snapshots: $(cat "$tmp/snap.json")"
import json, sys
snaps = json.load(open(sys.argv[1]))
comms = [s["comm"] for s in snaps]
print("snapshots read:", comms)
sys.exit(0 if comms == ["stat_target"] and snaps[0]["pid"] == int(sys.argv[2]) else 1)
PY
exec 3>&-
wait "$victim" || fail "stat_target exit $?: $(cat "$tmp/err")"
victim=
echo "PASS: the victim published past the squatter, whose answers were refused"
