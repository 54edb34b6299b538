"""``python -m harness.serving.gate <config.json>`` (started by the local launcher), or
``python -m harness.serving.gate serve -- tritonserver ...`` (standalone: the CPU image's entry point)."""

import sys

if sys.argv[1:2] == ["serve"]:
    from harness.serving.gate.serve import serve_main

    raise SystemExit(serve_main(sys.argv[2:]))

from harness.serving.gate.server import main

raise SystemExit(main())
