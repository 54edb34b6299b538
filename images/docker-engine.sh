#!/usr/bin/env bash
# Start / stop a Docker engine for the harness's docker mode (root, Debian; no systemd needed).
#
#   images/docker-engine.sh start   # install docker.io etc. when missing, start dockerd in the background
#   images/docker-engine.sh stop    # stop only the dockerd that `start` started, undo what it changed
#   images/docker-engine.sh status
#
# `start` does nothing when an engine already answers (that engine is not ours to stop).
# It records in $STATE_DIR what it is about to change (ip_forward, the FORWARD policy, whether
# docker0 / DOCKER chains existed) and the dockerd PID; `stop` stops that PID only, then removes
# the docker0 bridge, the DOCKER* iptables chains and the rules jumping to them, and restores
# the FORWARD policy and net.ipv4.ip_forward.
set -euo pipefail

STATE_DIR=${TRITON_HARNESS_DOCKER_STATE:-/run/triton-harness-docker}
LOG=${TRITON_HARNESS_DOCKER_LOG:-/var/log/triton-harness-dockerd.log}
PACKAGES="docker.io containerd runc iptables"

say() { echo "docker-engine: $*"; }
die() { echo "docker-engine: $*" >&2; exit 1; }

answers() { timeout 10 docker info >/dev/null 2>&1; }

forward_policy() { iptables -S FORWARD 2>/dev/null | awk '$1 == "-P" {print $3; exit}'; }

start() {
    if answers; then
        say "an engine already answers ($(docker info --format '{{.ServerVersion}}' 2>/dev/null)); nothing started"
        return 0
    fi
    [ "$(id -u)" = 0 ] || die "starting dockerd needs root (run as root, or start an engine yourself)"
    if [ -f "$STATE_DIR/dockerd.pid" ] && kill -0 "$(cat "$STATE_DIR/dockerd.pid")" 2>/dev/null; then
        die "dockerd $(cat "$STATE_DIR/dockerd.pid") started earlier does not answer; see $LOG, or run 'make docker-engine-stop'"
    fi
    local began=$SECONDS
    if ! command -v dockerd >/dev/null || ! command -v containerd >/dev/null || ! command -v runc >/dev/null \
            || ! command -v iptables >/dev/null; then
        command -v apt-get >/dev/null || die "no dockerd here and no apt-get to install it: install a Docker engine"
        say "installing $PACKAGES (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null
        say "installed in $((SECONDS - began)) s"
    fi
    mkdir -p "$STATE_DIR"
    # What dockerd will change, as it is now.
    cat /proc/sys/net/ipv4/ip_forward > "$STATE_DIR/ip_forward"
    forward_policy > "$STATE_DIR/forward_policy" || true
    if ip link show docker0 >/dev/null 2>&1; then echo yes; else echo no; fi > "$STATE_DIR/docker0_existed"
    if iptables -S 2>/dev/null | grep -q -- '-N DOCKER'; then echo yes; else echo no; fi > "$STATE_DIR/chains_existed"
    local ready_began=$SECONDS
    # setsid: dockerd outlives this shell and make; its own PID is what we stop.
    setsid dockerd >>"$LOG" 2>&1 < /dev/null &
    echo $! > "$STATE_DIR/dockerd.pid"
    for _ in $(seq 1 120); do
        if answers; then
            say "dockerd $(cat "$STATE_DIR/dockerd.pid") ready in $((SECONDS - ready_began)) s (log $LOG; stop with 'make docker-engine-stop')"
            return 0
        fi
        kill -0 "$(cat "$STATE_DIR/dockerd.pid")" 2>/dev/null || { tail -20 "$LOG" >&2; die "dockerd exited (log $LOG)"; }
        sleep 0.5
    done
    tail -20 "$LOG" >&2
    die "dockerd did not answer within 60 s (log $LOG)"
}

undo_iptables() {
    command -v iptables >/dev/null || return 0
    local table line
    for table in filter nat; do
        # Rules that jump to DOCKER* chains or name docker0, in the built-in chains: delete them.
        iptables -t "$table" -S 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) ' \
            | grep -E 'DOCKER|docker0' | while read -r line; do
                # shellcheck disable=SC2086
                eval iptables -t "$table" ${line/-A/-D} || true
            done
        # Then the DOCKER* chains themselves.
        for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^DOCKER/ {print $2}'); do
            iptables -t "$table" -F "$chain" 2>/dev/null || true
        done
        for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^DOCKER/ {print $2}'); do
            iptables -t "$table" -X "$chain" 2>/dev/null || true
        done
    done
}

stop() {
    if [ ! -f "$STATE_DIR/dockerd.pid" ]; then
        say "no dockerd started by 'make docker-engine' (nothing in $STATE_DIR); nothing stopped"
        return 0
    fi
    local pid; pid=$(cat "$STATE_DIR/dockerd.pid")
    if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q dockerd; then
        # Our containers first (dockerd would stop them with a 10 s grace each anyway).
        local ours; ours=$(docker ps -aq --filter label=started-by=triton-harness 2>/dev/null || true)
        [ -z "$ours" ] || docker rm -f $ours >/dev/null 2>&1 || true
        kill -TERM "$pid"
        for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$pid" 2>/dev/null; then
            say "dockerd $pid still running after 30 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 1
        fi
        say "dockerd $pid stopped"
    else
        say "dockerd $pid is not running any more"
    fi
    if [ "$(cat "$STATE_DIR/docker0_existed" 2>/dev/null)" = no ] && ip link show docker0 >/dev/null 2>&1; then
        ip link delete docker0 && say "removed the docker0 bridge"
    fi
    if [ "$(cat "$STATE_DIR/chains_existed" 2>/dev/null)" = no ]; then
        undo_iptables && say "removed the DOCKER iptables chains and rules"
    fi
    local policy; policy=$(cat "$STATE_DIR/forward_policy" 2>/dev/null || true)
    if [ -n "$policy" ] && [ "$(forward_policy)" != "$policy" ]; then
        iptables -P FORWARD "$policy" && say "FORWARD policy back to $policy"
    fi
    local fwd; fwd=$(cat "$STATE_DIR/ip_forward" 2>/dev/null || true)
    if [ -n "$fwd" ] && [ "$(cat /proc/sys/net/ipv4/ip_forward)" != "$fwd" ]; then
        echo "$fwd" > /proc/sys/net/ipv4/ip_forward && say "net.ipv4.ip_forward back to $fwd"
    fi
    if [ -d /run/docker/netns ]; then
        umount /run/docker/netns/* 2>/dev/null || true
        rm -rf /run/docker/netns
    fi
    rm -rf "$STATE_DIR"
}

status() {
    if answers; then say "an engine answers ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))"; else say "no engine answers"; fi
    if [ -f "$STATE_DIR/dockerd.pid" ]; then say "started by make docker-engine: PID $(cat "$STATE_DIR/dockerd.pid")"; fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 start|stop|status" ;;
esac
