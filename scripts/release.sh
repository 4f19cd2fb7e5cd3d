#!/usr/bin/env bash
# make release: the static binaries and the container image of this
# checkout's release (scripts/version.sh), built reproducibly into
# dist/<version>/: two builds of one commit with the same Go toolchain give
# the same bytes, which SHA256SUMS lists. `scripts/release.sh --check`
# builds twice, the second time with an empty build cache, and compares.
#
# Reproducible: -trimpath (no paths of this machine), -buildid= (no build
# ID), -buildvcs=false (the version string names the commit), CGO off; the
# image is written here rather than by docker build, as a docker-archive
# whose files, layer and config are stamped with SOURCE_DATE_EPOCH (the
# commit's time unless set), so `docker load` gives the same image ID
# everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
PLATFORMS=${RELEASE_PLATFORMS:-linux/amd64}
CMDS="router workersim loadgen fleetsim"
IMAGE_CMDS="router workersim loadgen" # as the Dockerfile copies them

# build OUT: every artifact of the release into OUT.
build() {
	local out=$1 version epoch created
	version=$(scripts/version.sh)
	epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
	created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
	mkdir -p "$out"
	for platform in $PLATFORMS; do
		local os=${platform%/*} arch=${platform#*/}
		for c in $CMDS; do
			CGO_ENABLED=0 GOOS=$os GOARCH=$arch $GO build -trimpath -buildvcs=false \
				-ldflags "-s -w -buildid= -X main.version=$version" -o "$out/$c-$os-$arch" "./cmd/$c"
		done
		image "$out" "$os" "$arch" "$version" "$epoch" "$created"
	done
	(cd "$out" && sha256sum -- * | grep -v ' SHA256SUMS$' >SHA256SUMS)
	echo "$version" >"$out/VERSION"
}

# image OUT OS ARCH VERSION EPOCH CREATED: the image of the binaries, FROM
# scratch, as a docker-archive (docker load -i) with every stamp fixed.
image() {
	local out=$1 os=$2 arch=$3 version=$4 epoch=$5 created=$6 tmp layer cfg
	tmp=$(mktemp -d)
	mkdir "$tmp/root"
	for c in $IMAGE_CMDS; do
		install -m 0755 "$out/$c-$os-$arch" "$tmp/root/$c"
	done
	reproducible_tar "$epoch" -C "$tmp/root" -cf "$tmp/layer.tar" $IMAGE_CMDS
	layer=$(sha256sum "$tmp/layer.tar" | cut -d' ' -f1)
	mkdir "$tmp/$layer"
	mv "$tmp/layer.tar" "$tmp/$layer/layer.tar"
	printf '{"architecture":"%s","os":"%s","config":{"Entrypoint":["/router"],"Labels":{"org.opencontainers.image.version":"%s"}},"created":"%s","history":[{"created":"%s","created_by":"scripts/release.sh"}],"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$arch" "$os" "$version" "$created" "$created" "$layer" >"$tmp/config.json"
	cfg=$(sha256sum "$tmp/config.json" | cut -d' ' -f1)
	mv "$tmp/config.json" "$tmp/$cfg.json"
	printf '[{"Config":"%s.json","RepoTags":["kvrouter:%s"],"Layers":["%s/layer.tar"]}]' "$cfg" "$version" "$layer" >"$tmp/manifest.json"
	reproducible_tar "$epoch" -C "$tmp" -cf "$out/kvrouter-image-$os-$arch.tar" manifest.json "$cfg.json" "$layer/layer.tar"
	rm -rf "$tmp"
}

# reproducible_tar EPOCH TAR-ARGS...: tar with names sorted and every
# owner, mode time and header field that varies between machines fixed.
reproducible_tar() {
	local epoch=$1
	shift
	tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=ustar "$@"
}

if [ "${1:-}" = "--check" ]; then
	a=$(mktemp -d) b=$(mktemp -d) cache=$(mktemp -d)
	trap 'rm -rf "$a" "$b" "$cache"' EXIT
	build "$a"
	GOCACHE=$cache build "$b"
	echo "first build:"
	cat "$a/SHA256SUMS"
	if diff "$a/SHA256SUMS" "$b/SHA256SUMS"; then
		echo "the second build, from an empty build cache, gave the same sha256 for every artifact"
	else
		echo "release: two builds of one commit differ" >&2
		exit 1
	fi
	exit 0
fi

version=$(scripts/version.sh)
case "$version" in
*-dirty)
	if [ -z "${RELEASE_ALLOW_DIRTY:-}" ]; then
		echo "release: the work tree has changes ($version); commit them, or set RELEASE_ALLOW_DIRTY=1" >&2
		exit 1
	fi
	;;
esac
out=dist/$version
rm -rf "$out"
build "$out"
cat "$out/SHA256SUMS"
echo "release $version in $out; load the image with: docker load -i $out/kvrouter-image-linux-amd64.tar"
