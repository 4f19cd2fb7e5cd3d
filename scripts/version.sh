#!/usr/bin/env bash
# The release this checkout builds, for -X main.version. A release's commit
# is named in CHANGELOG.md ("Commit: <hash>" under its "## [vX.Y.Z]"), so a
# clone without tags finds it too: HEAD at a release's commit is that
# release; after one, the newest release it descends from, the commits since
# and HEAD's hash, as git describe writes them (v0.1.0-8-g1a2b3c4). A work
# tree with changes to tracked files ends in -dirty. Outside a checkout with
# history: "dev".
set -euo pipefail
cd "$(dirname "$0")/.."

if ! head=$(git rev-parse HEAD 2>/dev/null); then
	echo dev
	exit 0
fi
dirty=""
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	dirty="-dirty"
fi
# "version hash" per release, newest first.
releases=$(awk '
	/^## \[v[0-9]+\.[0-9]+\.[0-9]+[^]]*\]/ { match($0, /\[v[^]]*\]/); v = substr($0, RSTART + 1, RLENGTH - 2); next }
	/^Commit: [0-9a-f]+/ && v != "" { print v, $2; v = "" }
' CHANGELOG.md 2>/dev/null || true)
while read -r version hash; do
	[ -n "$version" ] || continue
	full=$(git rev-parse --verify --quiet "$hash^{commit}" || true)
	[ -n "$full" ] || continue # a shallow clone without it
	if [ "$full" = "$head" ]; then
		echo "$version$dirty"
		exit 0
	fi
	if git merge-base --is-ancestor "$full" HEAD 2>/dev/null; then
		echo "$version-$(git rev-list --count "$full..HEAD")-g$(git rev-parse --short=7 HEAD)$dirty"
		exit 0
	fi
done <<<"$releases"
echo "v0.0.0-g$(git rev-parse --short=7 HEAD)$dirty"
