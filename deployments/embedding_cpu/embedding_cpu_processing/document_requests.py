"""The request side of the document pipelines, shared by ``full_pipeline_py`` and
``pipeline_orchestrator``: RAW_FILE items -> chunks per file, and vectors -> responses.

Only the embedding step differs between the two models (sentence-transformers in-process vs
BLS to the ONNX model), so each ``model.py`` is: parse, embed every chunk of the batch, answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embedding_cpu_processing.documents import DocumentLimits, PipelineOptions, aggregate, chunk_text, extract_text
from triton_helpers.errors import InputError, input_error_response, single_bytes_items


@dataclass
class DocumentJob:
    """One request of the batch: its options, the chunks of each of its files, or its error."""

    options: PipelineOptions | None = None
    chunks_per_file: list[list[str]] = field(default_factory=list)
    error: str | None = None
    server_error: bool = False


def parse_requests(
    pb_utils: Any,
    requests: list,
    *,
    limits: DocumentLimits,
    tokenizer_file: str,
    default_chunk_tokens: int,
    max_chunk_tokens: int,
) -> list[DocumentJob]:
    """Parse and chunk every file of every request; a bad request gets an error, not the batch."""
    jobs = []
    for request in requests:
        job = DocumentJob()
        try:
            parameters = json.loads(request.parameters() or "{}")
            job.options = PipelineOptions.from_parameters(parameters, default_chunk_tokens, max_chunk_tokens)
            files = single_bytes_items(pb_utils.get_input_tensor_by_name(request, "RAW_FILE").as_numpy(), "RAW_FILE")
            check_request_size(files, limits)
            if job.options.aggregation == "none" and len(files) != 1:
                raise InputError("aggregation 'none' returns the chunk vectors of one file: send one file per request")
            for index, data in enumerate(files):
                try:
                    text = extract_text(data, limits)
                    job.chunks_per_file.append(
                        chunk_text(text, tokenizer_file, job.options.chunk_tokens, limits.max_chunks)
                    )
                except InputError as exc:
                    prefix = f"file {index}: " if len(files) > 1 else ""
                    raise InputError(prefix + str(exc)) from None
        except InputError as exc:
            job.error = str(exc)
        jobs.append(job)
    return jobs


def check_request_size(files: list[bytes], limits: DocumentLimits) -> None:
    """Refuse a request over ``max_files`` files or ``max_request_bytes`` bytes in all, before parsing."""
    if len(files) > limits.max_files:
        raise InputError(f"request has {len(files)} files, over the limit of {limits.max_files} (max_files)")
    total = sum(len(f) for f in files)
    if total > limits.max_request_bytes:
        raise InputError(
            f"request has {total} bytes of files, over the limit of {limits.max_request_bytes} (max_request_bytes)"
        )


def all_chunks(jobs: list[DocumentJob]) -> list[str]:
    """Every chunk of every valid job, in order."""
    return [chunk for job in jobs if job.error is None for chunks in job.chunks_per_file for chunk in chunks]


def build_responses(pb_utils: Any, jobs: list[DocumentJob], vectors: np.ndarray, dtypes: dict) -> list:
    """One response per request: FINAL_EMBEDDING, CHUNK_COUNT, CHUNK_EMBEDDINGS when asked."""
    responses = []
    offset = 0
    for job in jobs:
        if job.error is not None:
            if job.server_error:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(job.error)))
            else:
                responses.append(input_error_response(pb_utils, job.error))
            continue
        finals, counts, per_chunk = [], [], None
        for chunks in job.chunks_per_file:
            chunk_vectors = vectors[offset : offset + len(chunks)]
            offset += len(chunks)
            finals.append(aggregate(chunk_vectors))
            counts.append([len(chunks)])
            per_chunk = chunk_vectors
        outputs = [
            pb_utils.Tensor("FINAL_EMBEDDING", np.asarray(finals, dtype=dtypes["FINAL_EMBEDDING"])),
            pb_utils.Tensor("CHUNK_COUNT", np.asarray(counts, dtype=dtypes["CHUNK_COUNT"])),
        ]
        if job.options.aggregation == "none":
            outputs.append(
                pb_utils.Tensor("CHUNK_EMBEDDINGS", np.asarray(per_chunk, dtype=dtypes["CHUNK_EMBEDDINGS"])[None])
            )
        responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
    return responses


def limits_from_config(config: dict) -> DocumentLimits:
    """DocumentLimits from the model config's parameters (defaults where absent)."""
    parameters = config.get("parameters", {})

    def value(key: str, default: int) -> int:
        raw = parameters.get(key, {}).get("string_value")
        return int(raw) if raw not in (None, "") else default

    defaults = DocumentLimits()
    return DocumentLimits(
        max_file_bytes=value("max_file_bytes", defaults.max_file_bytes),
        max_pdf_pages=value("max_pdf_pages", defaults.max_pdf_pages),
        max_chunks=value("max_chunks", defaults.max_chunks),
        max_request_bytes=value("max_request_bytes", defaults.max_request_bytes),
        max_files=value("max_files", defaults.max_files),
        max_pdf_inflated_bytes=value("max_pdf_inflated_bytes", defaults.max_pdf_inflated_bytes),
    )
