"""The model zoo, and how a user's own model plugs into the recorder.

A ``Training`` is what one DDP rank trains: a model, a batch function and a loss
(the simulator's ``ddpsim.sim.Workload`` is another thing: timings, not tensors).

    factory() -> Training | (model, batch, loss)

    model: torch.nn.Module
    batch(iteration, rank, world_size, batch_size) -> (inputs, target)
        Deterministic: the same arguments give the same tensors on every call, so
        rank r's batch in a 2-rank run can be rebuilt in one process to check DDP
        against single-process training on the concatenated batch. ``inputs`` is a
        tensor or a tuple of tensors (passed as ``model(*inputs)``).
    loss(output, target) -> scalar tensor

The recorder calls ``torch.manual_seed(seed)`` just before ``factory()``, so the
model's initial weights follow ``--seed``.

``--model`` takes a zoo name (``mlp``, ``convnet``, ``transformer``, ``branchy``,
``shuffled``), ``path/to/file.py:factory`` or ``package.module:factory``.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Callable

from ddpsim.models.contract import Training

Workload = Training  # its name before ddpsim.sim.Workload took it: factories written against it still work


ZOO_NAMES = ("mlp", "convnet", "transformer", "branchy", "shuffled")  # zoo() keys, known without torch


class ModelSpecError(ValueError):
    """--model names no zoo model and no loadable factory."""


def zoo() -> dict[str, Callable[[], Training]]:
    """Zoo model name -> factory."""
    from ddpsim.models import zoo_models

    return dict(zoo_models.ZOO)


def check_spec(spec: str) -> None:
    """Fail fast (before any process starts) if ``spec`` cannot name a model."""
    resolve_factory(spec)


def resolve_factory(spec: str) -> Callable[[], Training]:
    """Turn a --model value into a factory function, or raise ModelSpecError."""
    models = zoo()
    if spec in models:
        return models[spec]
    if ":" not in spec:
        raise ModelSpecError(
            f"unknown model {spec!r}: choose one of {', '.join(sorted(models))}, "
            "or give path/to/file.py:factory or package.module:factory")
    where, _, attr = spec.rpartition(":")
    if not attr:
        raise ModelSpecError(f"model {spec!r} names no function after ':': give {where}:factory")
    return load_callable(where, attr)


def load_callable(where: str, attr: str, noun: str = "model") -> Callable:
    """The function ``attr`` of the file ``where`` (``path/to/file.py``) or of the module ``where``
    (``package.module``), or ModelSpecError in one line. ``noun`` names what it is for."""
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ModelSpecError(f"{noun} file {where} does not exist")
        # one name per file (a/model.py and b/model.py apart), the same in every rank that loads it
        name = f"ddpsim_user_{path.stem}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
        mod_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module  # as an import does: dataclasses and pickle look their module up there
        try:
            mod_spec.loader.exec_module(module)
        except Exception as e:  # the user's file: report, don't trace back
            del sys.modules[name]
            raise ModelSpecError(f"could not load {where}: {type(e).__name__}: {e}") from None
    else:
        try:
            module = _import_here_too(where)
        except Exception as e:
            raise ModelSpecError(f"could not import {where}: {type(e).__name__}: {e}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ModelSpecError(f"{where} has no function {attr!r}")
    return factory


def _import_here_too(name: str):
    """``import name``; where no module of that name is found, look in the current folder too, as
    ``python -m ddpsim`` does (the installed ``ddpsim`` command puts its own bin folder first on
    ``sys.path`` instead). Appended, so that a file there never shadows an installed package."""
    import os

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        here = os.getcwd()
        if e.name != name.split(".")[0] or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        return importlib.import_module(name)


def build_workload(spec: str) -> Training:
    """Call the factory for ``spec`` and normalise what it returns."""
    made = resolve_factory(spec)()
    if isinstance(made, Training):
        return made
    if isinstance(made, tuple) and len(made) == 3:
        model, batch, loss = made
        import torch

        wrong = [f"{what} is a {type(x).__name__}, not {want}" for what, x, want, ok in (
            ("model", model, "a torch.nn.Module", isinstance(model, torch.nn.Module)),
            ("batch", batch, "a function (iteration, rank, world_size, batch_size) -> (inputs, target)", callable(batch)),
            ("loss", loss, "a function (output, target) -> loss", callable(loss))) if not ok]
        if not wrong:
            return Training(model, batch, loss)
        raise ModelSpecError(f"factory for {spec!r} returned (model, batch, loss) but its {wrong[0]}")
    raise ModelSpecError(
        f"factory for {spec!r} must return (model, batch, loss) or a Training, "
        f"not {type(made).__name__}")


def call_batch(workload: Training, iteration: int, rank: int, world_size: int,
               batch_size: int | None):
    """One rank's batch; inputs always come back as a tuple."""
    inputs, target = workload.batch(iteration, rank, world_size,
                                    batch_size or workload.default_batch_size)
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    return inputs, target


__all__ = ["Training", "Workload", "ZOO_NAMES", "ModelSpecError", "zoo", "check_spec", "resolve_factory",
           "build_workload", "call_batch"]
