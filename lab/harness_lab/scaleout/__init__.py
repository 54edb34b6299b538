"""Beyond one machine: Kubernetes objects rendered from each deployment's manifest (``k8s``), the
measured per-replica footprint they request (``footprint``), and a real multi-replica run on this
machine orchestrated by Docker swarm (``swarm``, ``run``; a second node: ``nodes``). Command line: ``python -m harness scaleout``."""


class ScaleoutError(RuntimeError):
    """The stack cannot be brought up or driven as asked; one line that says what to do."""
