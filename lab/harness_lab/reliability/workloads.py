"""Checked workloads: requests whose every answer is known (``harness.measuring.loadgen.Workload``
with ``make`` and ``check``), which the soak, the fault scenarios and the gate-cost runs load."""

from __future__ import annotations

import numpy as np
import tritonclient.http as httpclient

from harness.measuring.loadgen import Retry, Workload
from harness.tensors import make_inputs, make_outputs

#: No retries; a worker pauses 50 ms after a failed request (a server that refuses fast is not spun on).
FAILED_PAUSE = Retry(backoff_s=0.05)
WORDS = "river lamp orbit quiet granite violet harbour engine meadow signal copper lantern glacier thunder".split()
WORDS += "pepper circuit falcon marble velvet canyon".split()


def unique_sentence(index: int) -> str:
    """A distinct short English sentence per index (deterministic)."""
    words = [WORDS[(index // len(WORDS) ** k) % len(WORDS)] for k in range(3)]
    return f"Request {index}: the {words[0]} near the {words[1]} and the {words[2]}."


def same_answer(got: np.ndarray, want: np.ndarray, atol: float) -> bool:
    """Same shape and values: bytes equal for BYTES tensors, within ``atol`` for numbers."""
    if got.shape != want.shape:
        return False
    if got.dtype == object or want.dtype == object:
        return [bytes(x) for x in got.reshape(-1)] == [bytes(x) for x in want.reshape(-1)]
    return bool(np.allclose(got, want, atol=atol, rtol=0))


def echo_workload(model: str = "echo", input_name: str = "TEXT", output: str = "TEXT_OUT") -> Workload:
    """A Python model that returns its BYTES input: request ``i`` must get back its own text."""

    def make(i: int):
        text = f"{unique_sentence(i)} #{i}".encode()
        return {input_name: np.array([[text]], dtype=object)}, text

    def check(arrays: dict, text: bytes) -> str | None:
        if same_answer(arrays[output], np.array([[text]], dtype=object), atol=0):
            return None
        return f"{arrays[output].reshape(-1)[:1]!r} instead of its own text"

    return Workload(
        model=model,
        outputs=[output],
        make=make,
        check=check,
        describe=f"{model}: every request sends a unique text and must get exactly that text back",
        retry=FAILED_PAUSE,
    )


def text_embedding_workload(
    http_url: str, model: str, *, input_name: str, output: str, cases: int = 256, atol: float = 2e-4
) -> Workload:
    """A text -> vector model: ``bytes_workload`` of ``cases`` unique sentences (batching pads
    sequences, which changes floats in the 1e-6 range; two sentences differ by far more)."""
    sentences = [unique_sentence(i).encode() for i in range(cases)]
    workload = bytes_workload(http_url, model, sentences, input_name=input_name, output=output, atol=atol)
    workload.describe = (
        f"{model}: {cases} unique sentences, each answer compared with the vector the same server "
        f"gave that sentence alone before the load (atol {atol})"
    )
    return workload


def bytes_workload(
    http_url: str,
    model: str,
    cases: list[bytes],
    *,
    input_name: str = "IMAGE_BYTES",
    output: str = "BOXES",
    atol: float = 0.05,
    names: list[str] | None = None,
) -> Workload:
    """Encoded files (images) in, an array out: request ``i`` sends case ``i % len(cases)`` and
    must get the ``output`` the same server gave that case alone before the load, within
    ``atol`` (batching changes float results slightly; boxes of different images differ by far more)."""
    names = names or [f"case {i}" for i in range(len(cases))]
    expected: dict[int, np.ndarray] = {}
    with httpclient.InferenceServerClient(http_url, network_timeout=300) as client:
        for i, data in enumerate(cases):
            inputs = make_inputs("http", {input_name: np.array([[data]], dtype=object)})
            expected[i] = client.infer(model, inputs, outputs=make_outputs("http", [output])).as_numpy(output)

    def make(i: int):
        key = i % len(cases)
        return {input_name: np.array([[cases[key]]], dtype=object)}, key

    def check(arrays: dict, key: int) -> str | None:
        """None when right; else whose answer it got (another case's, or none)."""
        got = arrays[output]
        if same_answer(got, expected[key], atol):
            return None
        owner = next((other for other, want in expected.items() if same_answer(got, want, atol)), None)
        return f"case {key} got " + (
            f"the answer of case {owner}" if owner is not None else "an answer that matches no case"
        )

    return Workload(
        model=model,
        outputs=[output],
        make=make,
        check=check,
        describe=(
            f"{model}: {len(cases)} files ({', '.join(names)}) in turn, each request's {output} compared with "
            f"what the same server gave that file alone before the load (atol {atol})"
        ),
        retry=FAILED_PAUSE,
    )
