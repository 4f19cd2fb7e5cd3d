#!/usr/bin/env bash
# The router's own cost per request, build against build: CPU time (user and
# system, from /proc), heap allocations and bytes allocated (its Go runtime
# counters) per request, under wrk (1 thread, 64 connections) through an
# instant upstream (nginx), for a 4 KiB and a 64 KiB chat body. Every round
# runs every build once per body, interleaved, so a change is measured beside
# the build before it under the same load. Allocations do not depend on the
# machine's load; CPU per request does a little (a busy poller batches more),
# which is why the builds alternate.
#   COST_BUILDS='before=bin/router-a after=bin/router-b' scripts/proxybench/cost.sh OUT.md
# COST_ROUNDS (2), COST_DURATION (4s), COST_POLICY (cache_aware),
# COST_GOMAXPROCS (2), COST_ENV (extra environment for the routers, e.g.
# 'GOGC=200'), COST_ENV_<build> (the same for one build only, whose name
# is then a shell identifier), COST_PROFILE=DIR (a CPU profile of COST_PROFILE_SECONDS, 3,
# and an allocation profile of each build's last round into DIR, one per
# body), COST_FASTPROXY=BIN (fasthttp's own HostClient proxy,
# scripts/proxybench/fastproxy built with its --debug-addr, measured as one
# more build named fastproxy: the floor the router's own path is compared
# with).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
out=$1
source "$here/lib.sh"
bench_begin
builds=${COST_BUILDS:-"router=bin/router"}
[ -z "${COST_FASTPROXY:-}" ] || builds="$builds fastproxy=$COST_FASTPROXY"
rounds=${COST_ROUNDS:-2}
duration=${COST_DURATION:-4s}
need_tools
python3 "$here/bodies.py" "$tmp" 4 64
declare -A port
start_upstream

# counters PORT: the router's heap allocations and bytes allocated so far.
counters() {
	curl -s "http://127.0.0.1:$1/debug/pprof/heap?debug=1" |
		awk '/^# Mallocs = /{m=$4} /^# TotalAlloc = /{b=$4} /^# NumGC = /{g=$4} END{printf "%s %s %s\n", m+0, b+0, g+0}'
}

# measure NAME BIN SIZE ROUND: one run of a fresh router; one JSON line.
measure() {
	local name=$1 bin=$2 size=$3 round=$4 rport dport t0 t1 c0 c1 load prof=
	rport=$(free_port)
	dport=$(free_port)
	rm -rf "$tmp/data"
	local own="COST_ENV_$name"
	if [ "$name" = fastproxy ]; then
		env GOMAXPROCS="${COST_GOMAXPROCS:-2}" ${COST_ENV:-} "$bin" --addr "127.0.0.1:$rport" \
			--upstream "127.0.0.1:${port[upstream]}" --debug-addr "127.0.0.1:$dport" >"$tmp/router.log" 2>&1 &
		pids[router]=$!
		wait_http "http://127.0.0.1:$dport/debug/pprof/"
	else
		env GOMAXPROCS="${COST_GOMAXPROCS:-2}" ${COST_ENV:-} ${!own:-} "$bin" serve --port "$rport" --policy "${COST_POLICY:-cache_aware}" \
			--node-name router --data-dir "$tmp/data" --raft-bind 127.0.0.1:0 --gossip-bind 127.0.0.1:0 \
			--prometheus-port 0 --debug-addr "127.0.0.1:$dport" --log-level warn \
			--worker-urls "http://127.0.0.1:${port[upstream]}" >"$tmp/router.log" 2>&1 &
		pids[router]=$!
		wait_http "http://127.0.0.1:$rport/readiness" -f
	fi
	BODY_FILE="$tmp/body-$size.json" wrk -t1 -c64 -d1s -s "$here/wrk.lua" "http://127.0.0.1:$rport/v1/chat/completions" >/dev/null
	if [ -n "${COST_PROFILE:-}" ] && [ "$round" = "$rounds" ]; then
		mkdir -p "$COST_PROFILE"
		curl -s -o "$COST_PROFILE/$name-$size.pprof" "http://127.0.0.1:$dport/debug/pprof/profile?seconds=${COST_PROFILE_SECONDS:-3}" &
		prof=$!
		curl -s -o "$COST_PROFILE/$name-$size.allocs" "http://127.0.0.1:$dport/debug/pprof/allocs?seconds=${COST_PROFILE_SECONDS:-3}" &
		prof="$prof $!"
	fi
	t0=$(cpu_ticks "${pids[router]}")
	c0=$(counters "$dport")
	BODY_FILE="$tmp/body-$size.json" wrk -t1 -c64 -d"$duration" --timeout 10s -s "$here/wrk.lua" \
		"http://127.0.0.1:$rport/v1/chat/completions" | grep '^{' >"$tmp/wrk.json"
	t1=$(cpu_ticks "${pids[router]}")
	c1=$(counters "$dport")
	[ -z "$prof" ] || wait $prof
	load=$(cut -d' ' -f1 /proc/loadavg)
	stop router
	python3 - "$name" "$size" "$round" "$t0" "$t1" "$c0" "$c1" "$load" "$(getconf CLK_TCK)" "$tmp/wrk.json" <<'PY'
import json, sys
name, size, rnd, t0, t1, c0, c1, load, hz, wrk = sys.argv[1:]
w = json.loads(open(wrk).read().strip().splitlines()[-1])
n = w["requests"]
a, b = [float(x) for x in c0.split()], [float(x) for x in c1.split()]
print(json.dumps({"build": name, "size": int(size), "round": int(rnd), "requests": n,
                  "rps": n / (w["duration_us"] / 1e6), "p99_ms": w["p99_us"] / 1000,
                  "cpu_us": (int(t1) - int(t0)) / int(hz) * 1e6 / n,
                  "allocs": (b[0] - a[0]) / n, "bytes": (b[1] - a[1]) / n, "gcs": (b[2] - a[2]) * 1000 / n,
                  "errors": w["errors"] + w["non2xx"], "load": float(load)}))
PY
}

cp /proc/loadavg "$tmp/load-start"
for round in $(seq "$rounds"); do
	for size in 4 64; do
		for b in $builds; do measure "${b%%=*}" "${b#*=}" "$size" "$round" >>"$tmp/cost.jsonl"; done
	done
done
cp /proc/loadavg "$tmp/load-end"
python3 - "$tmp/cost.jsonl" "$tmp/load-start" "$tmp/load-end" "$duration" >"$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ls, le = open(sys.argv[2]).read().split()[:3], open(sys.argv[3]).read().split()[:3]
print("wrk -t1 -c64 -d%s per run; load average at the start %s, at the end %s.\n" % (sys.argv[4], " ".join(ls), " ".join(le)))
print("| body | build | CPU µs/req (per round) | allocs/req | bytes/req | GC / 1k req | req/s | p99 ms | load avg per round | errors |")
print("|---|---|---|---|---|---|---|---|---|---|")
order = []
for r in rows:
    if (r["size"], r["build"]) not in order:
        order.append((r["size"], r["build"]))
for size, build in order:
    rs = [r for r in rows if r["size"] == size and r["build"] == build]
    mean = lambda k: sum(r[k] for r in rs) / len(rs)
    print("| %d KiB | %s | %.1f (%s) | %.2f | %.0f | %.2f | %.0f | %.1f | %s | %d |" % (
        size, build, mean("cpu_us"), ", ".join("%.1f" % r["cpu_us"] for r in rs), mean("allocs"),
        mean("bytes"), mean("gcs"), mean("rps"), mean("p99_ms"), " / ".join("%.1f" % r["load"] for r in rs),
        sum(r["errors"] for r in rs)))
PY
cat "$out"
