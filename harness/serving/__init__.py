"""Serving: how a tritonserver is started (launchers: local / docker / external), the Python
onnxruntime backend, packed Python environments for the stubs, and the front gate."""
