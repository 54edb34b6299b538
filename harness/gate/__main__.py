from harness.gate.server import main

raise SystemExit(main())
