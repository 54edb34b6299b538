"""Reliability: long soaks, injected faults, and what the front gate costs."""
