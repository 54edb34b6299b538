"""embedding_cpu's own package: what several of its Python models share (imported by model.py,
checks.py, client.py, export.py and make_fixtures.py).

- ``text_embedding``: the model folder, fast tokenization, mean pooling, normalisation
  (tokenize, pool_embedding, embedding_py, embedding_onnx_text, pipeline_orchestrator);
- ``text_batches``: a dynamic batch's texts validated, embedded together, answered per request
  (embedding_py, embedding_onnx_text, tokenize);
- ``bls``: length-bucketed runs of the ONNX transformer, through BLS or in-process
  (embedding_onnx_text, pipeline_orchestrator);
- ``documents``, ``document_requests``: file bytes -> text -> chunks, and the responses of the
  document pipelines (full_pipeline_py, pipeline_orchestrator).

Named after the deployment so that a copy under another name installs beside it without a clash.
"""
