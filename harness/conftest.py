"""The harness's tests run with its pytest plugin (the lab's tests load the same one)."""

pytest_plugins = ["harness.testing.pytest_plugin"]
