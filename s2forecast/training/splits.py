"""Train, validation and test splits that share data: refused unless allowed.

A sample shared by training and validation (or test) makes the scores measure memory, not
skill, and nothing in the scores shows it. ``check_overlap`` compares every pair of splits of a
DataModule: trajectory ranges ``[first, stop)`` (SWE) overlap when they share an index; time
periods ``[start, end]`` (inclusive, as ``FieldDataset`` reads them) when they share an instant,
so a validation period that starts where training ends is refused too (their common time is a
training target and a validation input). ``allow_overlap`` turns the refusal into a warning.

Validation and test sharing data is a warning, not an error: no trained-on data reaches either
score, but the test score of the checkpoint chosen on validation is then optimistic (tiny
stores with three trajectories, as the tests use, have no room for three disjoint splits).
"""

import itertools
import warnings

from s2forecast.times import format_time, parse_end, parse_time
from s2forecast.user_errors import UserError


def check_overlap(splits: dict[str, dict], allow: bool = False) -> None:
    """Raise a UserError (or warn, with ``allow``) for training data shared with another split;
    warn for validation and test data shared.

    Args:
        splits: {"train" | "val" | "test": {"trajectories": (first, stop)} or {"start": ..., "end": ...}}.
        allow: warn instead of raising.
    """
    for (a, first), (b, second) in itertools.combinations(splits.items(), 2):
        shared = _shared(first, second, option(a, first), option(b, second))
        if shared is None:
            continue
        what = f"{option(a, first)} {_shown(first)} and {option(b, second)} {_shown(second)} share {shared}"
        if "train" not in (a, b):
            warnings.warn(f"{what}: the {b} scores are of data the best checkpoint was chosen on", stacklevel=3)
        elif not allow:
            raise UserError(
                f"{what}: the {b} scores would include data the model trained on; make the ranges disjoint, "
                "or set data.init_args.allow_overlap: true to use them anyway"
            )
        else:
            warnings.warn(f"{what}; allowed by allow_overlap: the {b} scores include data of {a}", stacklevel=3)


def option(split: str, options: dict) -> str:
    """How the DataModules name a split's option: train_trajectories, val_period, ..."""
    return f"{split}_trajectories" if "trajectories" in options else f"{split}_period"


def _shared(first: dict, second: dict, name_a: str, name_b: str) -> str | None:
    """What ``first`` and ``second`` share, in words; None when nothing."""
    if "trajectories" in first and "trajectories" in second:
        lo = max(first["trajectories"][0], second["trajectories"][0])
        hi = min(first["trajectories"][1], second["trajectories"][1])
        if lo >= hi:
            return None
        return f"trajectory {lo}" if hi - lo == 1 else f"trajectories {lo} to {hi - 1}"
    bounds = [(split, name) for split, name in ((first, name_a), (second, name_b))]
    starts = [parse_time(split["start"], f"{name} start") for split, name in bounds if split.get("start") is not None]
    # an end written as a date is all of that day (times.parse_end); shown as written
    ends = [
        (parse_end(split["end"], f"{name} end"), split["end"]) for split, name in bounds if split.get("end") is not None
    ]
    lo, (hi, shown) = (max(starts) if starts else None), (min(ends) if ends else (None, "the end"))
    if lo is not None and hi is not None and lo > hi:
        return None
    if not isinstance(shown, str):
        shown = format_time(shown)
    elif hi is not None and hi != parse_time(shown):  # a date for all of it ("T18 to 2020-01-03" read backwards)
        shown = f"the end of {shown}"
    return f"{format_time(lo) if lo is not None else 'the start'} to {shown}"


def _shown(split: dict) -> str:
    if "trajectories" in split:
        return str(list(split["trajectories"]))
    return f"[{split.get('start')}, {split.get('end')}]"
