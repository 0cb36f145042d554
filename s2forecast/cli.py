"""The ``s2forecast`` command: the subcommands of ``s2forecast.commands``, in workflow order.

``s2forecast --help`` and every ``s2forecast COMMAND --help`` answer without importing torch,
Lightning or xarray; the Lightning commands' plain ``--help`` comes from a cache
(``s2forecast.help_cache``), rendered by LightningCLI on first use.

A user error (``s2forecast.user_errors.UserError``: a bad value, path or file, a configuration
error) ends the command with one line, ``s2forecast COMMAND: error: ...``, and exit status 2;
``--debug`` (anywhere on the command line) also prints the traceback. Any other exception is a
bug: its traceback, then one line asking for a report, and exit status 1.
"""

import argparse
import difflib
import re
import sys
import traceback

from s2forecast import __version__, help_cache, provenance
from s2forecast.commands import COMMANDS
from s2forecast.commands.arguments import attach_negative_lists
from s2forecast.urls import redact
from s2forecast.user_errors import BUG_REPORT, UserError, user_error_message
from s2forecast.warning_format import one_line_warnings

BY_NAME = {command.name: command for command in COMMANDS}
DEBUG = "--debug"


class CommandParser(argparse.ArgumentParser):
    """argparse, with usage errors in one line (argparse prints the whole usage first)."""

    def error(self, message: str):
        if match := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message):
            close = difflib.get_close_matches(match[1], re.findall(r"'([^']*)'", match[2]), n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
        elif match := re.match(r"unrecognized arguments: (.*)", message):  # a mistyped option, as fit's are told
            options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
            typed = [arg.split("=", 1)[0] for arg in match[1].split() if arg.startswith("--")]
            close = [(arg, near[0]) for arg in typed if (near := difflib.get_close_matches(arg, options, n=1))]
            if close:
                message += "; did you mean " + ", ".join(f"{near!r} (for {arg})" for arg, near in close) + "?"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    given = [arg for arg in argv if arg != DEBUG]
    command = given[0] if given and given[0] in BY_NAME else None
    with provenance.command(["s2forecast", *argv]), one_line_warnings(command):  # history: the command line
        _main(argv)


def _main(argv: list[str]) -> None:
    debug = DEBUG in argv
    argv = [arg for arg in argv if arg != DEBUG]
    command = argv[0] if argv and argv[0] in BY_NAME else None
    try:
        if argv and argv[0] == "predict":
            command = "predict"
            raise UserError(
                "predict is not a command: it wrote nothing. Forecasts from a checkpoint are `s2forecast rollout "
                "--ckpt CKPT --store STORE --steps N --init-times ... --out forecast.nc`"
            )
        if command is not None and BY_NAME[command].lightning:
            if help_cache.is_plain_help(argv):  # LightningCLI's help, cached: it takes seconds of imports
                help_cache.print_help(command)
                sys.exit(0)  # as argparse's --help does
            else:
                BY_NAME[command].run(argv)  # LightningCLI parses the rest
            return
        parser = build_parser()
        if command == "evaluate":  # a box of southern latitudes, --regions -45,-12.5,120,175
            argv = attach_negative_lists(argv, "--regions")
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # named by the subcommand's parser: its prog and its --help, not the top level's
            parser.commands.get(args.command, parser).error(f"unrecognized arguments: {' '.join(unknown)}")
        if args.command is None:
            parser.print_help()
            sys.exit(2)
        command = args.command
        BY_NAME[command].run(args)
    except KeyboardInterrupt:  # Ctrl-C: the user's own stop, not a bug; outputs are written to survive it
        if debug:
            traceback.print_exc()
        after = BY_NAME[command].after_interrupt if command in BY_NAME else ""
        sys.stderr.write(f"s2forecast {command or ''}: interrupted{'; ' + after if after else ''}\n".replace(" :", ":"))
        sys.exit(130)  # 128 + SIGINT, as a shell reports it
    except Exception as error:
        message = user_error_message(error)
        if message is None:  # a bug: the traceback is what a report needs
            traceback.print_exception(error)
            sys.stderr.write(f"s2forecast {command or ''}: internal error: {BUG_REPORT}\n".replace(" :", ":"))
            sys.exit(1)
        if debug:
            traceback.print_exception(error)
        sys.stderr.write(f"s2forecast {command}: error: {redact(message)}\n")  # a URL's password: not in a log
        sys.exit(2)


class CommandListFormatter(argparse.HelpFormatter):
    """argparse's help, with each command's name and help on one line: argparse sizes the name
    column without the commands' extra indent, which puts the help of a long name below it."""

    def __init__(self, prog: str):
        super().__init__(prog)
        self._action_max_length = 2 + max(len(command.name) for command in COMMANDS) + 2


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand, in workflow order; the Lightning ones are listed here and
    parsed by LightningCLI."""
    parser = CommandParser(
        prog="s2forecast",
        description="Data-driven forecasting on the sphere. Commands in the order of the workflow:",
        epilog="A user error ends a command with one line; add --debug anywhere to see its traceback.",
        formatter_class=CommandListFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"s2forecast {__version__}")
    parser.add_argument(DEBUG, action="store_true", help="print the traceback of an error (any command)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.commands = {}
    for command in COMMANDS:
        # no abbreviations: `--member 1` would be taken as `--members 1`
        sub = subparsers.add_parser(command.name, help=command.help, add_help=not command.lightning, allow_abbrev=False)
        if not command.lightning:
            command.arguments(sub)
        parser.commands[command.name] = sub
    return parser


if __name__ == "__main__":
    main()
