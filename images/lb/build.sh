#!/usr/bin/env bash
# Build the load-balancer image from nothing (no registry needed): Debian bookworm's nginx in a
# minbase made with mmdebstrap and `docker import`, as images/cpu does for its base. The tag is
# the hash of this recipe: an existing image of that tag is reused. FORCE=1 rebuilds.
#
#   images/lb/build.sh            (prints the image name on its last line)
set -euo pipefail
SUITE=bookworm
INCLUDE=nginx-light,ca-certificates
RECIPE_HASH=$( (printf '%s\n' "$SUITE" "$INCLUDE" minbase; cat "$0") | sha256sum | cut -c1-12)
IMAGE=${LB_IMAGE:-triton-harness/nginx-lb:$RECIPE_HASH}

say() { echo "lb image: $*" >&2; }
die() { echo "lb image: $*" >&2; exit 1; }

timeout 10 docker info >/dev/null 2>&1 || die "no Docker engine answers: start one with 'make docker-engine'"
if docker image inspect "$IMAGE" >/dev/null 2>&1 && [ -z "${FORCE:-}" ]; then
    say "$IMAGE is current"
    echo "$IMAGE"
    exit 0
fi
if ! command -v mmdebstrap >/dev/null; then
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || die "mmdebstrap is needed (apt-get install mmdebstrap)"
    say "installing mmdebstrap (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null 2>&1 \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null; }
fi
began=$SECONDS
say "mmdebstrap --variant=minbase --include=$INCLUDE $SUITE | docker import $IMAGE"
# No mirror argument: mmdebstrap uses the host's apt sources (PLATFORM.md). nginx logs to the
# container's stdout/stderr; the configuration is mounted at run time (harness/scaleout/compose.py).
mmdebstrap --quiet --variant=minbase --include="$INCLUDE" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/etc/nginx/sites-enabled/*' \
    "$SUITE" - \
    | docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["nginx", "-g", "daemon off;"]' \
        --change 'LABEL org.triton-harness.image=nginx-lb' - "$IMAGE" >/dev/null
nginx_version=$(docker run --rm --network none "$IMAGE" nginx -v 2>&1) || die "$IMAGE was made but nginx does not run"
say "$IMAGE made in $((SECONDS - began)) s ($nginx_version)"
echo "$IMAGE"
