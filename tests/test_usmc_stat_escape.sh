#!/usr/bin/env bash
# usmc-stat and the bytes a publisher sends (label tcp): a process that
# names itself (or its devices, addresses, reasons) with terminal escapes
# and control bytes must not reach the operator's terminal with them. A
# stat_fake_publisher answers with a snapshot whose strings hold ESC
# sequences (\u001b), BEL, BS, CR, C1 CSI (\u009b and raw), DEL and a byte
# that is not UTF-8: the table must be printable ASCII with those bytes
# shown as \xHH, and --json valid UTF-8 JSON with every control escaped,
# the strings intact.
#
# Usage: test_usmc_stat_escape.sh <stat_fake_publisher> <usmc-stat>
set -euo pipefail
FAKE=${1:?stat_fake_publisher}
STAT=${2:?usmc-stat}
# shellcheck source=common/stat_fake.sh
. "$(dirname "$0")/common/stat_fake.sh"

# the snapshot: JSON-escaped controls as libusmc writes them, and raw DEL,
# raw C1 (UTF-8 c2 9b) and a raw 0xff where the placeholders are
python3 - "$tmp/reply.json" "$tmp/want.json" <<'PY'
import json, sys
comm = "evil\x1b]0;owned\x07\x1b[2J"
snap = {"schema": 1, "pid": 1, "comm": comm, "version": "0.1\x9b31m", "context": 0,
        "kernel_compat": True, "kernel_compat_cgroup": "/sys\x1b[K",
        "devices": [{"name": "rxe\x1b[5m", "port": 1, "netdev": "", "gid_index": 1}],
        "counters": {k: 1 for k in ("connects", "accepts", "smcr", "fallbacks", "hs_errors",
                                    "open_conns", "lgrs_created", "lgrs_open")},
        "fallback_reasons": [{"name": "PEER\rNOSMC", "code": "0x03010000", "count": 1}],
        "listeners": [{"address": "1.2.3.4:5@DEL@", "backlog": 1, "tcp_only": False,
                       "auto_fallback": False, "counters": {"accepted": 1},
                       "hs_time_hist": [], "fallback_reasons": []}],
        "connections": [{"local": "\x1b[31mred", "peer": "@C1@[1m", "role": "server\b\b\b",
                         "mode": "TCP", "reason": {"name": "X\x1b[0m", "code": "0x1"},
                         "peer_declined": False, "lgr_id": 0, "bytes_sent": 1,
                         "bytes_received": 1}],
        "link_groups": [{"id": 1, "role": "server", "state": "ACTIVE", "peer_id": "\x1b[?1049h",
                         "device": "@FF@rxe", "port": 1, "local_gid": "::1", "peer_gid": "::2",
                         "qp_num": 1, "peer_qp_num": 2, "connections": 1, "max_connections": 2,
                         "buffers": {"rmb": [], "sndbuf": []}, "llc": {}, "engine": {}}]}
text = json.dumps(snap).encode()
raw = text.replace(b"@DEL@", b"\x7f").replace(b"@C1@", b"\xc2\x9b").replace(b"@FF@", b"\xff")
open(sys.argv[1], "wb").write(raw)
# what --json must give back: the raw 0xff read as U+00FF
want = json.loads(text.replace(b"@DEL@", b"\\u007f").replace(b"@C1@", b"\\u009b")
                  .replace(b"@FF@", b"\\u00ff"))
json.dump(want, open(sys.argv[2], "w"))
PY

fake_start self 0 1 "$tmp/reply.json"

# --- the table: printable ASCII and newlines only; the escapes shown
rc=0
"$STAT" -p "$fake_pid" >"$tmp/table.txt" 2>"$tmp/table.err" || rc=$?
[ "$rc" = 0 ] || fail "usmc-stat exit $rc: $(cat "$tmp/table.err")"
python3 - "$tmp/table.txt" <<'PY' || fail "the table carries raw control bytes"
import sys
out = open(sys.argv[1], "rb").read()
bad = sorted({b for b in out if b != 0x0a and not 0x20 <= b <= 0x7e})
print(out.decode("ascii", "backslashreplace"))
if bad:
    print("raw bytes in the table:", " ".join("%02x" % b for b in bad))
    sys.exit(1)
PY
for want in 'evil\x1b]0;owned\x07\x1b[2J' '0.1\xc2\x9b31m' '1.2.3.4:5\x7f' '\x1b[31mred' \
	'\xc2\x9b[1m' 'server\x08\x08\x08' '\xffrxe' 'PEER\x0dNOSMC=1'; do
	grep -qF -- "$want" "$tmp/table.txt" || fail "the table does not show $want"
done

# --- --json: valid UTF-8 JSON, no control character raw, strings intact
rc=0
"$STAT" --json -p "$fake_pid" >"$tmp/out.json" 2>"$tmp/json.err" || rc=$?
[ "$rc" = 0 ] || fail "usmc-stat --json exit $rc: $(cat "$tmp/json.err")"
python3 - "$tmp/out.json" "$tmp/want.json" <<'PY' || fail "--json output"
import json, sys
raw = open(sys.argv[1], "rb").read()
text = raw.decode("utf-8")  # raises if not UTF-8
bad = [c for c in text if c != "\n" and (ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f)]
if bad:
    print("raw control characters in --json:", [hex(ord(c)) for c in bad])
    sys.exit(1)
got = json.loads(text)[0]
want = json.load(open(sys.argv[2]))
if got != want:
    print("got:  ", json.dumps(got)[:600])
    print("want: ", json.dumps(want)[:600])
    sys.exit(1)
PY
fake_stop
echo "PASS: control bytes from a publisher are escaped in the table and in --json"
