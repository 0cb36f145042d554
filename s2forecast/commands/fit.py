"""``s2forecast fit``: train a model from a YAML config (Lightning).

Its arguments are LightningCLI's (``s2forecast.training.cli``); ``s2forecast fit --help`` is
read from a cache (``s2forecast.help_cache``).
"""

HELP = "train a model from a YAML config (Lightning)"
LIGHTNING = True  # LightningCLI parses the arguments


def run(argv: list[str]) -> None:
    """``argv`` starts with "fit"."""
    from s2forecast.training.cli import run as lightning

    lightning(argv)
