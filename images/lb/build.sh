#!/usr/bin/env bash
# Build the load-balancer image from nothing (no registry needed): Debian bookworm's haproxy 2.6 and
# nginx 1.22 in a minbase made by images/debian-base.sh (mmdebstrap | docker import), as images/cpu's
# base. Both balancers are in it: the swarm stack runs one of them (lab/harness_lab/scaleout/swarm.py,
# `--lb`), its configuration mounted at run time. The tag is the hash of this recipe: an existing
# image of that tag is reused. FORCE=1 rebuilds.
#
#   images/lb/build.sh            (prints the image name on its last line)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../debian-base.sh
. "$HERE/../debian-base.sh"
SUITE=bookworm
INCLUDE=haproxy,nginx-light,ca-certificates
minbase_image_or_exit lb "$0" "${LB_IMAGE:-}"
began=$SECONDS
# Both log to the container's stdout/stderr; the service's command picks the balancer.
debian_minbase "$IMAGE" "$SUITE" "$INCLUDE" "" --hook='rm -rf "$1"/etc/nginx/sites-enabled/*' \
    --change='CMD ["haproxy", "-W", "-db", "-f", "/etc/haproxy/haproxy.cfg"]' \
    --change='LABEL org.triton-harness.image=lb' \
    || die "could not make $IMAGE"
versions=$(docker run --rm --network none "$IMAGE" sh -c 'haproxy -v | head -1; nginx -v 2>&1') \
    || die "$IMAGE was made but haproxy or nginx does not run"
say "$IMAGE made in $((SECONDS - began)) s ($(echo "$versions" | tr '\n' ' '))"
echo "$IMAGE"
