#!/usr/bin/env bash
# Build the CPU tritonserver image from nothing (no registry needed):
#   1. a Debian bookworm minbase with python3.11 (mmdebstrap | docker import), tagged by its recipe;
#   2. docker build of images/cpu/Dockerfile on it.
# Skipped when an image of that name already carries the content hash of everything that goes
# into it (this folder, the harness's onnxruntime and openvino backends, the CA bundle). FORCE=1 rebuilds.
#
#   images/cpu/build.sh [IMAGE]      (make image [IMAGE=...])
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
IMAGE=${1:-${IMAGE:-triton-harness/tritonserver-cpu:2.51.0}}
SUITE=bookworm
INCLUDE=python3.11,python3.11-venv,libpython3.11
TRITON_VERSION=2.51.0            # the server inside nvidia-pytriton 0.7.0 (requirements-no-deps.txt)
CA=/etc/ssl/certs/ca-certificates.crt
ORT_BACKEND="$ROOT/backends/onnxruntime/model.py"
OV_BACKEND="$ROOT/backends/openvino/model.py"
SHARED_BACKEND="$ROOT/backends/batched_runs.py"   # beside each model.py, which imports it
# The front gate, its own distribution (the image's entry point: python -m triton_gate serve -- tritonserver ...):
# its pyproject.toml and modules, not its tests (it imports nothing of the harness; lint-imports keeps it so).
GATE="$ROOT/triton_gate"
mapfile -t GATE_FILES < <(cd "$GATE" && ls -- pyproject.toml *.py | sort)

# shellcheck source=../debian-base.sh
. "$HERE/../debian-base.sh"

say() { echo "image: $*"; }
die() { echo "image: $*" >&2; exit 1; }

timeout 10 docker info >/dev/null 2>&1 || die "no Docker engine answers: start one with 'make docker-engine'"
[ -f "$CA" ] || die "$CA is missing (the CA bundle that PyPI's TLS proxy needs inside docker build)"

ORT_VERSION=$(sed -n 's/^onnxruntime==\([^ ]*\).*/\1/p' "$HERE/requirements.txt")
[ -n "$ORT_VERSION" ] || die "requirements.txt must pin onnxruntime==<version> (the image label names it)"
ORT_IMPLEMENTATION="onnxruntime via harness Python backend (onnxruntime $ORT_VERSION)"
OV_VERSION=$(sed -n 's/^openvino==\([^ ]*\).*/\1/p' "$HERE/requirements.txt")
[ -n "$OV_VERSION" ] || die "requirements.txt must pin openvino==<version> (the image label names it)"
OV_IMPLEMENTATION="openvino via harness Python backend (openvino $OV_VERSION)"

BASE_HASH=$( (printf '%s\n' "$SUITE" "$INCLUDE" minbase; cat "$HERE/../debian-base.sh") | sha256sum | cut -c1-12)
BASE="triton-harness/debian-$SUITE-python3.11:$BASE_HASH"
CONTENT_HASH=$( (cd "$HERE" && cat Dockerfile requirements.txt requirements-no-deps.txt build.sh; cat "$ORT_BACKEND" "$OV_BACKEND" "$SHARED_BACKEND" "$CA";
                 for f in "${GATE_FILES[@]}"; do cat "$GATE/$f"; done;
                 echo "$BASE $TRITON_VERSION $ORT_IMPLEMENTATION $OV_IMPLEMENTATION") | sha256sum | cut -c1-16)

current=$(docker image inspect "$IMAGE" --format '{{ index .Config.Labels "org.triton-harness.content-hash" }}' 2>/dev/null || true)
if [ "$current" = "$CONTENT_HASH" ] && [ -z "${FORCE:-}" ]; then
    say "$IMAGE is current (content hash $CONTENT_HASH); FORCE=1 to rebuild"
    exit 0
fi

began=$SECONDS
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    debian_minbase "$BASE" "$SUITE" "$INCLUDE" || die "could not make the base image $BASE"
fi

CONTEXT=$(mktemp -d /tmp/triton-image-cpu.XXXXXX)
trap 'rm -rf "$CONTEXT"' EXIT
cp "$HERE/Dockerfile" "$HERE/requirements.txt" "$HERE/requirements-no-deps.txt" "$CONTEXT/"
cp "$CA" "$CONTEXT/ca-certificates.crt"
mkdir -p "$CONTEXT/onnxruntime"
cp "$ORT_BACKEND" "$CONTEXT/onnxruntime/model.py"
mkdir -p "$CONTEXT/openvino"
cp "$OV_BACKEND" "$CONTEXT/openvino/model.py"
cp "$SHARED_BACKEND" "$CONTEXT/onnxruntime/"
cp "$SHARED_BACKEND" "$CONTEXT/openvino/"
mkdir -p "$CONTEXT/triton_gate"
for f in "${GATE_FILES[@]}"; do cp "$GATE/$f" "$CONTEXT/triton_gate/$f"; done
say "building $IMAGE (content hash $CONTENT_HASH)"
t=$SECONDS
docker build --quiet --network host -t "$IMAGE" \
    --build-arg BASE="$BASE" \
    --build-arg TRITON_VERSION="$TRITON_VERSION" \
    --build-arg ONNXRUNTIME_IMPLEMENTATION="$ORT_IMPLEMENTATION" \
    --build-arg OPENVINO_IMPLEMENTATION="$OV_IMPLEMENTATION" \
    --build-arg CONTENT_HASH="$CONTENT_HASH" \
    "$CONTEXT" >/dev/null
say "docker build in $((SECONDS - t)) s"
# Smoke check: the binary finds its libraries, and the stub finds libpython and the wheel's libs.
docker run --rm --network none "$IMAGE" bash -c \
    'set -e; missing=$(ldd "$(readlink -f "$(command -v tritonserver)")" /opt/tritonserver/backends/python/triton_python_backend_stub \
         /opt/tritonserver/backends/python/libtriton_python.so | grep "not found" || true); [ -z "$missing" ] || { echo "$missing"; exit 1; }
     python -c "import numpy, onnxruntime, openvino, triton_gate.server, triton_gate.serve, triton_gate.grpc_proxy"' \
    || die "$IMAGE was built but does not run (tritonserver, the 3.11 stub's libraries, numpy/onnxruntime/openvino, or the gate)"
size=$(docker image inspect "$IMAGE" --format '{{.Size}}')
say "$IMAGE built in $((SECONDS - began)) s, $((size / 1000000)) MB"
