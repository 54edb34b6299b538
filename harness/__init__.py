"""The shared harness: start a real tritonserver, prove each deployment correct, measure it."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
