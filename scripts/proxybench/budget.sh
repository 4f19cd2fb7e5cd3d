#!/usr/bin/env bash
# The proxy path's per-request budget, side by side with nginx and with
# fasthttp's own HostClient: syscalls (the kernel's syscall tracepoints,
# counted by perf stat over the proxy's processes while wrk runs: no ptrace,
# so the proxy runs at its own pace) and, for the router, heap allocations
# and GC cycles (its Go runtime counters) per request, for a 4 KiB and a
# 64 KiB chat body, answered whole by an instant upstream (nginx) and
# streamed by ssebench (a short stream of BUDGET_EVENTS events).
# Writes the markdown section to $1; ROUTER_BIN measures another build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
out=$1
tmp=$(mktemp -d)
source "$here/lib.sh"
source "$here/conf.sh"
trap 'stop_all; [ -n "${KEEP_BENCH_TMP:-}" ] || rm -rf "$tmp"' EXIT
duration=${BUDGET_DURATION:-5s}
events=${BUDGET_EVENTS:-16}
targets=${BUDGET_TARGETS:-"nginx fasthttp router"}
command -v perf >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null; }
need_tools
[ -x bin/router ] || make build
go build -o "$tmp/ssebench" ./scripts/proxybench/ssebench
go build -o "$tmp/fastproxy" ./scripts/proxybench/fastproxy
python3 "$here/bodies.py" "$tmp" 4 64
python3 - "$tmp" <<'PY'
import json, sys
for kib in (4, 64):
    b = json.load(open("%s/body-%d.json" % (sys.argv[1], kib)))
    b["stream"] = True
    json.dump(b, open("%s/body-%ds.json" % (sys.argv[1], kib), "w"), separators=(",", ":"))
PY
declare -A port
for name in upstream nginx fasthttp router; do port[$name]=$(free_port); done

start_targets() {
	nginx_proxy "$tmp" "${port[nginx]}" "${port[upstream]}" >"$tmp/nginx-proxy.conf"
	start nginx nginx -c "$tmp/nginx-proxy.conf" -g 'daemon off;'
	GOMAXPROCS=${ROUTER_GOMAXPROCS:-2} start fasthttp "$tmp/fastproxy" --addr "127.0.0.1:${port[fasthttp]}" --upstream "127.0.0.1:${port[upstream]}"
	rm -rf "$tmp/data-router"
	GOMAXPROCS=${ROUTER_GOMAXPROCS:-2} start router "${ROUTER_BIN:-bin/router}" serve --port "${port[router]}" --policy cache_aware \
		--node-name router --data-dir "$tmp/data-router" --raft-bind 127.0.0.1:0 --gossip-bind 127.0.0.1:0 \
		--prometheus-port 0 --debug-addr "127.0.0.1:${port[router_debug]}" --log-level warn --worker-urls "http://127.0.0.1:${port[upstream]}"
	wait_http "http://127.0.0.1:${port[nginx]}/"
	wait_http "http://127.0.0.1:${port[fasthttp]}/"
	wait_http "http://127.0.0.1:${port[router]}/readiness" -f
}
stop_targets() { stop nginx; stop fasthttp; stop router; }

# traced_pids NAME: the processes whose syscalls count (nginx's worker,
# not its idle master).
traced_pids() {
	if [ "$1" = nginx ]; then pgrep -P "${pids[nginx]}"; else echo "${pids[$1]}"; fi
}

# runtime_counters: the router's heap allocations and GC cycles so far
# (runtime.MemStats, at the end of its heap profile).
runtime_counters() {
	curl -s "http://127.0.0.1:${port[router_debug]}/debug/pprof/heap?debug=1" |
		awk '/^# Mallocs = /{m=$4} /^# NumGC = /{g=$4} END{printf "%s %s\n", m+0, g+0}'
}

# the syscalls counted: every one, and those that make the table's columns;
# a read's or recvfrom's EAGAIN is its exit with -11
perf_events=(-e raw_syscalls:sys_enter)
for call in read readv recvfrom write writev sendto epoll_pwait epoll_wait epoll_ctl futex nanosleep clock_nanosleep; do
	perf_events+=(-e "syscalls:sys_enter_$call")
done
perf_events+=(-e syscalls:sys_exit_read --filter 'ret == -11' -e syscalls:sys_exit_recvfrom --filter 'ret == -11')

# budget NAME CASE BODY: wrk through NAME while perf counts its syscalls;
# one JSON line.
budget() {
	local name=$1 case=$2 body=$3 pidlist before after
	pidlist=$(traced_pids "$name" | paste -sd, -)
	BODY_FILE="$body" wrk -t1 -c64 -d1s -s "$here/wrk.lua" "http://127.0.0.1:${port[$name]}/v1/chat/completions" >/dev/null # warm the pools
	perf stat -x, -o "$tmp/perf-$name-$case.txt" "${perf_events[@]}" -p "$pidlist" 2>/dev/null &
	local st=$!
	sleep 0.5 # attached
	[ "$name" = router ] && before=$(runtime_counters)
	BODY_FILE="$body" wrk -t1 -c64 -d"$duration" --timeout 10s -s "$here/wrk.lua" \
		"http://127.0.0.1:${port[$name]}/v1/chat/completions" | grep '^{' >"$tmp/wrk-$name-$case.json"
	[ "$name" = router ] && after=$(runtime_counters)
	kill -INT "$st"
	wait "$st" || true
	python3 "$here/budget.py" line "$name" "$case" "$tmp/perf-$name-$case.txt" "$tmp/wrk-$name-$case.json" "${before:-}" "${after:-}" >>"$tmp/budget.jsonl"
}

port[router_debug]=$(free_port)
cp /proc/loadavg "$tmp/load-start"
nginx_upstream "$tmp" "${port[upstream]}" >"$tmp/nginx-upstream.conf"
start upstream nginx -c "$tmp/nginx-upstream.conf" -g 'daemon off;'
wait_http "http://127.0.0.1:${port[upstream]}/"
start_targets
for size in 4 64; do
	for t in $targets; do budget "$t" "$size KiB" "$tmp/body-$size.json"; done
done
stop_targets
stop upstream
port[upstream]=$(free_port) # nginx's worker may hold the old one a moment longer
start upstream "$tmp/ssebench" serve --addr "127.0.0.1:${port[upstream]}" --events "$events"
wait_http "http://127.0.0.1:${port[upstream]}/" || true
start_targets
for size in 4 64; do
	for t in $targets; do budget "$t" "$size KiB, streamed ($events events)" "$tmp/body-${size}s.json"; done
done
stop_targets
cp /proc/loadavg "$tmp/load-end"
python3 "$here/budget.py" table "$tmp/budget.jsonl" "$tmp/load-start" "$tmp/load-end" "$duration" >"$out"
