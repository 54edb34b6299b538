"""The replicas' Docker network: a free /24 that overlaps none of the engine's networks."""

from __future__ import annotations

import ipaddress
import json
import subprocess

from harness.tools.scaleout import ScaleoutError


def used_subnets() -> list[ipaddress.IPv4Network]:
    """Subnets of the engine's networks (a new one must not overlap them)."""
    names = subprocess.run(["docker", "network", "ls", "-q"], capture_output=True, text=True, check=True).stdout.split()
    found = []
    if names:
        inspected = json.loads(
            subprocess.run(["docker", "network", "inspect", *names], capture_output=True, text=True, check=True).stdout
        )
        for network in inspected:
            for config in (network.get("IPAM") or {}).get("Config") or []:
                if config.get("Subnet") and ":" not in config["Subnet"]:
                    found.append(ipaddress.ip_network(config["Subnet"], strict=False))
    return found


def free_subnet(project: str) -> ipaddress.IPv4Network:
    """A /24 in 172.29.0.0/16 that no network of the engine uses (ours, left over, is reused)."""
    taken = used_subnets()
    ours = subprocess.run(
        ["docker", "network", "inspect", f"{project}_replicas", "--format", "{{range .IPAM.Config}}{{.Subnet}}{{end}}"],
        capture_output=True,
        text=True,
    )
    if ours.returncode == 0 and ours.stdout.strip():
        return ipaddress.ip_network(ours.stdout.strip())
    for candidate in ipaddress.ip_network("172.29.0.0/16").subnets(new_prefix=24):
        if candidate.network_address.packed[2] < 10:
            continue
        if not any(candidate.overlaps(t) for t in taken):
            return candidate
    raise ScaleoutError("no free /24 in 172.29.0.0/16 for the replicas' network")
