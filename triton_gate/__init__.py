"""The front gate in front of tritonserver: validation, bounded bodies, honest readiness (README.md)."""

import ctypes
import logging
import signal
import sys

LOGGER = logging.getLogger("triton_gate")
#: The logger of the gate's aiohttp servers: a request refused while aiohttp parses it is one line.
HTTP_LOGGER = LOGGER.getChild("http")
PR_SET_PDEATHSIG = 1


def log(message: str) -> None:
    """One line of the gate's log (stderr; ``docker logs`` in the image)."""
    LOGGER.info(message)


def sigterm_when_parent_dies() -> None:
    """``preexec_fn`` of a child process (the gate, tritonserver): the kernel sends it SIGTERM when
    its parent dies."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class OneLineRefusals(logging.Filter):
    """aiohttp's log of malformed HTTP it answered with a 4xx: one line, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 400) < 500:
            client = record.args[0] if isinstance(record.args, tuple) and record.args else "-"
            reason = " ".join(str(exc.message).split())[:300]
            record.msg, record.args, record.exc_info = (
                "refused %s model=- client=%s: %s",
                (exc.code, client, reason),
                None,
            )
        return True


def setup_logging() -> None:
    """``gate: <message>`` lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("gate: %(message)s"))
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False
    HTTP_LOGGER.addFilter(OneLineRefusals())
