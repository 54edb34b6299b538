"""Toy models for the harness's own tests and reliability runs: an ``echo`` Python model whose
every answer is checkable (it returns its own text), in any repository folder."""

from __future__ import annotations

from pathlib import Path

ECHO_MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Returns its input, one response per request of the (dynamic) batch."""

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TEXT_OUT", pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy())])
                for r in requests]
'''


def echo_config(
    name: str = "echo", *, max_batch_size: int = 16, instances: int | None = 2, queue_delay_us: int | None = 1000
) -> str:
    """The config.pbtxt of an echo model: BYTES ``TEXT`` in, ``TEXT_OUT`` out; ``instances``
    CPU instances and dynamic batching with ``queue_delay_us`` unless None (Triton's defaults)."""
    lines = [
        f'name: "{name}"',
        'backend: "python"',
        f"max_batch_size: {max_batch_size}",
        'input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]',
        'output [ { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ 1 ] } ]',
    ]
    if instances is not None:
        lines.append(f"instance_group [ {{ kind: KIND_CPU count: {instances} }} ]")
    if queue_delay_us is not None:
        lines.append(f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}")
    return "\n" + "\n".join(lines) + "\n"


ECHO_CONFIG = echo_config()


def write_echo(repository: Path, config: str = ECHO_CONFIG, name: str = "echo") -> Path:
    """Write an echo model folder (``config.pbtxt`` + ``1/model.py``) into ``repository``."""
    folder = Path(repository) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config)
    (folder / "1" / "model.py").write_text(ECHO_MODEL)
    return folder


def echo_repository(root: Path) -> Path:
    """A repository with one ``echo`` Python model: 2 instances, dynamic batching."""
    repo = Path(root) / "model_repository"
    write_echo(repo)
    return repo
