#!/usr/bin/env bash
# Shared by the image recipes (sourced, not run): a Debian minbase root file system made with
# mmdebstrap and turned into an image with `docker import`. No registry is needed.
#
#   . "$(dirname "$0")/../debian-base.sh"
#   debian_minbase IMAGE SUITE INCLUDE [MIRROR] [--hook=CMD ...] [--change=INSTRUCTION ...]
#
# MIRROR empty: mmdebstrap takes the host's apt sources; name one for another
# suite than the host's. The apt lists and caches are removed inside; every image gets
# ENV LANG=C.UTF-8. The caller decides whether IMAGE must be made (its tag names the recipe).

ensure_mmdebstrap() {
    command -v mmdebstrap >/dev/null && return 0
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
        || { echo "mmdebstrap is needed to make a Debian base image (apt-get install mmdebstrap)" >&2; return 1; }
    echo "installing mmdebstrap (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null 2>&1 \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null; }
}

debian_minbase() {
    local image=$1 suite=$2 include=$3 mirror=${4:-} arg
    local hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin'
    local changes=(--change 'ENV LANG=C.UTF-8')
    shift $(($# < 4 ? $# : 4))
    for arg in "$@"; do
        case $arg in
            --hook=*) hook="$hook; ${arg#--hook=}" ;;
            --change=*) changes+=(--change "${arg#--change=}") ;;
            *) echo "debian_minbase: unknown argument $arg" >&2; return 2 ;;
        esac
    done
    ensure_mmdebstrap || return 1
    local t=$SECONDS
    echo "mmdebstrap --variant=minbase --include=$include $suite ${mirror:-(host apt sources)} | docker import $image" >&2
    # shellcheck disable=SC2086  # an empty mirror is no argument
    mmdebstrap --quiet --variant=minbase --include="$include" --customize-hook="$hook" "$suite" - $mirror \
        | docker import "${changes[@]}" - "$image" >/dev/null
    echo "base $image made in $((SECONDS - t)) s" >&2
}

# minbase_image_or_exit NAME SCRIPT [OVERRIDE]: the start of a recipe whose image is a minbase of
# $SUITE + $INCLUDE: sets IMAGE (OVERRIDE, else triton-harness/NAME:<hash of the recipe>), defines
# say / die, stops without an engine, and prints IMAGE and exits 0 when it exists (FORCE=1 rebuilds).
minbase_image_or_exit() {
    IMAGE_NAME=$1
    say() { echo "$IMAGE_NAME image: $*" >&2; }
    die() { echo "$IMAGE_NAME image: $*" >&2; exit 1; }
    local hash
    hash=$( (printf '%s\n' "$SUITE" "$INCLUDE" minbase; cat "$2" "${BASH_SOURCE[0]}") | sha256sum | cut -c1-12)
    IMAGE=${3:-triton-harness/$IMAGE_NAME:$hash}
    timeout 10 docker info >/dev/null 2>&1 || die "no Docker engine answers: start one with 'make docker-engine'"
    if docker image inspect "$IMAGE" >/dev/null 2>&1 && [ -z "${FORCE:-}" ]; then
        say "$IMAGE is current"
        echo "$IMAGE"
        exit 0
    fi
}
