#!/usr/bin/env bash
# Build the Prometheus image from nothing (no registry needed): Debian bookworm's prometheus 2.42 in
# a minbase made by images/debian-base.sh (mmdebstrap | docker import). The swarm stack runs it
# beside the replicas (harness/tools/scaleout/swarm.py), its configuration and rules mounted at run
# time. The tag is the hash of this recipe: an existing image of that tag is reused. FORCE=1 rebuilds.
#
#   images/prometheus/build.sh    (prints the image name on its last line)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../debian-base.sh
. "$HERE/../debian-base.sh"
SUITE=bookworm
INCLUDE=prometheus,ca-certificates
RECIPE_HASH=$( (printf '%s\n' "$SUITE" "$INCLUDE" minbase; cat "$0" "$HERE/../debian-base.sh") | sha256sum | cut -c1-12)
IMAGE=${PROMETHEUS_IMAGE:-triton-harness/prometheus:$RECIPE_HASH}

say() { echo "prometheus image: $*" >&2; }
die() { echo "prometheus image: $*" >&2; exit 1; }

timeout 10 docker info >/dev/null 2>&1 || die "no Docker engine answers: start one with 'make docker-engine'"
if docker image inspect "$IMAGE" >/dev/null 2>&1 && [ -z "${FORCE:-}" ]; then
    say "$IMAGE is current"
    echo "$IMAGE"
    exit 0
fi
began=$SECONDS
# Recommends (node-exporter) are not installed: mmdebstrap's minbase installs only what is named + depends.
debian_minbase "$IMAGE" "$SUITE" "$INCLUDE" "" \
    --change='CMD ["prometheus", "--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/tmp/prometheus"]' \
    --change='LABEL org.triton-harness.image=prometheus' \
    || die "could not make $IMAGE"
version=$(docker run --rm --network none "$IMAGE" prometheus --version 2>&1 | head -1) \
    || die "$IMAGE was made but prometheus does not run"
say "$IMAGE made in $((SECONDS - began)) s ($version)"
echo "$IMAGE"
