#!/usr/bin/env bash
# The same agentic sessions on Anthropic's /v1/messages and on /v1/chat/completions: one router
# from bin/ (make build) in front of workersims, all on 127.0.0.1, fresh processes (empty caches
# and index) for every run. Each round runs both APIs with the round's seed; the figure is the
# cached-token ratio the workers reported, per API and round, and messages over chat.
#
#   scripts/apicompare.sh [ROUNDS]     # 3 by default
#
# Environment (defaults in brackets): APICOMPARE_WORKERS [4], APICOMPARE_SESSIONS [32],
# APICOMPARE_TURNS [10], APICOMPARE_TOOLS [20], APICOMPARE_KV (each workersim's
# --kv-capacity-tokens) [32768], APICOMPARE_TIME_SCALE [20].
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=bin
ROUNDS=${1:-3}
WORKERS=${APICOMPARE_WORKERS:-4}
SESSIONS=${APICOMPARE_SESSIONS:-32}
TURNS=${APICOMPARE_TURNS:-10}
TOOLS=${APICOMPARE_TOOLS:-20}
KV=${APICOMPARE_KV:-32768}
SCALE=${APICOMPARE_TIME_SCALE:-20}
OUT=$(mktemp -d -t apicompare.XXXXXX)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT

# await FILE REGEX: the first match of REGEX's group in FILE, once the process printed it.
await() {
	for _ in $(seq 200); do
		if m=$(sed -nE "s/$2/\\1/p" "$1" 2>/dev/null | head -1) && [ -n "$m" ]; then
			echo "$m"
			return
		fi
		sleep 0.05
	done
	echo "apicompare: nothing in $1 matched $2" >&2
	exit 1
}

# run API ROUND: one run, printed as "API ROUND RATIO".
run() {
	local dir=$OUT/$1-$2 urls=()
	mkdir -p "$dir"
	PIDS=()
	for i in $(seq 0 $((WORKERS - 1))); do
		"$BIN/workersim" --port 0 --worker-id "w$i" --time-scale "$SCALE" --kv-capacity-tokens "$KV" >"$dir/w$i.log" 2>&1 &
		PIDS+=($!)
		urls+=("http://$(await "$dir/w$i.log" '^listening on ([^ ]+).*')")
	done
	"$BIN/router" serve --port 0 --prometheus-port 0 --raft-bind 127.0.0.1:0 --gossip-bind 127.0.0.1:0 \
		--data-dir "$dir/data" --node-name apicompare --worker-urls "$(IFS=,; echo "${urls[*]}")" >"$dir/router.log" 2>&1 &
	PIDS+=($!)
	local router
	router="http://$(await "$dir/router.log" '.*router ready" addr=([^ ]+).*')"
	until curl -sf "$router/readiness" >/dev/null; do sleep 0.05; done
	"$BIN/loadgen" agentic --target "$router" --endpoint "$1" --tools "$TOOLS" --sessions "$SESSIONS" --turns "$TURNS" \
		--system-prompt-tokens 1024 --task-tokens 256 --observation-tokens 256 --answer-tokens 16 \
		--think-time 100ms --seed "$2" --duration 10m --json "$dir/report.json" >"$dir/table.txt" 2>"$dir/loadgen.err"
	kill "${PIDS[@]}" 2>/dev/null || true
	wait "${PIDS[@]}" 2>/dev/null || true
	python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['errors'] == 0, r; print(sys.argv[2], sys.argv[3], '%.4f' % r['cached_token_ratio'])" \
		"$dir/report.json" "$1" "$2"
}

echo "api round cached_token_ratio   ($SESSIONS sessions x $TURNS turns, $TOOLS tools, $WORKERS workersims; logs in $OUT)"
for round in $(seq "$ROUNDS"); do
	m=$(run messages "$round")
	c=$(run chat "$round")
	echo "$m"
	echo "$c"
	python3 -c "import sys; print('round', sys.argv[1], 'messages/chat %.3f' % (float(sys.argv[2]) / float(sys.argv[3])))" \
		"$round" "${m##* }" "${c##* }"
done
