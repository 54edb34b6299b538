"""resnet_npu's own package: the classification math its models share (both preprocess models
run ``ImageTransform``; the postprocess model ``top_k``), with checks.py, export.py and agreement.py.

Named after the deployment so that a copy under another name installs beside it without a clash.
"""
