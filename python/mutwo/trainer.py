# The Hugging Face Trainer under mutwo's plan (docs/python.md, "The Hugging
# Face Trainer"):
#
#   import mutwo.trainer
#   args = TrainingArguments(..., torch_compile=True, torch_compile_backend="mutwo")
#   trainer = Trainer(..., callbacks=[mutwo.trainer.MutwoCallback(budget="6GiB")])  # or MUTWO_BUDGET=6GiB
#
# The Trainer compiles through accelerate, whose TorchDynamoPlugin takes only
# the backend names of its own enum (DynamoBackend): importing this module adds
# "mutwo" to it, else Trainer(...) raises "'MUTWO' is not a valid
# DynamoBackend". The compile itself is torch.compile(model, backend="mutwo"),
# with no options: the budget comes from MutwoCallback, else MUTWO_BUDGET, else
# the named backend's default (mutwo._named).
from __future__ import annotations

from typing import Any, Optional

from transformers import TrainerCallback

from mutwo import _named, _registry

__all__ = ["MutwoCallback"]


def _accept_in_accelerate() -> None:
    """Adds MUTWO to accelerate's DynamoBackend (an Enum: members cannot be
    added by its API, so the member is made as Enum makes them)."""
    try:
        from accelerate.utils.dataclasses import DynamoBackend
    except ImportError:  # the Trainer needs accelerate; without it there is nothing to patch
        return
    if "MUTWO" in DynamoBackend._value2member_map_:
        return
    member = str.__new__(DynamoBackend, "MUTWO")
    member._name_ = member._value_ = "MUTWO"
    member.__objclass__ = DynamoBackend
    DynamoBackend._member_map_["MUTWO"] = member
    DynamoBackend._value2member_map_["MUTWO"] = member
    DynamoBackend._member_names_.append("MUTWO")


_accept_in_accelerate()
_registry.register()  # in a source tree, where no entry point names it


class MutwoCallback(TrainerCallback):
    """The budget, planner and compiler of the Trainer's torch_compile_backend="mutwo",
    set for its training run (train()'s start to end): they apply to the
    graphs compiled then, and take precedence over MUTWO_BUDGET and
    MUTWO_PLANNER. `report` holds mutwo.torch.report() at the run's end."""

    def __init__(self, budget: Optional[str] = None, planner: Optional[str] = None,
                 compiler: Optional[str] = None) -> None:
        self.options = _named.check({"budget": budget, "planner": planner, "compiler": compiler}, "MutwoCallback",
                                    compiler)
        self.report: Optional[dict] = None
        self._before: dict = {}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._before = dict(_named.defaults)
        _named.defaults.update(self.options)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import mutwo.torch
        _named.defaults.clear()
        _named.defaults.update(self._before)
        try:
            self.report = mutwo.torch.report()
        except mutwo.torch.MutwoError:  # nothing compiled with backend="mutwo", or bad options
            self.report = None
