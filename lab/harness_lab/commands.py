"""The lab's subcommands of ``python -m harness`` (the core finds this table through the entry point
group ``triton_harness.commands``, lab/pyproject.toml): name -> (module whose ``main(argv)`` runs it,
one-line summary). Each module also runs alone: ``python -m harness_lab.<module>``."""

COMMANDS = {
    "peers": ("harness_lab.peers.__main__", "our embedding servers vs peer servers, same generator and bodies"),
    "soak": ("harness_lab.reliability.soak", "hold a load: errors, latency drift, memory"),
    "faults": ("harness_lab.reliability.faults", "kill a stub, reload, restart under verified load"),
    "gate-cost": ("harness_lab.reliability.gate_cost", "throughput with and without the front gate"),
    "gate-bounds": ("harness_lab.reliability.gate_bounds", "what refusals and a burst of the largest requests cost"),
    "hostile": ("harness_lab.hostile.__main__", "the project's hostile inputs against a server, one at a time"),
    "scaleout": ("harness_lab.scaleout.__main__", "multi-replica runs of the swarm stacks"),
}
