"""Text-in, vector-out models as the lab's loads drive them (the scale-out load, the peers' native
requests): the tensor names come from the model's config.pbtxt, never from a fixed name."""

from __future__ import annotations

import numpy as np
from tritonclient.grpc import model_config_pb2

from harness.measuring.loadgen import Workload
from harness.repository import configs

FLOATS = {getattr(model_config_pb2, f"TYPE_{name}") for name in ("FP16", "BF16", "FP32", "FP64")}


def text_tensors(repository, model: str) -> tuple[str, str]:
    """(input, output) of ``model`` in ``repository``: its one BYTES input and its one float output;
    ValueError naming the model's tensors when it has other ones."""
    config = configs(repository)[model]
    texts = [i.name for i in config.input if i.data_type == model_config_pb2.TYPE_STRING]
    vectors = [o.name for o in config.output if o.data_type in FLOATS]
    if len(config.input) != 1 or len(texts) != 1 or len(vectors) != 1:
        raise ValueError(
            f"{model}: the load sends sentences and checks one vector per sentence, but the model has inputs "
            f"{[i.name for i in config.input]} and outputs {[o.name for o in config.output]}: not text in, vector out"
        )
    return texts[0], vectors[0]


def sentence_workload(model: str, tensors: tuple[str, str], sentence: str) -> Workload:
    """``sentence`` in ``tensors[0]`` every request; each answer's ``tensors[1]`` must be a finite
    vector of the first answer's size and direction (cosine >= 0.9999)."""
    text_input, output = tensors
    first: dict[str, np.ndarray] = {}

    def check(arrays: dict[str, np.ndarray], key) -> str | None:
        if output not in arrays:
            return f"no {output} in {list(arrays)}"
        vector = np.asarray(arrays[output], dtype=np.float32).reshape(-1)
        if not vector.size:
            return f"{output} is empty"
        reference = first.setdefault("vector", vector)
        if vector.shape != reference.shape or not np.all(np.isfinite(vector)):
            return f"{output} of shape {vector.shape} or not finite"
        if float(np.dot(vector, reference) / np.linalg.norm(vector) / np.linalg.norm(reference)) < 0.9999:
            return f"{output} differs from the first response"
        return None

    return Workload(
        model=model,
        inputs={text_input: np.array([[sentence.encode()]], dtype=object)},
        outputs=[output],
        check=check,
        describe=f"{model}: one sentence, every answer's {output} the first answer's vector",
    )
