#!/usr/bin/env bash
# Instructions per request of the router's builds (and of fasthttp's own
# HostClient proxy), counted by valgrind's callgrind over a fixed number of
# requests through an instant upstream (nginx), for a 4 KiB and a 64 KiB chat
# body. The count is the user-space instructions of every thread of the
# proxy (the kernel's side of its syscalls is not in it); unlike CPU time it
# does not move with the machine's load, so two builds compare in one run
# each. The router's time-driven background work (gossip, the client
# watch's ticks) runs about 50 times slower under callgrind and counts a
# little: idle, it is under 2,000 instructions per request's worth of time.
# The garbage collector's marking is given apart: a cycle costs the router
# millions of instructions (it marks the whole ownership index) and comes
# every few thousand requests, so whether one falls in a run's window moves
# the total by several thousand per request; the column without it is the
# one to compare builds by, beside allocations per request (cost.sh).
#   INSTR_BUILDS='before=bin/router-a after=bin/router-b' scripts/proxybench/instr.sh OUT.md
# INSTR_REQUESTS (2000, after 200 not counted), INSTR_CONNS (8),
# INSTR_POLICY (cache_aware), INSTR_SIZES ('4 64'), INSTR_FASTPROXY=BIN
# (scripts/proxybench/fastproxy built, measured as one more build named
# fastproxy), INSTR_KEEP=DIR (keep the callgrind files there, for
# callgrind_annotate --inclusive=yes).
# Go's asynchronous preemption signals trip callgrind, so the proxies run
# with GODEBUG=asyncpreemptoff=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
out=$1
source "$here/lib.sh"
bench_begin
command -v valgrind >/dev/null || { echo "instr.sh needs valgrind" >&2; exit 1; }
builds=${INSTR_BUILDS:-"router=bin/router"}
[ -z "${INSTR_FASTPROXY:-}" ] || builds="$builds fastproxy=$INSTR_FASTPROXY"
requests=${INSTR_REQUESTS:-2000}
conns=${INSTR_CONNS:-8}
keep=${INSTR_KEEP:-$tmp/callgrind}
mkdir -p "$keep"
need_tools
go build -o "$tmp/nrequests" ./scripts/proxybench/nrequests
sizes=${INSTR_SIZES:-"4 64"}
python3 "$here/bodies.py" "$tmp" $sizes
declare -A port
start_upstream

# measure NAME BIN SIZE: the instructions per request of one proxy.
measure() {
	local name=$1 bin=$2 size=$3 rport dport file
	rport=$(free_port)
	dport=$(free_port)
	rm -rf "$tmp/data"
	file="$keep/$name-$size.callgrind"
	local vg=(valgrind --tool=callgrind --callgrind-out-file="$file" --dump-instr=no)
	if [ "$name" = fastproxy ]; then
		GOMAXPROCS=2 GODEBUG=asyncpreemptoff=1 "${vg[@]}" "$bin" --addr "127.0.0.1:$rport" \
			--upstream "127.0.0.1:${port[upstream]}" --debug-addr "127.0.0.1:$dport" >"$tmp/proxy.log" 2>&1 &
		pids[proxy]=$!
		WAIT_HTTP_SECONDS=120 wait_http "http://127.0.0.1:$dport/debug/pprof/"
	else
		GOMAXPROCS=2 GODEBUG=asyncpreemptoff=1 "${vg[@]}" "$bin" serve --port "$rport" --policy "${INSTR_POLICY:-cache_aware}" \
			--node-name router --data-dir "$tmp/data" --raft-bind 127.0.0.1:0 --gossip-bind 127.0.0.1:0 \
			--prometheus-port 0 --log-level warn --worker-urls "http://127.0.0.1:${port[upstream]}" >"$tmp/proxy.log" 2>&1 &
		pids[proxy]=$!
		WAIT_HTTP_SECONDS=120 wait_http "http://127.0.0.1:$rport/readiness" -f
	fi
	"$tmp/nrequests" --addr "127.0.0.1:$rport" --n 200 --c "$conns" --body "$tmp/body-$size.json"
	callgrind_control --zero "${pids[proxy]}" >/dev/null 2>&1
	"$tmp/nrequests" --addr "127.0.0.1:$rport" --n "$requests" --c "$conns" --body "$tmp/body-$size.json"
	callgrind_control --dump "${pids[proxy]}" >/dev/null 2>&1
	stop proxy
	local total gc
	total=$(callgrind_annotate --auto=no "$file.1" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
	gc=$(callgrind_annotate --inclusive=yes --auto=no "$file.1" | awk '/:runtime.gcDrain \[/ && !g {gsub(",", "", $1); g = $1} END {print g + 0}')
	python3 -c "t, g, n = $total, ${gc:-0}, $requests; print('| $size KiB | $name | %.0f | %.0f | %.0f |' % (t / n, g / n, (t - g) / n))"
}

{
	echo "callgrind, $requests requests over $conns connections per run; load average at the start $(cut -d' ' -f1-3 /proc/loadavg)."
	echo
	echo "| body | build | instructions/req | of which GC marking | without GC marking |"
	echo "|---|---|---|---|---|"
	for size in $sizes; do
		for b in $builds; do measure "${b%%=*}" "${b#*=}" "$size"; done
	done
} >"$out"
cat "$out"
