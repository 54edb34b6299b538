"""The request loop the harness's Python-based backends share (copied beside each ``model.py``).

Requests whose non-batch input shapes agree run as one engine run (concatenated on axis 0, split
back by rows); a failed batched run runs again one request at a time, so a bad request fails alone.
``row_chunks`` bounds one run to a token budget (rows x the longest non-batch dim).
"""

from collections import defaultdict

import numpy as np
import triton_python_backend_utils as pb_utils


class RunError(str):
    """A request's error message, and whether its input caused it (INVALID_ARG, HTTP 400)."""

    input_fault = False


class Refused(Exception):
    """A run that cannot start; ``args[0]`` is the ``RunError`` of its requests."""


def run_error(backend, exc, faults=(), input_fault=None):
    """The ``RunError`` of ``exc`` (an exception or a message); an input fault when it names one of ``faults``."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    error = RunError(f"{backend} backend: {text}")
    error.input_fault = any(fault in text for fault in faults) if input_fault is None else input_fault
    return error


def rows(tensors):
    return len(next(iter(tensors.values()), ()))


def plan_runs(arrays, batching):
    """Which requests share one run: with batching, those whose non-batch input shapes agree (in
    arrival order); without batching, every request runs alone."""
    if not batching:
        return [[index] for index in range(len(arrays))]
    groups = defaultdict(list)
    for index, tensors in enumerate(arrays):
        groups[tuple((n, a.shape[1:]) for n, a in sorted(tensors.items()))].append(index)
    return list(groups.values())


def row_chunks(run, max_tokens):
    """``run`` on a feed's rows in chunks of at most ``max_tokens`` (rows x the longest non-batch dim;
    at least one row a chunk), outputs joined on axis 0."""

    def run_in_chunks(names, feed):
        width = max((a.shape[1] for a in feed.values() if a.ndim > 1), default=1)
        step = max(1, max_tokens // max(width, 1))
        if rows(feed) <= step:
            return run(names, feed)
        starts = range(0, rows(feed), step)
        parts = [run(names, {n: a[start : start + step] for n, a in feed.items()}) for start in starts]
        return [np.concatenate(outputs) for outputs in zip(*parts)]

    return run_in_chunks


def run_requests(run, arrays, requested, batching, error, fit=None):
    """Per request, ``{output name: array}`` of its own rows, or a ``RunError``.

    ``run(names, feed)`` returns the named outputs of one run; ``arrays``: each request's inputs;
    ``requested``: the outputs each asked for; ``error(exc)``: the ``RunError`` of a failed run;
    ``fit(feed, rows)``: the feed a batched run needs, or ``Refused``."""
    results = [None] * len(arrays)
    groups = plan_runs(arrays, batching)
    while groups:
        indices = groups.pop(0)
        names = sorted(set().union(*(requested[i] for i in indices)))
        sizes = [rows(arrays[i]) for i in indices]
        feed = arrays[indices[0]]
        if len(indices) > 1:
            feed = {n: np.concatenate([arrays[i][n] for i in indices]) for n in feed}
        try:
            outputs = dict(zip(names, run(names, fit(feed, sum(sizes)) if fit else feed)))
        except Exception as exc:  # noqa: BLE001 - report per request, keep serving
            if len(indices) > 1:
                groups[:0] = [[i] for i in indices]
            else:
                results[indices[0]] = exc.args[0] if isinstance(exc, Refused) else error(exc)
            continue
        offset = 0
        for i, size in zip(indices, sizes):
            part = slice(offset, offset + size) if batching else slice(None)
            results[i] = {name: outputs[name][part] for name in requested[i]}
            offset += size
    return results


def response(result, dtypes):
    """The ``InferenceResponse`` of one request's result (its outputs, or its ``RunError``)."""
    if isinstance(result, str):
        code = (pb_utils.TritonError.INVALID_ARG,) if result.input_fault else ()
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(result, *code))
    tensors = [pb_utils.Tensor(n, np.ascontiguousarray(v, dtype=dtypes[n])) for n, v in result.items()]
    return pb_utils.InferenceResponse(output_tensors=tensors)


class BatchedModel:
    """``execute`` of a backend whose ``initialize`` sets ``input_names`` and ``output_dtypes`` and whose
    ``answer(arrays, requested)`` runs the requests."""

    def execute(self, requests):
        """Run the requests (a batched group as one run) and answer each with its own rows."""
        arrays = []
        for request in requests:
            tensors = {n: pb_utils.get_input_tensor_by_name(request, n) for n in self.input_names}
            arrays.append({n: t.as_numpy() for n, t in tensors.items() if t is not None})
        requested = [
            [n for n in request.requested_output_names() if n in self.output_dtypes] or list(self.output_dtypes)
            for request in requests
        ]
        return [response(result, self.output_dtypes) for result in self.answer(arrays, requested)]
