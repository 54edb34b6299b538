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


def tensors(*specs: tuple[str, str, tuple[int, ...]]) -> str:
    """A config's ``input``/``output`` list: one ``(name, data type, dims)`` a tensor, the data type
    without its ``TYPE_`` prefix."""
    rendered = [
        f'{{ name: "{name}" data_type: TYPE_{dtype} dims: [ {", ".join(str(d) for d in dims)} ] }}'
        for name, dtype, dims in specs
    ]
    return "[ " + ", ".join(rendered) + " ]"


def model_config(
    name: str,
    inputs: list[tuple[str, str, tuple[int, ...]]],
    outputs: list[tuple[str, str, tuple[int, ...]]],
    *,
    backend: str = "python",
    max_batch_size: int = 0,
    extra: tuple[str, ...] = (),
) -> str:
    """A model's config.pbtxt: its ``name``, ``backend``, batch size, ``inputs`` and ``outputs`` (as
    :func:`tensors` takes them), then the ``extra`` lines as they are."""
    lines = [
        f'name: "{name}"',
        f'backend: "{backend}"',
        f"max_batch_size: {max_batch_size}",
        f"input {tensors(*inputs)}",
        f"output {tensors(*outputs)}",
        *extra,
    ]
    return "\n" + "\n".join(lines) + "\n"


def echo_config(
    name: str = "echo", *, max_batch_size: int = 16, instances: int | None = 2, queue_delay_us: int | None = 1000
) -> str:
    """The config.pbtxt of an echo model: BYTES ``TEXT`` in, ``TEXT_OUT`` out; ``instances``
    CPU instances and dynamic batching with ``queue_delay_us`` unless None (Triton's defaults)."""
    extra = []
    if instances is not None:
        extra.append(f"instance_group [ {{ kind: KIND_CPU count: {instances} }} ]")
    if queue_delay_us is not None:
        extra.append(f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}")
    return model_config(
        name,
        [("TEXT", "STRING", (1,))],
        [("TEXT_OUT", "STRING", (1,))],
        max_batch_size=max_batch_size,
        extra=tuple(extra),
    )


ECHO_CONFIG = echo_config()


def write_model(repository: Path, name: str, config: str, model_py: str | None = None) -> Path:
    """Write a model folder into ``repository``: ``config.pbtxt`` and its version folder ``1/``,
    with ``model.py`` when ``model_py`` is given (a Python model's source)."""
    folder = Path(repository) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config)
    if model_py is not None:
        (folder / "1" / "model.py").write_text(model_py)
    return folder


def write_echo(repository: Path, config: str = ECHO_CONFIG, name: str = "echo") -> Path:
    """Write an echo model folder (``config.pbtxt`` + ``1/model.py``) into ``repository``."""
    return write_model(repository, name, config, ECHO_MODEL)


def echo_repository(root: Path) -> Path:
    """A repository with one ``echo`` Python model: 2 instances, dynamic batching."""
    repo = Path(root) / "model_repository"
    write_echo(repo)
    return repo
