"""The model of ``--ckpt_path``: the config's, checked against the checkpoint's, or the checkpoint's.

Lightning's CLI used to replace the config's model hyper-parameters with the checkpoint's
without a word (validating "the CRPS config" with an MSE checkpoint scored the MSE model), or,
for ``--ckpt_path last``, kept the config's and failed on the first weight of another shape
with a long traceback. Now the model is one of:

- the config's (the default): it must be the checkpoint's model. ``differences`` lists every
  hyper-parameter that differs (network options resolved against the network's defaults, the
  data layout and normalization statistics linked from the DataModule, and, for ``fit``, the
  optimization and rollout schedule that the restored optimizer and scheduler carry on), and
  the run is refused naming them with both values;
- the checkpoint's, with ``--model_from_ckpt true``: the config's ``model`` section is replaced
  by the checkpoint's hyper-parameters. The data must still match the checkpoint's.
"""

import inspect
import math

from s2forecast.models import ARCHITECTURES

# what the model computes and its loss scores: checked for every subcommand
MODEL_KEYS = ("architecture", "network", "residual", "variable_weights", "level_weighting", "members", "loss",
              "crps_mse_weight", "crps_alpha", "crps_spectral_weight")  # fmt: skip
# what a resumed fit continues with (the checkpoint's optimizer and scheduler states embody them)
FIT_KEYS = ("lr", "weight_decay", "warmup_steps", "min_lr_ratio", "rollout_start", "rollout_every_epochs",
            "rollout_max")  # fmt: skip
# the data layout and normalization the weights were trained for
DATA_KEYS = ("channels", "static_channels", "forcing_channels", "grid", "history", "step_hours", "mean", "std",
             "tendency_std", "static_mean", "static_std")  # fmt: skip
# ForecastModule's other arguments, not compared: the data's layout and statistics are compared
# key by key (DATA_KEYS), and the weights a fine-tuned run started from are the checkpoint's
NOT_COMPARED = ("data", "init_from")
SHOWN = 3  # differences named in full; the rest are counted


def differences(ours: dict, theirs: dict, subcommand: str) -> list[str]:
    """``key: ours vs theirs`` for every model hyper-parameter in which ``ours`` (this run's
    ForecastModule hparams) differs from ``theirs`` (the checkpoint's). Keys a checkpoint lacks
    (an older version's) are not compared."""
    found = []
    keys = MODEL_KEYS + (FIT_KEYS if subcommand == "fit" else ())
    for key in keys:
        if key not in theirs:
            continue
        if key == "network":  # of another architecture every option differs: the architecture says it
            if ours.get("architecture") == theirs.get("architecture"):
                found += _compare("model.network", _network(ours), _network(theirs))
        else:
            found += _compare(f"model.{key}", ours.get(key), theirs[key])
    data, their_data = ours.get("data") or {}, theirs.get("data") or {}
    for key in DATA_KEYS:
        if key in their_data and key in data:
            found += _compare(f"model.data.{key}", data[key], their_data[key])
            if key == "channels" and found and found[-1].startswith("model.data.channels"):
                break  # the statistics of other channels differ too
    return found


def describe(found: list[str]) -> str:
    """The differences for a message, the first ``SHOWN`` and how many more, and the fix."""
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    if all(line.startswith("model.data.") for line in found):
        fix = "run it on data like the checkpoint's (its channels, grid, time step and its store's statistics)"
    else:
        fix = "give the config the checkpoint was trained with, or --model_from_ckpt true to take its model"
    return "; ".join(found[:SHOWN]) + more + "; " + fix


def _network(hparams: dict) -> dict:
    """The network options with the architecture's defaults filled in (``embed_dim: 128`` given
    or left to the default is the same network)."""
    cls = ARCHITECTURES.get(hparams.get("architecture", "spherical"))
    defaults = {}
    if cls is not None:
        skip = ("grid", "in_channels", "out_channels")
        defaults = {p.name: p.default for p in inspect.signature(cls).parameters.values() if p.name not in skip}
    return defaults | (hparams.get("network") or {})


def _compare(key: str, ours, theirs) -> list[str]:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        names = {**ours, **theirs}
        return [line for name in names for line in _compare(f"{key}.{name}", ours.get(name), theirs.get(name))]
    if _same(ours, theirs):
        return []
    if _numbers(ours) and _numbers(theirs) and len(ours) == len(theirs):
        index = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if not _same(a, b))
        return [f"{key}[{index}] {ours[index]!r} in this run, {theirs[index]!r} in the checkpoint"]
    return [f"{key} {_short(ours)} in this run, {_short(theirs)} in the checkpoint"]


def _same(a, b) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    if _number(a) and _number(b):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0) or (math.isnan(a) and math.isnan(b))
    return a == b


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(value) -> bool:
    return isinstance(value, list | tuple) and all(map(_number, value))


def _short(value) -> str:
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= 60 else text[:57] + "..."
