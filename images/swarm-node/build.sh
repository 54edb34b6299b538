#!/usr/bin/env bash
# Build the second swarm node's image from nothing (no registry needed): Debian bookworm's docker.io
# (dockerd, containerd, runc) in a minbase made by images/debian-base.sh. It runs privileged as a
# container of the host's engine, its own dockerd inside, and joins the host's swarm as a worker
# (lab/harness_lab/scaleout/nodes.py). The tag is the hash of this recipe. FORCE=1 rebuilds.
#
#   images/swarm-node/build.sh    (prints the image name on its last line)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../debian-base.sh
. "$HERE/../debian-base.sh"
SUITE=bookworm
INCLUDE=docker.io,containerd,runc,iptables,ca-certificates,procps,iproute2
minbase_image_or_exit swarm-node "$0" "${SWARM_NODE_IMAGE:-}"
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
