"""Server-side helpers shared by the deployments' Python-backend models.

Everything here is plain Python/numpy (no ``triton_python_backend_utils`` import at module
level), so it is unit-tested outside Triton and imported by each ``model.py``.
"""

from triton_helpers.errors import InputError

__all__ = ["InputError"]
