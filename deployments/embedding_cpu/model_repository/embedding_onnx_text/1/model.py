"""Server-side tokenization and pooling around the ONNX transformer: through BLS, or in-process."""

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils

from triton_helpers.bls import embed_texts, embed_texts_local
from triton_helpers.config import parameter
from triton_helpers.errors import output_dtypes
from triton_helpers.text_batches import TextBatch, TextLimits
from triton_helpers.text_embedding import EmbeddingModelInfo, load_tokenizer


def onnx_file(repository: Path, model: str) -> Path:
    """The ONNX file of ``model`` beside this model in the repository (its highest version)."""
    versions = sorted((p for p in (repository / model).iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for version in reversed(versions):
        if (version / "model.onnx").exists():
            return version / "model.onnx"
    raise pb_utils.TritonModelException(f"no model.onnx in any version of {repository / model}")


class TritonPythonModel:
    """TEXT (BYTES, UTF-8) -> EMBEDDING (FP32), the transformer run by ``onnx_model``."""

    def initialize(self, args):
        """Read the config; load the tokenizer, the pooling settings and, in-process, the ONNX session."""
        self.config = json.loads(args["model_config"])
        self.onnx_model = parameter(self.config, "onnx_model", "embedding_onnx")
        self.max_rows = parameter(self.config, "onnx_max_batch_size", 64, int)
        self.limits = TextLimits.from_config(self.config)
        self.info = EmbeddingModelInfo.read(parameter(self.config, "model_dir"))
        load_tokenizer(str(self.info.model_dir))
        self.dtype = output_dtypes(pb_utils, self.config)["EMBEDDING"]
        self.session = None
        if parameter(self.config, "onnx_in_process", "false").lower() in ("1", "true", "yes"):
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = parameter(self.config, "intra_op_thread_count", 1, int)
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            path = onnx_file(Path(args["model_repository"]).parent, self.onnx_model)
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        """Validate each request, embed every valid text of the batch together, answer each.

        In-process the responses come back directly; through BLS this returns the coroutine the
        stub awaits (a plain ``def``: the stub hands only coroutines to its event-loop thread,
        a thread hop per batch that the in-process path does not need)."""
        batch = TextBatch.gather(pb_utils, requests, "TEXT", self.limits)
        if not batch.texts:
            return batch.responses
        options = dict(max_rows=self.max_rows, normalize=self.info.normalize, model_dir=str(self.info.model_dir))
        if self.session is None:
            return self._execute_bls(batch, options)
        try:
            vectors = embed_texts_local(self.session.run, batch.texts, **options)
        except RuntimeError as exc:
            return batch.fail(pb_utils, str(exc))
        return batch.scatter(pb_utils, vectors, "EMBEDDING", self.dtype)

    async def _execute_bls(self, batch, options):
        try:
            vectors = await embed_texts(pb_utils, self.onnx_model, batch.texts, **options)
        except RuntimeError as exc:
            return batch.fail(pb_utils, str(exc))
        return batch.scatter(pb_utils, vectors, "EMBEDDING", self.dtype)

    def finalize(self):
        """Release the in-process session, if any."""
        self.session = None
