#!/usr/bin/env bash
# The proxy path against nginx and HAProxy on this machine, side by side:
#   1. wrk (1 thread, 64 connections) POSTs a 4 KiB and a 64 KiB chat body
#      directly to an instant upstream (nginx returning a fixed completion),
#      and through nginx (1 worker), HAProxy (nbthread 1), fasthttp's own
#      HostClient (fastproxy: the floor of a fasthttp proxy) and the router
#      (cache_aware with GOMAXPROCS=2 and =1, round_robin);
#   2. ssebench streams 1,000 SSE events written as fast as the upstream can,
#      directly and through each proxy.
# Every target is measured once per round, rounds interleave the targets,
# and the table keeps each round's ratio to nginx so its steadiness shows.
# Writes the markdown section to $1. Everything listens on 127.0.0.1.
# BENCH_DURATION (10s), BENCH_ROUNDS (2) and BENCH_STREAM_DURATION (5s)
# shorten or lengthen it; ROUTER_BIN measures another build of the router.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
out=$1
tmp=$(mktemp -d)
source "$here/lib.sh"
source "$here/conf.sh"
trap 'stop_all; [ -n "${KEEP_BENCH_TMP:-}" ] || rm -rf "$tmp"' EXIT
duration=${BENCH_DURATION:-10s}
rounds=${BENCH_ROUNDS:-2}
stream_duration=${BENCH_STREAM_DURATION:-5s}
sizes="4 64"
targets="direct nginx haproxy fasthttp router router_1cpu router_rr"
stream_targets="direct nginx haproxy router router_1cpu"

need_tools
cp /proc/loadavg "$tmp/load-start" # the machine may be shared: the table says how busy it was
[ -x bin/router ] || make build
go build -o "$tmp/ssebench" ./scripts/proxybench/ssebench
go build -o "$tmp/fastproxy" ./scripts/proxybench/fastproxy
python3 "$here/bodies.py" "$tmp" $sizes
declare -A port
for name in upstream $targets; do port[$name]=$(free_port); done

# start_proxies UPSTREAM_PORT: every proxy in front of the upstream.
start_proxies() {
	local up=$1
	port[direct]=$up
	nginx_proxy "$tmp" "${port[nginx]}" "$up" >"$tmp/nginx-proxy.conf"
	start nginx nginx -c "$tmp/nginx-proxy.conf" -g 'daemon off;'
	haproxy_proxy "${port[haproxy]}" "$up" >"$tmp/haproxy.cfg"
	start haproxy haproxy -f "$tmp/haproxy.cfg"
	GOMAXPROCS=2 start fasthttp "$tmp/fastproxy" --addr "127.0.0.1:${port[fasthttp]}" --upstream "127.0.0.1:$up"
	start_router router "$up" 2 cache_aware
	start_router router_1cpu "$up" 1 cache_aware
	start_router router_rr "$up" 2 round_robin
	for name in nginx haproxy fasthttp; do wait_http "http://127.0.0.1:${port[$name]}/"; done
	for name in router router_1cpu router_rr; do wait_http "http://127.0.0.1:${port[$name]}/readiness" -f; done
}

# start_router NAME UPSTREAM_PORT GOMAXPROCS POLICY
start_router() {
	rm -rf "$tmp/data-$1"
	GOMAXPROCS=$3 start "$1" "${ROUTER_BIN:-bin/router}" serve --port "${port[$1]}" --policy "$4" --node-name "$1" \
		--data-dir "$tmp/data-$1" --raft-bind 127.0.0.1:0 --gossip-bind 127.0.0.1:0 --prometheus-port 0 --log-level warn \
		--worker-urls "http://127.0.0.1:$2"
}

stop_proxies() { for name in nginx haproxy fasthttp router router_1cpu router_rr; do stop "$name"; done; }

# measure NAME CMD...: runs CMD, the JSON line it prints extended with the
# CPU time the target's process spent meanwhile.
measure() {
	local name=$1 pid=${pids[$1]:-} before after
	shift
	[ "$name" = direct ] && pid=${pids[upstream]}
	before=$(cpu_ticks "$pid")
	local line
	line=$("$@" | grep '^{')
	after=$(cpu_ticks "$pid")
	python3 -c 'import json,sys,os; d=json.loads(sys.argv[1]); d["cpu_s"]=(int(sys.argv[3])-int(sys.argv[2]))/os.sysconf("SC_CLK_TCK"); print(json.dumps(d))' \
		"$line" "$before" "$after"
}

wrk_run() { # TARGET SIZE DURATION
	BODY_FILE="$tmp/body-$2.json" wrk -t1 -c64 -d"$3" --timeout 5s -s "$here/wrk.lua" \
		"http://127.0.0.1:${port[$1]}/v1/chat/completions"
}

# 1. Requests -------------------------------------------------------------
nginx_upstream "$tmp" "${port[upstream]}" >"$tmp/nginx-upstream.conf"
start upstream nginx -c "$tmp/nginx-upstream.conf" -g 'daemon off;'
wait_http "http://127.0.0.1:${port[upstream]}/"
start_proxies "${port[upstream]}"
for round in $(seq "$rounds"); do
	for size in $sizes; do
		for t in $targets; do
			wrk_run "$t" "$size" 1s >/dev/null # warm the connection pools
			measure "$t" wrk_run "$t" "$size" "$duration" >"$tmp/req-$size-$t-$round.json"
			echo "round $round, $size KiB, $t: $(cat "$tmp/req-$size-$t-$round.json")" >&2
		done
	done
done
stop_proxies
stop upstream

# 2. Streams --------------------------------------------------------------
start upstream "$tmp/ssebench" serve --addr "127.0.0.1:${port[upstream]}" --events 1000
wait_http "http://127.0.0.1:${port[upstream]}/" || true
start_proxies "${port[upstream]}"
for round in $(seq "$rounds"); do
	for streams in 1 32; do
		for t in $stream_targets; do
			measure "$t" "$tmp/ssebench" drive --url "http://127.0.0.1:${port[$t]}/v1/chat/completions" \
				--streams "$streams" --duration "$stream_duration" >"$tmp/sse-$streams-$t-$round.json"
			echo "round $round, $streams streams, $t: $(cat "$tmp/sse-$streams-$t-$round.json")" >&2
		done
	done
done
stop_proxies

cp /proc/loadavg "$tmp/load-end"
python3 "$here/table.py" "$tmp" "$rounds" "$duration" "$stream_duration" >"$out"

# 3. Per-request budget: syscalls and allocations, under strace ------------
stop_all
"$here/budget.sh" "$tmp/budget.md"
printf '\n' >>"$out"
cat "$tmp/budget.md" >>"$out"
