#!/usr/bin/env bash
# Build the perf_analyzer image from nothing (no registry needed):
#   1. a Debian trixie (13, glibc 2.41) minbase with python3, from the Debian mirror (mmdebstrap | docker import);
#   2. docker build of images/perf-analyzer/Dockerfile on it: the PyPI perf-analyzer wheel in a venv.
# Skipped when an image of that name already carries the content hash of its recipe. FORCE=1 rebuilds.
#
#   images/perf-analyzer/build.sh [IMAGE]      (make perf-analyzer-image [PERF_ANALYZER_IMAGE=...])
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PERF_ANALYZER_VERSION=2.60.0
IMAGE=${1:-${PERF_ANALYZER_IMAGE:-triton-harness/perf-analyzer:$PERF_ANALYZER_VERSION}}
SUITE=trixie
MIRROR=http://deb.debian.org/debian
INCLUDE=python3,python3-venv,ca-certificates
CA=/etc/ssl/certs/ca-certificates.crt

# shellcheck source=../debian-base.sh
. "$HERE/../debian-base.sh"

say() { echo "perf-analyzer image: $*"; }
die() { echo "perf-analyzer image: $*" >&2; exit 1; }

timeout 10 docker info >/dev/null 2>&1 || die "no Docker engine answers: start one with 'make docker-engine'"
[ -f "$CA" ] || die "$CA is missing (the CA bundle that PyPI's TLS proxy needs inside docker build)"

BASE_HASH=$( (printf '%s\n' "$SUITE" "$MIRROR" "$INCLUDE" minbase; cat "$HERE/../debian-base.sh") | sha256sum | cut -c1-12)
BASE="triton-harness/debian-$SUITE-python3:$BASE_HASH"
CONTENT_HASH=$( (cd "$HERE" && cat Dockerfile build.sh "$CA"; echo "$BASE $PERF_ANALYZER_VERSION") | sha256sum | cut -c1-16)

current=$(docker image inspect "$IMAGE" --format '{{ index .Config.Labels "org.triton-harness.content-hash" }}' 2>/dev/null || true)
if [ "$current" = "$CONTENT_HASH" ] && [ -z "${FORCE:-}" ]; then
    say "$IMAGE is current (content hash $CONTENT_HASH); FORCE=1 to rebuild"
    exit 0
fi

began=$SECONDS
# The host's apt sources name bookworm: trixie comes from the mirror named here.
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    debian_minbase "$BASE" "$SUITE" "$INCLUDE" "$MIRROR" || die "could not make the base image $BASE"
fi

CONTEXT=$(mktemp -d /tmp/triton-image-perf-analyzer.XXXXXX)
trap 'rm -rf "$CONTEXT"' EXIT
cp "$HERE/Dockerfile" "$CONTEXT/"
cp "$CA" "$CONTEXT/ca-certificates.crt"
say "building $IMAGE (content hash $CONTENT_HASH)"
t=$SECONDS
docker build --quiet --network host -t "$IMAGE" \
    --build-arg BASE="$BASE" \
    --build-arg PERF_ANALYZER_VERSION="$PERF_ANALYZER_VERSION" \
    --build-arg CONTENT_HASH="$CONTENT_HASH" \
    "$CONTEXT" >/dev/null
say "docker build in $((SECONDS - t)) s"
# Smoke check: the binary finds glibc >= 2.38 and its libraries, and says its version.
version=$(docker run --rm --network none "$IMAGE" perf_analyzer --version 2>&1) \
    || die "$IMAGE was built but perf_analyzer does not run: $version"
size=$(docker image inspect "$IMAGE" --format '{{.Size}}')
say "$IMAGE built in $((SECONDS - began)) s, $((size / 1000000)) MB ($(echo "$version" | head -1))"
