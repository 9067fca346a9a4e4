#!/usr/bin/env bash
# Builds the leafd container image from deploy/image/Dockerfile: a static binary made here with
# `go build` (CGO_ENABLED=0), staged with the host's CA bundle, deploy/image/passwd and group,
# and an empty data dir, on scratch (nothing is pulled). `make image` runs it.
#
#   scripts/image.sh [tag]        # default: tags leafd:<git describe> and leafd:latest
#
# leafd:latest is what docs/compose/docker-compose.yml runs (LEAFD_IMAGE overrides it). The
# root Dockerfile builds the same image from a clone where a registry is reachable.
#
# LEAFD_IMAGE_TOOL picks the builder ("docker", "podman", "podman --runtime runc"); by default
# docker when its daemon answers, else podman. LEAFD_IMAGE_CONTEXT keeps the staged context
# in that directory (default: a temporary one, removed).
set -euo pipefail
cd "$(dirname "$0")/.."

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo unknown)}
tag=${1:-leafd:${version//[^A-Za-z0-9_.-]/-}}
latest=""
[ $# -ge 1 ] || latest=leafd:latest

tool=${LEAFD_IMAGE_TOOL:-}
if [ -z "$tool" ]; then
	if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
		tool=docker
	elif command -v podman >/dev/null 2>&1; then
		tool=podman
	else
		echo "image.sh: neither a running docker nor podman found" >&2
		exit 1
	fi
fi

ca=""
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
	if [ -s "$f" ]; then ca=$f; break; fi
done
[ -n "$ca" ] || { echo "image.sh: no CA bundle found (install ca-certificates)" >&2; exit 1; }

ctx=${LEAFD_IMAGE_CONTEXT:-}
if [ -z "$ctx" ]; then
	ctx=$(mktemp -d /tmp/leafd-image.XXXXXX)
	trap 'rm -rf "$ctx"' EXIT
fi
mkdir -p "$ctx/data"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$ctx/leafd" ./cmd/leafd
cp "$ca" "$ctx/ca-certificates.crt"
cp deploy/image/passwd deploy/image/group "$ctx/"
cp deploy/image/Dockerfile "$ctx/Dockerfile"

# podman's default OCI format drops HEALTHCHECK; the docker format keeps it.
format=()
case "$tool" in *podman*) format=(--format docker) ;; esac
# shellcheck disable=SC2086 # $tool may carry global flags (podman --runtime runc)
$tool build "${format[@]}" -t "$tag" -f "$ctx/Dockerfile" "$ctx"
if [ -n "$latest" ]; then
	# shellcheck disable=SC2086
	$tool tag "$tag" "$latest"
	echo "$latest"
fi
echo "$tag"
