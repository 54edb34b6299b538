"""Front gate of the harness's servers: validation, honest readiness, isolation (see server.py)."""
