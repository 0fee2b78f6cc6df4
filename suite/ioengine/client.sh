#!/bin/bash
# client.sh DIR PYTHON ARGS...: run `python -m suite.ioengine ARGS...` through the
# resident engine serving DIR (resident.py: the protocol), or, when none serves it,
# run it directly. Its stdout, stderr and exit status are the command's.
d=$1; py=$2; shift 2
direct() { exec "$py" -m suite.ioengine "$@"; }
[ -p "$d/ctl" ] || direct "$@"
spid=$(cat "$d/ready" 2>/dev/null) && kill -0 "$spid" 2>/dev/null || direct "$@"
for a in "$@"; do [ "$a" = - ] && direct "$@"; done     # stdin is not forwarded
id="r$$-$(date +%s%N)"
trap 'rm -f "$d/$id".*' EXIT
printf '%s\0' "$@" > "$d/$id.argv"
env -0 > "$d/$id.env"
pwd > "$d/$id.cwd"
mkfifo "$d/$id.out" "$d/$id.err" || direct "$@"
fwd() { local p; p=$(cat "$d/$id.pid" 2>/dev/null) && kill -s "$1" "$p" 2>/dev/null; }
trap 'fwd TERM' TERM; trap 'fwd INT' INT; trap 'fwd HUP' HUP
cat "$d/$id.out" & o=$!
cat "$d/$id.err" >&2 & e=$!
printf '%s %s\n' "$id" "$$" > "$d/ctl"
# The server forks within moments; if no child took the request, run it here.
for _ in $(seq 1 200); do
  [ -e "$d/$id.pid" ] && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.1
done
if [ ! -e "$d/$id.pid" ]; then
  kill "$o" "$e" 2>/dev/null; rm -f "$d/$id".*
  trap - EXIT TERM INT HUP
  direct "$@"
fi
while kill -0 "$o" 2>/dev/null || kill -0 "$e" 2>/dev/null; do wait; done
rc=$(cat "$d/$id.rc" 2>/dev/null) || { echo "resident engine: request $id ended without a status (killed?)" >&2; rc=137; }
exit "$rc"
