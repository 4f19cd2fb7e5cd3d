#!/usr/bin/env bash
# make peers: build the public engines the tests and benchmarks run against
# (llm-d-inference-sim, a vLLM simulator in Go) once into a cache directory,
# from the source snapshot beside the checkout. The snapshot's folder may be
# read-only: its own build script copies it to a temporary directory. A
# build is kept while the snapshot and the script are unchanged (a stamp of
# their hashes sits beside the binary).
#
#   PEERS_SRC   the snapshot's folder (default ../shared/peers)
#   PEER_CACHE  where the binaries go (default ~/.cache/kvrouter/peers);
#               tests find them there, or where KVROUTER_PEER_SIM says
set -euo pipefail
cd "$(dirname "$0")/.."
src=${PEERS_SRC:-../shared/peers}
cache=${PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvrouter/peers}
bin=$cache/llm-d-inference-sim
if [ ! -x "$src/build-llm-d-inference-sim.sh" ]; then
	echo "peers: no snapshot at $src (set PEERS_SRC); the tests that run llm-d-inference-sim will say they are skipped" >&2
	exit 0
fi
stamp=$( (cd "$src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)
if [ -x "$bin" ] && [ "$(cat "$bin.stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "peers: $bin is current"
	exit 0
fi
mkdir -p "$cache"
"$src/build-llm-d-inference-sim.sh" "$bin.new" >/dev/null
mv "$bin.new" "$bin"
echo "$stamp" >"$bin.stamp"
echo "peers: built $bin"
