"""``s2forecast test``: score a checkpoint on the test split (Lightning).

Its arguments are LightningCLI's (``s2forecast.training.cli``); ``s2forecast test --help`` is
read from a cache (``s2forecast.help_cache``).
"""

HELP = "score a checkpoint on the test split (Lightning)"
LIGHTNING = True  # LightningCLI parses the arguments


def run(argv: list[str]) -> None:
    """``argv`` starts with "test"."""
    from s2forecast.training.cli import run as lightning

    lightning(argv)
