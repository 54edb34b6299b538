"""``python -m harness hostile``: the project's hostile inputs against a server the user runs,
one request at a time, with the server's readiness checked after each (cases in ``cases.py``)."""
