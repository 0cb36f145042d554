"""The subcommands of ``s2forecast``, one module each, in the order of the workflow: data,
statistics, training, forecasts, scores.

A command module holds ``HELP`` (one line for ``s2forecast --help``), ``arguments(parser)``
(argparse; absent for the Lightning commands, which LightningCLI parses) and ``run``, which
takes the parsed arguments (the argv for Lightning); ``INTERRUPTED``, where Ctrl-C leaves work to
resume, says how. Command modules import nothing heavy at
the top, so that ``s2forecast --help`` and ``s2forecast CMD --help`` start at once; ``run``
imports the library it calls.
"""

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Command:
    name: str  # as typed: "generate-swe"

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(f"{__name__}.{self.name.replace('-', '_')}")

    @property
    def help(self) -> str:
        return self.module.HELP

    @property
    def lightning(self) -> bool:
        return getattr(self.module, "LIGHTNING", False)

    @property
    def arguments(self):
        """(parser) -> None; None for the Lightning commands."""
        return None if self.lightning else self.module.arguments

    @property
    def run(self):
        return self.module.run

    @property
    def after_interrupt(self) -> str:
        """What Ctrl-C leaves and how to go on ("" when the outputs are as before): ``INTERRUPTED``."""
        return getattr(self.module, "INTERRUPTED", "")


NAMES = (
    "generate-swe",
    "convert-era5",
    "stats",
    "fit",
    "validate",
    "test",
    "rollout",
    "climatology",
    "evaluate",
    "grid",
)
COMMANDS = tuple(Command(name) for name in NAMES)
