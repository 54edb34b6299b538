#!/usr/bin/env bash
# Build the Prometheus image from nothing (no registry needed): Debian bookworm's prometheus 2.42 in
# a minbase made by images/debian-base.sh (mmdebstrap | docker import). The swarm stack runs it
# beside the replicas (lab/harness_lab/scaleout/swarm.py), its configuration and rules mounted at run
# time. The tag is the hash of this recipe: an existing image of that tag is reused. FORCE=1 rebuilds.
#
#   images/prometheus/build.sh    (prints the image name on its last line)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../debian-base.sh
. "$HERE/../debian-base.sh"
SUITE=bookworm
INCLUDE=prometheus,ca-certificates
minbase_image_or_exit prometheus "$0" "${PROMETHEUS_IMAGE:-}"
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
