#!/usr/bin/env bash
# Build the load-balancer image from nothing (no registry needed): Debian bookworm's nginx in a
# minbase made by images/debian-base.sh (mmdebstrap | docker import), as images/cpu's base. The tag is
# the hash of this recipe: an existing image of that tag is reused. FORCE=1 rebuilds.
#
#   images/lb/build.sh            (prints the image name on its last line)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../debian-base.sh
. "$HERE/../debian-base.sh"
SUITE=bookworm
INCLUDE=nginx-light,ca-certificates
RECIPE_HASH=$( (printf '%s\n' "$SUITE" "$INCLUDE" minbase; cat "$0" "$HERE/../debian-base.sh") | sha256sum | cut -c1-12)
IMAGE=${LB_IMAGE:-triton-harness/nginx-lb:$RECIPE_HASH}

say() { echo "lb image: $*" >&2; }
die() { echo "lb image: $*" >&2; exit 1; }

timeout 10 docker info >/dev/null 2>&1 || die "no Docker engine answers: start one with 'make docker-engine'"
if docker image inspect "$IMAGE" >/dev/null 2>&1 && [ -z "${FORCE:-}" ]; then
    say "$IMAGE is current"
    echo "$IMAGE"
    exit 0
fi
began=$SECONDS
# nginx logs to the container's stdout/stderr; the configuration is mounted at run time (harness/tools/scaleout/compose.py).
debian_minbase "$IMAGE" "$SUITE" "$INCLUDE" "" --hook='rm -rf "$1"/etc/nginx/sites-enabled/*' \
    --change='CMD ["nginx", "-g", "daemon off;"]' --change='LABEL org.triton-harness.image=nginx-lb' \
    || die "could not make $IMAGE"
nginx_version=$(docker run --rm --network none "$IMAGE" nginx -v 2>&1) || die "$IMAGE was made but nginx does not run"
say "$IMAGE made in $((SECONDS - began)) s ($nginx_version)"
echo "$IMAGE"
