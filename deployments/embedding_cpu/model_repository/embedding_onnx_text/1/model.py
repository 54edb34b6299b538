"""Server-side tokenization and pooling around the ONNX transformer: through BLS, or in-process
(on onnxruntime or OpenVINO)."""

import json
import os
from pathlib import Path

import triton_python_backend_utils as pb_utils
from embedding_cpu_processing.bls import embed_texts, embed_texts_local, openvino_run
from embedding_cpu_processing.text_batches import TextBatch, TextLimits
from embedding_cpu_processing.text_embedding import EmbeddingModelInfo, load_tokenizer

from triton_helpers.config import parameter


def onnx_file(repository: Path, model: str) -> Path:
    """The ONNX file of ``model`` beside this model in the repository (its highest version)."""
    versions = sorted((p for p in (repository / model).iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for version in reversed(versions):
        if (version / "model.onnx").exists():
            return version / "model.onnx"
    raise pb_utils.TritonModelException(f"no model.onnx in any version of {repository / model}")


def session_options(config: dict):
    """onnxruntime options: ``intra_op_thread_count`` threads, one inter-op thread, no spinning
    (the instance shares its core with tritonserver), and every ``session.*`` parameter as a
    session config entry (e.g. ``session.set_denormal_as_zero``)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = parameter(config, "intra_op_thread_count", 1, int)
    options.inter_op_num_threads = 1
    options.enable_mem_pattern = parameter(config, "enable_mem_pattern", "1") not in ("0", "false")
    entries = {"session.intra_op.allow_spinning": "0"}
    entries.update(
        {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items() if k.startswith("session.")}
    )
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    return options


def lower_priority(nice: int) -> None:
    """Every thread of this instance's stub process at ``nice`` (Linux: a thread's own value, which
    the threads it starts later inherit): a busier model's instances yield the CPU to others'."""
    for thread_id in os.listdir("/proc/self/task"):
        os.setpriority(os.PRIO_PROCESS, int(thread_id), nice)


class TritonPythonModel:
    """TEXT (BYTES, UTF-8) -> EMBEDDING (FP32), the transformer run by ``onnx_model``; TOKEN_COUNT
    (each text's tokens after truncation, what the OpenAI route's ``usage`` sums) when asked for."""

    def initialize(self, args):
        """Read the config; load the tokenizer, the pooling settings and, in-process, the ONNX file's engine."""
        self.config = json.loads(args["model_config"])
        nice = parameter(self.config, "nice", 0, int)
        if nice:
            lower_priority(nice)
        self.onnx_model = parameter(self.config, "onnx_model", "embedding_onnx")
        self.max_rows = parameter(self.config, "onnx_max_batch_size", 64, int)
        self.max_tokens = parameter(self.config, "max_batch_tokens", 0, int) or None
        self.limits = TextLimits.from_config(self.config)
        if parameter(self.config, "tokenizer_parallelism", "true").lower() in ("0", "false", "no"):
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
        self.info = EmbeddingModelInfo.read(parameter(self.config, "model_dir"))
        load_tokenizer(str(self.info.model_dir))
        self.dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(self.config, "EMBEDDING")["data_type"]
        )
        self.count_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(self.config, "TOKEN_COUNT")["data_type"]
        )
        self.run = None  # in-process: run(names, feed) -> [last_hidden_state]; None: through BLS
        if parameter(self.config, "onnx_in_process", "false").lower() in ("1", "true", "yes"):
            self.run = self._in_process_run(onnx_file(Path(args["model_repository"]).parent, self.onnx_model))

    def _in_process_run(self, path: Path):
        """``run(names, feed)`` of ``path`` in this process, on ``in_process_engine``: onnxruntime
        (the default) or OpenVINO (``openvino_run``)."""
        engine = parameter(self.config, "in_process_engine", "onnxruntime")
        if engine == "openvino":
            threads = parameter(self.config, "intra_op_thread_count", 1, int)
            run, precision = openvino_run(path, threads, parameter(self.config, "INFERENCE_PRECISION_HINT", ""))
            pb_utils.Logger.log_info(
                f"{self.config['name']}: {path.name} in-process on OpenVINO, precision={precision}"
            )
            return run
        if engine != "onnxruntime":
            raise pb_utils.TritonModelException(f"in_process_engine {engine!r}: onnxruntime or openvino")
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), session_options(self.config), providers=["CPUExecutionProvider"])
        # The arena returns a run's memory after it when the config asks (e.g. "cpu:0").
        run_options = ort.RunOptions()
        shrinkage = parameter(self.config, "memory.enable_memory_arena_shrinkage", "")
        if shrinkage:
            run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", shrinkage)
        return lambda names, feed: session.run(names, feed, run_options)

    def execute(self, requests):
        """Validate each request, embed every valid text of the batch together, answer each.

        In-process the responses come back directly; through BLS this returns the coroutine the
        stub awaits (a plain ``def``: the stub hands only coroutines to its event-loop thread,
        a thread hop per batch that the in-process path does not need)."""
        batch = TextBatch.gather(pb_utils, requests, "TEXT", self.limits)
        if not batch.texts:
            return batch.responses
        options = dict(
            max_rows=self.max_rows,
            max_tokens=self.max_tokens,
            normalize=self.info.normalize,
            pooling=self.info.pooling,
            model_dir=str(self.info.model_dir),
        )
        if self.run is None:
            return self._execute_bls(batch, options)
        try:
            vectors, counts = embed_texts_local(self.run, batch.texts, token_counts=True, **options)
        except RuntimeError as exc:
            return batch.fail(pb_utils, str(exc))
        return self._answer(batch, vectors, counts)

    async def _execute_bls(self, batch, options):
        try:
            vectors, counts = await embed_texts(pb_utils, self.onnx_model, batch.texts, token_counts=True, **options)
        except RuntimeError as exc:
            return batch.fail(pb_utils, str(exc))
        return self._answer(batch, vectors, counts)

    def _answer(self, batch, vectors, counts):
        """EMBEDDING to every request; TOKEN_COUNT to those that ask for it (the counts come free
        with the tokenizing)."""
        return batch.scatter(
            pb_utils, vectors, "EMBEDDING", self.dtype, extra={"TOKEN_COUNT": (counts, self.count_dtype)}
        )

    def finalize(self):
        """Release the in-process engine, if any."""
        self.run = None
