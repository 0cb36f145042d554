"""Telling URLs from local paths (an fsspec protocol prefix such as gs://, https://, file://)."""

import re

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(source) -> bool:
    """Whether ``source`` is a URL string; ``Path`` objects and local paths are not."""
    return isinstance(source, str) and bool(URL.match(source))
