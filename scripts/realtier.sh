#!/usr/bin/env bash
# scripts/realtier.sh OUT.md: the real-process section of BENCHMARKS.md (make
# bench runs it; `scripts/bench.sh realtier` runs it alone). Two parts, both
# on real processes from bin/ on 127.0.0.1 (router replicas with real
# memberlist and Raft, workersims, loadgen):
#   1. the tier sweep: agentic sessions through 1, 4 and 8 replicas at think
#      times 0.1-3 s, every turn to a random replica and, as the control,
#      through a session-sticky balancer (1 and 3 s with REALTIER_LONG=1);
#      >= 3 rounds; fleetsim on the same
#      configurations beside it (scripts/realtier.py sweep)
#   2. a burst of requests sharing one long prefix through 1 and 4 replicas,
#      with and without hot-prefix spreading (scripts/realtier.py burst)
#   3. the shared conversation trace through 1, 4 and 8 replicas, as recorded
#      and with each 3 s step's requests spread over the step, fleetsim
#      beside it (scripts/realtier.py trace; TRACE_* variables)
# The grid is chosen by REALTIER_* variables (see scripts/realtier.py); a
# subset runs quickly, e.g. REALTIER_REPLICAS=4 REALTIER_THINK="0.1 0.3".
# BENCH_QUICK=1 runs a small grid once.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/realtier.sh OUT.md}
if [ "${BENCH_QUICK:-0}" = 1 ]; then
	export REALTIER_REPLICAS=${REALTIER_REPLICAS:-4} REALTIER_THINK=${REALTIER_THINK:-0.3} \
		REALTIER_SESSIONS=${REALTIER_SESSIONS:-32} REALTIER_TURNS=${REALTIER_TURNS:-5} \
		REALTIER_ROUNDS=${REALTIER_ROUNDS:-1} BURST_ROUNDS=${BURST_ROUNDS:-1} \
		TRACE_LIMIT=${TRACE_LIMIT:-200} TRACE_REPLICAS=${TRACE_REPLICAS:-4} TRACE_ROUNDS=${TRACE_ROUNDS:-1}
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvrouter-realtier-out.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
python3 scripts/realtier.py sweep "$tmp/sweep.md"
BURST_VARIANTS=${BURST_VARIANTS:-"hot=;off=--hot-prefix-load 0"}
REALTIER_VARIANTS=$BURST_VARIANTS python3 scripts/realtier.py burst "$tmp/burst.md"
python3 scripts/realtier.py trace "$tmp/trace.md"
cat "$tmp/sweep.md" >"$out"
printf '\n' >>"$out"
cat "$tmp/burst.md" >>"$out"
printf '\n' >>"$out"
cat "$tmp/trace.md" >>"$out"
echo "wrote $out"
