#!/usr/bin/env bash
# Build the second swarm node's image from nothing (no registry needed): Debian bookworm's docker.io
# (dockerd, containerd, runc) in a minbase made by images/debian-base.sh. It runs privileged as a
# container of the host's engine, its own dockerd inside, and joins the host's swarm as a worker
# (harness/tools/scaleout/nodes.py). The tag is the hash of this recipe. FORCE=1 rebuilds.
#
#   images/swarm-node/build.sh    (prints the image name on its last line)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../debian-base.sh
. "$HERE/../debian-base.sh"
SUITE=bookworm
INCLUDE=docker.io,containerd,runc,iptables,ca-certificates,procps,iproute2
RECIPE_HASH=$( (printf '%s\n' "$SUITE" "$INCLUDE" minbase; cat "$0" "$HERE/../debian-base.sh") | sha256sum | cut -c1-12)
IMAGE=${SWARM_NODE_IMAGE:-triton-harness/swarm-node:$RECIPE_HASH}

say() { echo "swarm-node image: $*" >&2; }
die() { echo "swarm-node image: $*" >&2; exit 1; }

timeout 10 docker info >/dev/null 2>&1 || die "no Docker engine answers: start one with 'make docker-engine'"
if docker image inspect "$IMAGE" >/dev/null 2>&1 && [ -z "${FORCE:-}" ]; then
    say "$IMAGE is current"
    echo "$IMAGE"
    exit 0
fi
began=$SECONDS
# The engine's state lives in a volume at /var/lib/docker (overlay2 cannot sit on the image's own overlay).
debian_minbase "$IMAGE" "$SUITE" "$INCLUDE" "" \
    --change='CMD ["dockerd", "--host=unix:///var/run/docker.sock", "--iptables=true"]' \
    --change='VOLUME /var/lib/docker' \
    --change='LABEL org.triton-harness.image=swarm-node' \
    || die "could not make $IMAGE"
version=$(docker run --rm --network none "$IMAGE" dockerd --version 2>&1) || die "$IMAGE was made but dockerd does not run"
say "$IMAGE made in $((SECONDS - began)) s ($version)"
echo "$IMAGE"
