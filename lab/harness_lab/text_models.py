"""Text-in, vector-out models as the lab's loads drive them (the scale-out load, the peers' native
requests): the tensor names come from the model's config.pbtxt, never from a fixed name; and
whether bytes are text (``is_utf8``)."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2

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


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
