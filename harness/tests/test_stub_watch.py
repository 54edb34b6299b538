"""The gate's stub watch round, on process listings given to it: which deaths it sees."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from harness.repository import ModelConfig, config_from_json
from triton_gate.stub_watch import StubWatch, expected_stubs

PYTHON = config_from_json({"backend": "python", "instance_group": [{"kind": "KIND_CPU", "count": 2}]})
PYTHON_BASED = config_from_json(
    {"backend": "onnxruntime", "runtime": "model.py", "instance_group": [{"kind": "KIND_CPU", "count": 1}]}
)
NATIVE = config_from_json(
    {"backend": "onnxruntime", "runtime": "libtriton_onnxruntime.so", "instance_group": [{"count": 1}]}
)
ENSEMBLE = config_from_json({"platform": "ensemble"})


class Round(StubWatch):
    """A stub watch over a fixed listing: READY models, their configs, the stubs seen now."""

    def __init__(self, configs: dict, stubs: dict[str, set[int]]):
        self.configs, self.listing = configs, stubs
        self.broken, self.reloading, self.changing, self.events = {}, set(), {}, []
        self.cfg = SimpleNamespace(auto_reload=False)

    async def ready_models(self, strict: bool = False) -> set[str]:
        return set(self.configs)

    async def model_config(self, model: str) -> ModelConfig | None:
        return self.configs[model]

    def stubs(self) -> dict[str, set[int]]:
        return self.listing

    def event(self, kind: str, **fields) -> None:
        self.events.append((kind, fields["model"]))


def test_stubs_expected_only_for_python_models_and_python_based_backends():
    assert expected_stubs(PYTHON) == 2 and expected_stubs(PYTHON_BASED) == 1
    assert expected_stubs(NATIVE) == 0 and expected_stubs(ENSEMBLE) == 0


def test_a_model_whose_every_stub_died_before_the_first_round_is_broken():
    watch = Round({"pre": PYTHON, "net": PYTHON_BASED, "ens": ENSEMBLE, "native": NATIVE}, {"net": {11}})
    asyncio.run(watch.watch_stubs({}))
    assert set(watch.broken) == {"pre"}, "pre's two stubs are gone although it was never tracked"


def test_a_tracked_stub_that_is_gone_is_a_death_and_a_full_listing_is_not():
    configs = {"pre": PYTHON, "net": PYTHON_BASED}
    healthy = Round(configs, {"pre": {1, 2}, "net": {3}})
    known = asyncio.run(healthy.watch_stubs({}))
    assert healthy.broken == {} and known == {"pre": {1, 2}, "net": {3}}
    one_dead = Round(configs, {"pre": {2}, "net": {3}})
    asyncio.run(one_dead.watch_stubs(known))
    assert list(one_dead.broken) == ["pre"] and one_dead.events == [("stub_died", "pre")]
