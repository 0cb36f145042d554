"""One-line messages for configuration errors of ``s2forecast fit | validate | test | predict``.

jsonargparse reports a bad configuration in many lines: the usage, every subtype of a union
with why each failed, nested class_path problems and the whole value given. ``config_error``
reduces such a message to the offending key and its fix, e.g.::

    unknown key 'model.warmup_stpes' in run.yaml; did you mean 'model.warmup_steps'?
    model.warmup_steps: expected int, got 'abc' (in run.yaml)
    data.class_path 'SWEDatamodule' is not an importable FieldDataModule; did you mean ...?
    data.init_args.store is required: add it to the config or pass --data.init_args.store
    invalid YAML in run.yaml: expected ',' or ']', but got ':' (line 3, column 6)

jsonargparse (4.x) raises ``ArgumentError`` with a message only; what structure there is lies
in its chain of causes (``config_error`` reads the innermost cause's type first). The other
problems are read from the message text, falling back to its first line.
"""

import difflib
import importlib
import inspect
import re
import sys
from pathlib import Path

import yaml

from s2forecast.training.config_code import MAIN_MODULE, STANDARD_LIBRARY
from s2forecast.user_errors import UserError, one_line

MAX_LISTED = 8


class ConfigError(UserError):
    """A configuration error, in one line naming the key and the fix."""


def config_error(error: BaseException, keys: list[str], args: list[str]) -> ConfigError:
    """The ConfigError for jsonargparse's ``error``.

    Args:
        error: jsonargparse's ``ArgumentError``. Its chain of causes is read
            first: jsonargparse raises each check's own exception ``from`` the one below, so the
            innermost cause's type tells an unknown key of a class (``NSKeyError``) and a
            class_path that does not import (``ImportError``, ``AttributeError``) without
            parsing the many-line message; the message is reduced only for the rest.
        keys: the dotted keys the subcommand accepts (``model.lr``, ``trainer.max_epochs``, ...).
        args: the command-line arguments (to find the ``--config`` files).
    """
    reducer = _Reducer(keys, args)
    return ConfigError(reducer.from_causes(error) or reducer.reduce(str(error)))


def overlays_alone(args: list[str]) -> bool:
    """Whether the ``--config`` files of ``args`` are overlays of a base config left out: none of them
    (nor the command line) gives ``data.class_path``. ``--print_config`` refuses them as ``fit`` does:
    what it would print is not the run the overlay is meant for (its data null, its loss the default)."""
    return _Reducer([], args).overlay("data.init_args.store", required=True) is not None


def config_files(args: list[str]) -> list[Path]:
    """The files given with ``-c/--config`` in ``args``, in order."""
    files = []
    for i, arg in enumerate(args):
        if arg in ("-c", "--config") and i + 1 < len(args):
            files.append(Path(args[i + 1]))
        elif arg.startswith("--config="):
            files.append(Path(arg.split("=", 1)[1]))
    return files


def yaml_problem(path: Path) -> str | None:
    """Why ``path`` is not a YAML mapping (or None when it is one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        return f"config file {path} is not a text YAML file (byte {error.start} is not UTF-8)"
    except OSError:
        return None  # jsonargparse reports missing files itself
    try:
        content = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or one_line(str(error))
        return f"invalid YAML in {path}: {problem}{where}"
    if not isinstance(content, dict):
        kind = "empty" if content is None else f"a {type(content).__name__}"
        return f"config file {path} is {kind}, not a YAML mapping of options such as 'trainer:', 'model:', 'data:'"
    return None


class _Reducer:
    def __init__(self, keys: list[str], args: list[str]):
        self.keys = sorted({key for key in keys if key != "help" and not key.endswith(".help")})
        self.args = args
        self.configs = config_files(args)

    def from_causes(self, error: BaseException) -> str | None:
        """The problem named by the type of ``error``'s innermost cause, or None."""
        chain = [error]
        while chain[-1].__cause__ is not None and len(chain) < 32:
            chain.append(chain[-1].__cause__)
        texts = [str(cause) for cause in chain]
        key = next((m[1] for text in texts if (m := re.match(r'Parser key "([^"]+)":', text))), None)
        if denied := re.search(r"Importing '([^']+)' is not allowed, denied by .* import path denylist", texts[-1]):
            # config_code.safe_parsing: a standard-library import path, refused before its import
            keys = list(dict.fromkeys(m[1] for text in texts if (m := re.match(r'Parser key "([^"]+)":', text))))
            where = keys[0] + (f".init_args.{keys[-1]}" if len(keys) > 1 else "") if keys else "a value"
            return f"{where}: {denied[1]!r} {MAIN_MODULE if '__main__' in denied[1].split('.') else STANDARD_LIBRARY}"
        class_path = next(
            (m[1] for text in texts if (m := re.match(r"Problem with given class_path '([^']*)'", text))), None
        )
        if key is None or class_path is None:
            return None
        innermost = chain[-1]
        if type(innermost).__name__ == "NSKeyError" and (m := re.match(r"Option '([^']+)' is not accepted", texts[-1])):
            init_key = f"{key}.init_args"
            return self.unknown_key(f"{init_key}.{m[1]}", [f"{init_key}.{name}" for name in _init_args(class_path)])
        if isinstance(innermost, ImportError | AttributeError):
            return self.bad_class(key, class_path, _base_class("\n".join(texts)))
        return None

    def reduce(self, message: str) -> str:
        text = message.strip()
        first = one_line(text)
        if match := re.match(r"Subcommand '\w+' does not accept option '([^']+)'", first):
            return self.unknown_key(match[1], self.keys)
        if match := re.match(r"unrecognized arguments: (\S+)", first):
            return self.unknown_option(match[1])
        if first.startswith(("Problems parsing config", "Unexpected config")):
            for path in self.configs:
                if problem := yaml_problem(path):
                    return problem
            return one_line(text.replace("Problems parsing config:", "cannot parse a config value:"))
        if match := re.match(r'Parser key "([^"]+)":(.*)', text, re.S):
            return self.key_problem(match[1], _block(match[2]))
        if match := re.match(r"the following arguments are required: (.*)", first):
            names = [re.sub(r"^(fit|validate|test|predict)\.", "", name.strip()) for name in match[1].split(",")]
            # configs given, none with a data section (an overlay such as s2_neighborhood_crps_fgn.yaml alone)
            if "data" in names and (overlay := self.overlay("data.init_args.store", required=True)):
                return overlay
            return f"{', '.join(names)} is required: give a config with --config CONFIG.yaml or pass --{names[0]}"
        return first

    # --- kinds of problems ---------------------------------------------------------------------
    def key_problem(self, key: str, body: str) -> str:
        if key == "config":
            if match := re.match(r"(File does not exist|Path is not a file): '([^']*)'", body):
                what = "does not exist" if match[1].startswith("File") else "is not a file"
                return f"config file {match[2]} {what}; check the --config path"
            return f"--config: {one_line(body)}"
        if (union := body.find("Does not validate against any of the Union subtypes")) >= 0:
            # also when listed after "- Expected a path but ..." (a value that could be a config file)
            return self.union_problem(key, inspect.cleandoc(body[union:]))
        if match := re.match(r"Expected a <class '([\w.]+)'>\. Got value: (.*)", body, re.S):
            return self.wrong_type(key, [match[1]], match[2])
        if match := re.match(r"the following arguments are required: (.*)", body):
            return self.missing(key, match[1])
        return f"{key}: {one_line(body)}{self.location(key)}"

    def union_problem(self, key: str, body: str) -> str:
        items = _union_items(body)
        for item in items:
            if match := re.match(r"Problem with given class_path '([^']*)':(.*)", item, re.S):
                return self.class_problem(key, match[1], _block(match[2]), _base_class(body))
        for item in items:
            if match := re.match(r"Expected a dot import path string: (.*)", item):
                return self.bad_class(key, match[1].strip(), _base_class(body))
        expected = [t for item in items for t in re.findall(r"Expected a <class '([\w.]+)'>", item) if t != "NoneType"]
        literals = [v for item in items for v in re.findall(r"Expected a typing\.Literal\[(.*)\]", item)]
        if literals:
            expected.append(f"one of {', '.join(literals)}")
        given = re.search(r"^\s*Given value: (.*)$", body, re.M)
        if expected:
            return self.wrong_type(key, expected, given[1] if given else "?")
        return f"{key}: {one_line(items[0]) if items else one_line(body)}{self.location(key)}"

    def class_problem(self, key: str, class_path: str, body: str, base: type | None) -> str:
        init_key = f"{key}.init_args"
        if match := re.match(r'Parser key "([^"]+)":(.*)', body, re.S):
            return self.key_problem(f"{init_key}.{match[1]}", _block(match[2]))
        if match := re.match(r"the following arguments are required: (.*)", body):
            return self.missing(init_key, match[1])
        if re.search(r"does not correspond|not a subclass|Import path", body):
            return self.bad_class(key, class_path, base)
        return f"{key} ({class_path}): {one_line(body)}{self.location(key)}"

    def overlay(self, key: str, required: bool = False) -> str | None:
        """For a ``data.init_args`` key (unknown: one a ``FieldDataModule`` subclass takes; or
        ``required``) of config files none of which (nor the command line) gives ``data.class_path``:
        they are overlays of a base config left out, and the keys were checked against the base class
        (``FieldDataModule``): say that, not which of its keys is close."""
        if not key.startswith("data.init_args.") or not self.configs:
            return None
        if any(arg.split("=", 1)[0] in ("--data", "--data.class_path") for arg in self.args):
            return None
        contents = []
        for path in self.configs:
            try:
                contents.append(yaml.safe_load(path.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                return None
        if any(_has_key(content, ["data", "class_path"]) for content in contents):
            return None
        if not required:  # a typo in a config of the base class itself gets its "did you mean"
            from s2forecast.training.datamodule import FieldDataModule

            name = key.removeprefix("data.init_args.").split(".")[0]
            subclasses = [path for path in _subclass_paths(FieldDataModule) if path != _public_path(FieldDataModule)]
            if not any(name in _init_args(path) for path in subclasses):
                return None
        files = ", ".join(str(path) for path in self.configs)
        names = " ".join(f"--config {path}" for path in self.configs)
        return (
            f"no config gives data.class_path, so {files} is an overlay of another config (its first lines name "
            f"it): give the base config first, --config BASE.yaml {names}"
        )

    def unknown_key(self, key: str, candidates: list[str]) -> str:
        if overlay := self.overlay(key):
            return overlay
        where = self.location(key)
        if not where:  # not in a config file: it came from the command line
            return f"unknown option --{key}; {self.suggestion(key, candidates, prefix='--')}"
        return f"unknown key {key!r}{where}; {self.suggestion(key, candidates)}"

    def unknown_option(self, option: str) -> str:
        key = option.lstrip("-").split("=", 1)[0]
        return f"unknown option {option}; {self.suggestion(key, self.keys, prefix='--')}"

    def wrong_type(self, key: str, expected: list[str], given: str) -> str:
        given = given.strip()
        shown = given if len(given) <= 60 else given[:57] + "..."
        if key.endswith("storage_options"):  # credentials: not into an error line (logs get shared)
            shown = "***"
        return f"{key}: expected {' or '.join(dict.fromkeys(expected))}, got {shown!r}{self.location(key, ' (in {})')}"

    def missing(self, key: str, names: str) -> str:
        names = [name.strip() for name in names.split(",")]
        if overlay := self.overlay(f"{key}.{names[0]}", required=True):
            return overlay
        missing = ", ".join(f"{key}.{name}" for name in names)
        return f"{missing} is required: add it to the config or pass --{key}.{names[0]}"

    def bad_class(self, key: str, class_path: str, base: type | None) -> str:
        choices = _subclass_paths(base) if base is not None else []
        what = base.__name__ if base is not None else "class"
        message = f"{key}.class_path {class_path!r} is not an importable {what}"
        if not choices:
            return message + "; give the full import path of the class"
        close = difflib.get_close_matches(class_path, choices, n=1, cutoff=0.6)
        close = close or difflib.get_close_matches(
            class_path.rsplit(".", 1)[-1], [c.rsplit(".", 1)[-1] for c in choices], n=1, cutoff=0.6
        )
        close = [c for c in choices if c.endswith("." + close[0]) or c == close[0]][:1] if close else []
        listed = ", ".join(choices[:MAX_LISTED]) + (", ..." if len(choices) > MAX_LISTED else "")
        return message + (f"; did you mean {close[0]!r}?" if close else f"; use one of {listed}")

    # --- helpers -----------------------------------------------------------------------------------
    def suggestion(self, key: str, candidates: list[str], prefix: str = "") -> str:
        """'did you mean ...?' with the closest of ``candidates``, else the valid keys beside ``key``."""
        close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.75)
        if close:
            return f"did you mean '{prefix}{close[0]}'?"
        section, _, _ = key.rpartition(".")
        siblings = [c.rpartition(".")[2] for c in candidates if c.rpartition(".")[0] == section]
        if section and siblings:
            shown = ", ".join(siblings[:MAX_LISTED]) + (", ..." if len(siblings) > MAX_LISTED else "")
            return f"valid keys under {section!r}: {shown}"
        return f"valid top-level keys: {', '.join(sorted({c.split('.')[0] for c in candidates}))}"

    def location(self, key: str, form: str = " in {}") -> str:
        """`` in FILE`` for the last config file that sets ``key``; '' when the command line sets it."""
        options = {f"--{key}", f"--{key.replace('.init_args.', '.')}"}
        if any(arg.split("=", 1)[0] in options for arg in self.args):
            return ""
        for path in reversed(self.configs):
            try:
                content = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                continue
            if _has_key(content, key.split(".")):
                return form.format(path)
        return ""


def _block(text: str) -> str:
    """The text after ``Header:``: the rest of its line and the indented lines below, dedented."""
    first, _, rest = text.partition("\n")
    return (first.strip() + "\n" + inspect.cleandoc(rest)).strip() if rest.strip() else first.strip()


def _union_items(body: str) -> list[str]:
    """The ``- ...`` entries under ``Errors:`` of a union message, each dedented (with its own lines)."""
    lines = body.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Errors:") + 1
    except StopIteration:
        return []
    indent = len(lines[start]) - len(lines[start].lstrip()) if start < len(lines) else 0
    items: list[list[str]] = []
    for line in lines[start:]:
        stripped = line.lstrip()
        depth = len(line) - len(stripped)
        if depth < indent and stripped:
            break
        if depth == indent and stripped.startswith("- "):
            items.append([stripped[2:]])
        elif items:
            items[-1].append(line)
    return [item[0] + ("\n" + inspect.cleandoc("\n".join(item[1:])) if len(item) > 1 else "") for item in items]


def _base_class(body: str) -> type | None:
    """The first class named in the ``Subtypes: [...]`` line of a union message (also inside
    ``list[...]``), other than builtins."""
    line = re.search(r"Subtypes: \[(.*)\]", body)
    for path in re.findall(r"<class '([\w.]+)'>|([\w]+(?:\.[\w]+)+)", line[1] if line else ""):
        cls = _import(path[0] or path[1])
        if isinstance(cls, type) and cls.__module__ != "builtins":
            return cls
    return None


def _import(path: str):
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name) if module else None
    except (ImportError, AttributeError, ValueError):
        return None


def _subclass_paths(base: type) -> list[str]:
    """Import paths of the loaded non-private subclasses of ``base`` (``base`` itself if it has none)."""
    found, todo = [], list(base.__subclasses__())
    while todo:
        cls = todo.pop(0)
        todo.extend(cls.__subclasses__())
        if not cls.__name__.startswith("_") and "Dummy" not in cls.__name__:
            found.append(_public_path(cls))
    return sorted(dict.fromkeys(found)) or [_public_path(base)]


def _public_path(cls: type) -> str:
    """The shortest import path of ``cls`` (``s2forecast.training.datamodule.SWEDataModule``)."""
    parts = cls.__module__.split(".")
    for n in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:n]))
        if module is not None and getattr(module, cls.__name__, None) is cls:
            return f"{'.'.join(parts[:n])}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _init_args(class_path: str) -> list[str]:
    """The constructor arguments jsonargparse accepts for the class at ``class_path``."""
    cls = _import(class_path)
    if cls is None:
        return []
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    try:
        parser.add_class_arguments(cls, fail_untyped=False)
    except Exception:  # noqa: BLE001 - only for a suggestion; the message stands without it
        return list(inspect.signature(cls).parameters)
    return [action.dest for action in parser._actions if action.dest != "help" and not action.dest.endswith(".help")]


def _has_key(content, parts: list[str]) -> bool:
    """Whether the nested mapping ``content`` has the dotted key (``init_args`` may be left out)."""
    if not parts:
        return True
    if not isinstance(content, dict):
        return False
    head, rest = parts[0], parts[1:]
    if head in content and _has_key(content[head], rest):
        return True
    return head == "init_args" and _has_key(content, rest)
