"""``python -m triton_gate <config.json>`` (started by the local launcher), or
``python -m triton_gate serve -- tritonserver ...`` (standalone: the CPU image's entry point)."""

import sys

if sys.argv[1:2] == ["serve"]:
    from triton_gate.serve import serve_main

    raise SystemExit(serve_main(sys.argv[2:]))

from triton_gate.server import main

raise SystemExit(main())
