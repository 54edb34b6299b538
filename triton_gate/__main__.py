"""``python -m triton_gate <config.json>`` (started by the harness's local launcher), or
``python -m triton_gate serve -- tritonserver ...`` (standalone: the CPU image's entry point)."""

import sys

from triton_gate import setup_logging


def main() -> int:
    setup_logging()
    if sys.argv[1:2] == ["serve"]:
        from triton_gate.serve import serve_main

        return serve_main(sys.argv[2:])
    from triton_gate.server import main as run_local

    return run_local()


raise SystemExit(main())
