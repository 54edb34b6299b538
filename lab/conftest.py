"""The lab's tests run with the harness's pytest plugin: its options, servers and `server` marker."""

pytest_plugins = ["harness.testing.pytest_plugin"]
