"""Checks of a network's options (``model.network`` of a config) before the network is built.

The options reach ``build_network`` as a plain dict (any YAML value), so a string width or a
zero head count would otherwise fail deep inside a layer's constructor (TypeError,
ZeroDivisionError, "negative dimension"). Each option is checked against the type annotation of
the network's constructor and the sizes against their ranges, and refused with one line naming
the option.
"""

import inspect
import math
import types
import typing
import warnings

from s2forecast.user_errors import UserError

AT_LEAST_ONE = ("embed_dim", "num_layers", "num_heads", "scale_factor", "patch_size")
POSITIVE = ("mlp_ratio", "theta", "encoder_cutoff", "decoder_cutoff")
NON_NEGATIVE = ("window", "noise_channels")


def check_network_options(architecture: str, cls: type, options: dict) -> None:
    """Raise a UserError naming the first of ``options`` of ``cls`` that has the wrong type or range."""
    hints = typing.get_type_hints(cls.__init__)
    for name, value in options.items():
        if name in hints and not matches(value, hints[name]):
            raise UserError(
                f"network option {name} of the {architecture!r} network must be {describe(hints[name])}, got {value!r}"
            )
    values = {p.name: p.default for p in inspect.signature(cls).parameters.values()} | options
    for name in AT_LEAST_ONE:
        if name in values and values[name] < 1:
            raise UserError(f"network option {name} must be >= 1, got {values[name]}")
    for name in POSITIVE:
        if values.get(name) is not None and not 0 < values[name] < math.inf:  # inf: an OverflowError in int()
            raise UserError(f"network option {name} must be a finite number > 0, got {values[name]}")
    for name in ("encoder_cutoff", "decoder_cutoff"):  # radii in radians, as theta: a filter past pi is global
        if values.get(name) is not None and values[name] > math.pi:
            raise UserError(f"network option {name} is a radius in radians in (0, pi], got {values[name]}")
    for name in NON_NEGATIVE:
        if name in values and values[name] < 0:
            raise UserError(f"network option {name} must be >= 0, got {values[name]}")
    if values.get("global_every") is not None and values["global_every"] < 1:
        raise UserError(f"network option global_every must be >= 1 or null, got {values['global_every']}")
    check_nested_options(values)
    if "mlp_ratio" in values and int(values["embed_dim"] * values["mlp_ratio"]) < 1:  # an MLP of no hidden channel
        raise UserError(
            f"network options embed_dim {values['embed_dim']} x mlp_ratio {values['mlp_ratio']} leave the MLP no "
            f"hidden channel; raise mlp_ratio to at least {1 / values['embed_dim']:g}"
        )
    shape = values.get("encoder_kernel_shape")
    if isinstance(shape, list | tuple) and not all(isinstance(n, int) and n >= 1 for n in shape):
        raise UserError(f"network option encoder_kernel_shape entries must be integers >= 1, got {list(shape)}")
    if values["embed_dim"] % values["num_heads"]:
        raise UserError(
            f"network option embed_dim={values['embed_dim']} is not divisible by num_heads={values['num_heads']}: "
            "each head takes an equal share of the width"
        )


def warn_inert_options(architecture: str, cls: type, options: dict) -> None:
    """Warn about each option of a training config for the network ``cls`` that its other settings leave
    unused (a config that sets it believes it changed something). Training only: a checkpoint's options
    are not the reader's."""
    defaults = {p.name: p.default for p in inspect.signature(cls).parameters.values()}
    # an option at its default changes nothing either way: a variant inherits its base's noise
    # spectrum (the FGN overlay's vector noise under the CRPS config's noise_alpha 2.0, noise_tau 3.0)
    changed = {name: value for name, value in options.items() if name not in defaults or value != defaults[name]}
    for name, why in inert_options(architecture, defaults | options, changed):
        warnings.warn(f"network option {name} has no effect: {why}; drop it", UserWarning, stacklevel=2)


def inert_options(architecture: str, values: dict, given: dict) -> list[tuple[str, str]]:
    """The options of ``given`` that the settings of ``values`` (given options over the defaults)
    leave unused, each with why."""
    from s2forecast.models.spherical_transformer import attention_pattern

    attention = values.get("attention")
    if architecture == "spherical":  # the layers' kinds as the network builds them
        pattern = attention_pattern(attention, values["num_layers"], values.get("global_every"))
        kinds = set(pattern)
        every_unused = isinstance(attention, list) or pattern == [attention] * values["num_layers"]
    else:
        kinds, every_unused = {attention}, False
    stochastic = values.get("noise_channels", 0) > 0
    rules = {
        "spherical": {
            "global_every": (every_unused, "it makes no layer global here (a per-layer list, or as many layers)"),
            "theta": ("neighborhood" not in kinds, "no layer has neighborhood attention"),
            "backend": ("neighborhood" not in kinds, "no layer has neighborhood attention"),
            "ball_options": ("ball" not in kinds, "no layer has ball attention"),
            "noise_kind": (not stochastic, "noise_channels is 0"),
            "noise_injection": (not stochastic, "noise_channels is 0"),
            "noise_correlation": (not stochastic, "noise_channels is 0"),
            "noise_alpha": (not stochastic or values.get("noise_kind") == "vector", "only field noise has a spectrum"),
            "noise_tau": (not stochastic or values.get("noise_kind") == "vector", "only field noise has a spectrum"),
        },
        "planar": {"window": (attention == "global", "attention is global")},
    }.get(architecture, {})
    inert = [(name, why) for name, (unused, why) in rules.items() if name in given and unused]
    return inert + inert_sprepe_options(values.get("position_embedding"), given.get("position_embedding_options"))


def inert_sprepe_options(embedding: str | None, options) -> list[tuple[str, str]]:
    """SpRePE's mask options that its ``mask`` leaves unused: ``ratio`` is the fixed mask's,
    ``ratio_min``/``ratio_max`` the adaptive one's."""
    if embedding != "sprepe" or not isinstance(options, dict):
        return []
    from s2forecast.nn import SpRePE

    mask = options.get("mask", inspect.signature(SpRePE).parameters["mask"].default)
    owners = {"ratio": "fixed", "ratio_min": "adaptive", "ratio_max": "adaptive"}
    return [(f"position_embedding_options.{name}", f"it is the {owner} mask's and mask is {mask!r}")
            for name, owner in owners.items() if name in options and mask != owner]  # fmt: skip


# arguments the network itself gives the layers: not settable through ``*_options``
SET_BY_THE_NETWORK = {"in_channels", "out_channels", "num_heads", "head_dim", "grid", "grid_kv", "use_qknorm",
                      "position_embedding", "seed"}  # fmt: skip


def nested_targets(values: dict) -> dict[str, type]:
    """The layer whose keyword arguments each ``*_options`` mapping of ``values`` holds."""
    from s2forecast.nn import S2BallSparseAttention, SpRePE
    from s2forecast.nn.position_embedding import AxialRotaryEmbedding, GeodesicALiBi

    targets = {"ball_options": S2BallSparseAttention}
    embedding = {"sprepe": SpRePE, "rope": AxialRotaryEmbedding, "alibi": GeodesicALiBi}.get(
        values.get("position_embedding")
    )
    if embedding is not None:
        targets["position_embedding_options"] = embedding
    return targets


def check_nested_options(values: dict) -> None:
    """Each key of ``ball_options`` / ``position_embedding_options`` is an option of its layer,
    of the type the layer's constructor declares (a command-line ``--model.network.ball_options.top_k``
    can carry any name or value)."""
    for key, layer in nested_targets(values).items():
        nested = values.get(key)
        if not isinstance(nested, dict):
            continue  # null, or a wrong type already refused
        parameters = inspect.signature(layer).parameters
        allowed = sorted(name for name in parameters if name not in SET_BY_THE_NETWORK)
        hints = typing.get_type_hints(layer.__init__)
        for name, value in nested.items():
            if name not in allowed:
                raise UserError(f"network option {key}.{name} is not an option of {layer.__name__}; it takes {allowed}")
            if name in hints and not matches(value, hints[name]):
                raise UserError(f"network option {key}.{name} must be {describe(hints[name])}, got {value!r}")


def matches(value, annotation) -> bool:
    """Whether ``value`` (as YAML gives it: lists for tuples) is of the type ``annotation``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, arg) for arg in args)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if annotation is dict or origin is dict:
        return isinstance(value, dict)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(matches, value, args))
        return all(matches(item, args[0]) for item in value) if args else True
    return True


def describe(annotation) -> str:
    """``annotation`` in words: "an integer", "a string or a list of str", ..."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(arg) for arg in args)
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null"}
    if annotation in words:
        return words[annotation]
    if annotation is dict or origin is dict:
        return "a mapping"
    plural = {int: "integers", float: "numbers", str: "strings"}
    if origin is tuple and args and args[-1] is not Ellipsis and len(set(args)) == 1 and args[0] in plural:
        return f"a list of {len(args)} {plural[args[0]]}"
    if origin in (list, tuple) and args and args[0] in plural:
        return f"a list of {plural[args[0]]}"
    if origin in (list, tuple):
        return "a list"
    return str(annotation)
