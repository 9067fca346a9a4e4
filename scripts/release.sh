#!/usr/bin/env bash
# Builds a leafd release into dist/: stripped static binaries (CGO_ENABLED=0, -trimpath,
# -ldflags "-s -w -X main.version=VERSION") for linux/amd64, linux/arm64 and darwin/arm64,
# SHA256SUMS over them, and the container image leafd:VERSION (scripts/image.sh) when docker
# or podman runs; without an engine the image step is skipped with a message. `make release
# VERSION=vX.Y.Z` runs it.
#
#   scripts/release.sh vX.Y.Z
#
# LEAFD_RELEASE_IMAGE=0 skips the image; LEAFD_RELEASE_TARGETS overrides the target list
# ("linux/amd64 linux/arm64 darwin/arm64"); LEAFD_DIST writes somewhere else than dist/.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:-${VERSION:-}}
if ! [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "release.sh: VERSION must look like vX.Y.Z (got \"$version\")" >&2
	exit 2
fi
targets=${LEAFD_RELEASE_TARGETS:-linux/amd64 linux/arm64 darwin/arm64}

dist=${LEAFD_DIST:-dist}
rm -rf "$dist"
mkdir -p "$dist"
for t in $targets; do
	os=${t%/*} arch=${t#*/}
	out=$dist/leafd-$version-$os-$arch
	echo "building $out"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$out" ./cmd/leafd
done
(cd "$dist" && sha256sum leafd-* > SHA256SUMS)
echo "$dist/SHA256SUMS"

if [ "${LEAFD_RELEASE_IMAGE:-1}" = 0 ]; then
	echo "release.sh: image skipped (LEAFD_RELEASE_IMAGE=0)"
elif (command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1) ||
	(command -v podman >/dev/null 2>&1 && podman info >/dev/null 2>&1); then
	VERSION=$version bash scripts/image.sh "leafd:$version"
else
	echo "release.sh: image skipped: no docker or podman engine runs here (build it later with make image VERSION=$version)"
fi
