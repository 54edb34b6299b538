"""yolo11_ensemble's own package: the letterbox geometry (preprocess pads with it, postprocess
undoes it) and the YOLO head decoding, shared by its two Python models, client.py and checks.py.

Named after the deployment so that a copy under another name installs beside it without a clash.
"""
