"""Benchmark workloads of cn_clip beside those of checks.py: the image tower alone.

``image_encoder`` is a step of the ``image_embedding`` ensemble that the front gate hides from
clients; measured alone (the "model-only" path: the client sends the tensor it made itself),
it is the denominator of the ensemble's cost (docs/tuning.md). The request carries the
harness's admin header, as the gate requires for internal models.
"""

from __future__ import annotations

from harness.deployments import load_module


def workload_image_encoder_tensor(ctx):
    """image_encoder alone: scene.jpg made into the [1,3,224,224] tensor client-side, sent as FP32."""
    from harness.measuring.loadgen import Workload

    transform = ctx.deployment.model_repository / "preprocess_image" / "1" / "cn_clip_transform.py"
    preprocess_image = load_module(transform, f"{ctx.deployment.name}_cn_clip_transform").preprocess_image
    data = (ctx.deployment.fixtures_path / "images" / "scene.jpg").read_bytes()
    return Workload(
        model="image_encoder",
        inputs={"PIXEL_VALUES": preprocess_image(data)[None]},
        outputs=["EMBEDDING"],
        variant="image_encoder tensor b1",
        headers=getattr(ctx.server, "admin_headers", None),
    )
