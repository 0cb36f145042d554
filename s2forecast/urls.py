"""Telling URLs from local paths (an fsspec protocol prefix such as gs://, https://, file://), and
keeping the secrets a URL or fsspec's options may hold out of what s2forecast writes or prints."""

import json
import re

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
HIDDEN = "***"
# a URL inside a text (an error line, a command line): it ends at a space or a quote; a bracket, comma or
# full stop at its very end closes the text around it (``(https://h/x.zarr?k=v),``), not the URL
_URL_IN_TEXT = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s'\"]+)")
_TEXT_AFTER = re.compile(r"[)\]>,.;:]+$")
# the options that hold fsspec's storage options (credentials, headers with tokens)
STORAGE_OPTIONS = ("--storage-options", "--data.init_args.storage_options", "--data.storage_options")


def is_url(source) -> bool:
    """Whether ``source`` is a URL string; ``Path`` objects and local paths are not."""
    return isinstance(source, str) and bool(URL.match(source))


def redact(text: str) -> str:
    """``text`` with each URL's user information (``user:password@``) and query string replaced by
    ``***``: what a log, an error line or an output's attributes may show of it."""
    return _URL_IN_TEXT.sub(_redacted, text)


def _redacted(url: re.Match) -> str:
    scheme, rest = url[1], url[2]
    after = _TEXT_AFTER.search(rest)
    tail = after[0] if after and "(" not in rest else ""  # "?a=(1)" keeps its bracket in the query
    rest = rest[: len(rest) - len(tail)]
    authority, slash, path = rest.partition("/")
    if "@" in authority:  # user:password@host, up to the last @ before the path (s3://bucket/key@v1: a key)
        authority = f"{HIDDEN}@{authority.rpartition('@')[2]}"
    rest = authority + slash + path
    if scheme.lower() != "file" and "?" in rest:  # a presigned URL's signature, a SAS token; a path's "?" stays
        rest = f"{rest.split('?', 1)[0]}?{HIDDEN}"
    return f"{scheme}://{rest}{tail}"


def hidden_values(options):
    """fsspec storage options with every string replaced by ``***``, the keys, numbers and booleans
    kept (what a user must supply again): ``{"headers": {"Authorization": "***"}, "anon": true}``."""
    if isinstance(options, dict):
        return {key: hidden_values(value) for key, value in options.items()}
    if isinstance(options, list | tuple):
        return [hidden_values(value) for value in options]
    return HIDDEN if isinstance(options, str) else options


def redact_argv(argv: list[str]) -> list[str]:
    """A command line as it may be recorded: URLs redacted, the values of storage options hidden."""
    redacted, hide_next = [], False
    for arg in map(str, argv):
        name, equals, value = arg.partition("=")
        if hide_next:
            redacted.append(_hidden_json(arg))
        elif equals and name in STORAGE_OPTIONS:
            redacted.append(f"{name}={_hidden_json(value)}")
        else:
            redacted.append(redact(arg))
        hide_next = arg in STORAGE_OPTIONS
    return redacted


def _hidden_json(text: str) -> str:
    try:
        return json.dumps(hidden_values(json.loads(text)))
    except ValueError:
        return HIDDEN
