"""Refusing configurations that would run code other than constructors.

jsonargparse resolves a value of a ``Callable`` parameter from an import path: a YAML
``LambdaCallback`` with ``on_fit_start: os.system`` parses into the function ``os.system``,
which Lightning then calls. A configuration (perhaps a file from someone else) may build
classes, but must never name a function to call: after parsing (and after ``--ckpt_path``'s
hyper-parameters are merged in), before anything is instantiated, ``refuse_code`` walks the
whole configuration and refuses any callable value (function, builtin, method, class object,
partial) and any ``class_path`` from Python's standard library (``os``, ``subprocess``,
``builtins``, ...: nothing a run is configured with lives there).
"""

import sys

from jsonargparse import Namespace, set_parsing_settings
from jsonargparse.typing import Path as ConfigPath

from s2forecast.user_errors import UserError

STDLIB = frozenset(sys.stdlib_module_names) | {"builtins", "__main__"}
STANDARD_LIBRARY = (
    "is from Python's standard library, and a configuration may only name classes of s2forecast, Lightning, torch "
    "or your own modules"
)
MAIN_MODULE = (
    "goes through a __main__ module, whose import runs a program; a configuration may only name classes of "
    "s2forecast, Lightning, torch or your own modules"
)


def safe_parsing() -> None:
    """jsonargparse's settings for configurations that may come from someone else, before any parse:
    a module of Python's standard library is never imported from a class_path (``refuse_code`` runs
    after the parse, when the import has run its code: ``this.X`` printed the Zen of Python), and a
    class_path given as the value of an ``Any`` or ``dict[str, Any]`` parameter (a profiler's
    ``table_kwargs``) stays a plain value instead of being built (it built a torch class that runs a
    command: a review found both)."""
    set_parsing_settings(instantiate_subclass_spec_in_any=False, import_path_denylist=sorted(STDLIB))
    _deny_main_modules()


def _deny_main_modules() -> None:
    """Refuse, before its import, an import path through a ``__main__`` module (``PIL.__main__.X``,
    ``cpuinfo.__main__.X``): importing one runs its program (a review: a package's own command took over
    `fit`, another printed 190 lines). jsonargparse's list names prefixes only, so its check is wrapped."""
    from jsonargparse import _common, _typehints, _util

    original = _common.check_import_path
    if getattr(original, "denies_main_modules", False):
        return

    def check_import_path(path: str) -> None:
        if "__main__" in path.split("."):
            raise _common.ImportDenied(
                f"Importing '{path}' is not allowed, denied by the '__main__' entry of the import path denylist."
            )
        original(path)

    check_import_path.denies_main_modules = True
    for module in (_common, _typehints, _util):
        if getattr(module, "check_import_path", None) is original:
            module.check_import_path = check_import_path


def refuse_code(config: Namespace) -> None:
    """Raise a UserError naming the first key of ``config`` whose value is a callable or a
    standard-library class_path (the subcommand's prefix, ``fit.``, left out)."""
    for key, value in _values(config, ""):
        key = key.partition(".")[2] if key.split(".")[0] in ("fit", "validate", "test", "predict") else key
        if isinstance(value, ConfigPath) or not callable(value):
            if key.endswith("class_path") and isinstance(value, str) and value.split(".")[0] in STDLIB:
                raise UserError(f"{key}: {value!r} {STANDARD_LIBRARY}")
            continue
        name = f"{getattr(value, '__module__', None) or '?'}.{getattr(value, '__qualname__', type(value).__name__)}"
        raise UserError(
            f"{key}: {name} is a function, and a configuration never names code to call (it could run anything); "
            "remove it, or write a Callback class in your own module and give its class_path"
        )


def _values(value, key: str):
    """(dotted key, value) of every leaf of ``value``, lists indexed as ``key[i]``."""
    if isinstance(value, Namespace):
        for name, item in vars(value).items():
            yield from _values(item, f"{key}.{name}" if key else name)
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _values(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _values(item, f"{key}[{index}]")
    else:
        yield key, value
