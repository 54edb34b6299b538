"""``python -m harness hostile``: the project's hostile inputs against a server the user runs,
one request at a time, with the server's readiness checked after each: a command over the gate's
own hostile-input suite (``triton_gate/tests/hostile_cases.py``, ``hostile_runner.py``)."""
