"""Issue 29: a configuration builds classes but never names a function to call (a YAML
LambdaCallback with ``on_fit_start: os.system`` was instantiated and called)."""

from pathlib import Path

import pytest
from jsonargparse import Namespace
from jsonargparse.typing import Path as ConfigPath
from session_fixtures import tiny_args

from s2forecast.cli import main as cli
from s2forecast.training.config_code import refuse_code
from s2forecast.user_errors import UserError

LAMBDA = "trainer:\n  callbacks:\n    - class_path: pytorch_lightning.callbacks.LambdaCallback\n      init_args:\n"


STDLIB_REFUSAL = (
    "is from Python's standard library, and a configuration may only name classes of s2forecast, "
    "Lightning, torch or your own modules"
)


@pytest.mark.parametrize(
    "hook, function, shown",
    [
        # a standard-library import path is refused as the config is parsed, before its import
        ("on_fit_start", "os.system", f"trainer.callbacks.init_args.on_fit_start: 'os.system' {STDLIB_REFUSAL}"),
        ("on_train_start", "builtins.print", f"trainer.callbacks.init_args.on_train_start: 'builtins.print' "
         f"{STDLIB_REFUSAL}"),
        ("on_train_start", "numpy.save", "trainer.callbacks[0].init_args.on_train_start: numpy.save is a function"),
    ],
)  # fmt: skip
def test_function_in_a_config_file_is_refused_before_anything_runs(swe_store, tmp_path, capsys, hook, function, shown):
    config = tmp_path / "hooks.yaml"
    config.write_text(f"{LAMBDA}        {hook}: {function}\n")
    with pytest.raises(SystemExit) as exit:
        cli(["fit", *tiny_args(swe_store, tmp_path), "--config", str(config)])
    captured = capsys.readouterr()
    error = captured.err.splitlines()[-1]
    assert exit.value.code == 2 and "Traceback" not in captured.err, captured.err
    assert error.startswith(f"s2forecast fit: error: {shown}"), error
    assert "Trainer object" not in captured.out and not list(tmp_path.rglob("*.ckpt"))  # never called, nothing trained


def test_function_on_the_command_line_is_refused(swe_store, tmp_path, capsys):
    lambda_callback = "--trainer.callbacks+=pytorch_lightning.callbacks.LambdaCallback"
    with pytest.raises(SystemExit) as exit:
        cli(["fit", *tiny_args(swe_store, tmp_path), lambda_callback, "--trainer.callbacks.on_fit_end=shutil.rmtree"])
    assert exit.value.code == 2
    assert f"on_fit_end: 'shutil.rmtree' {STDLIB_REFUSAL}" in capsys.readouterr().err


def test_refuse_code_walks_every_value():
    good = Namespace(
        config=[ConfigPath(str(Path(__file__)))],  # jsonargparse's paths are callable, and harmless
        fit=Namespace(data=Namespace(class_path="s2forecast.training.datamodule.SWEDataModule", init_args={}),
                      trainer=Namespace(callbacks=[Namespace(class_path="my_callbacks.Probe")], max_epochs=2)),
    )  # fmt: skip
    refuse_code(good)
    nested = Namespace(fit=Namespace(model=Namespace(network={"options": [1, {"hook": print}]})))
    with pytest.raises(UserError, match=r"^model\.network\.options\[1\]\.hook: builtins\.print is a function"):
        refuse_code(nested)
    popen = Namespace(fit=Namespace(trainer=Namespace(plugins=[Namespace(class_path="subprocess.Popen")])))
    with pytest.raises(UserError, match=r"^trainer\.plugins\[0\]\.class_path: 'subprocess\.Popen' is from Python's"):
        refuse_code(popen)
    with pytest.raises(UserError, match="is a function"):
        refuse_code(Namespace(fit=Namespace(trainer=Namespace(plugins=[dict]))))  # a class given as a value


def test_a_class_given_as_a_plain_value_is_not_built(swe_store, tmp_path):
    """A review found: jsonargparse built a class_path given as the value of a dict[str, Any] parameter
    (a profiler's table_kwargs), here a torch class whose constructor runs a command."""
    from s2forecast.training.cli import run

    marker = tmp_path / "PWNED"
    config = tmp_path / "profiler.yaml"
    config.write_text(
        "trainer:\n  profiler:\n    class_path: pytorch_lightning.profilers.PyTorchProfiler\n    init_args:\n"
        "      table_kwargs:\n        header:\n"
        "          class_path: torch.distributed.elastic.multiprocessing.subprocess_handler.SubprocessHandler\n"
        f"          init_args: {{entrypoint: /usr/bin/touch, args: [{marker}], env: {{}}, stdout: null, stderr: null, "
        "local_rank_id: 0}\n"
    )
    cli = run([*tiny_args(swe_store, tmp_path), "--config", str(config)], execute=False)
    assert not marker.exists()
    assert not callable(cli.trainer.profiler._table_kwargs["header"])  # a plain value, not an instance


def test_a_standard_library_class_path_is_refused_before_its_import(swe_store, tmp_path, capsys):
    """A review found: the module of a class_path was imported (its code run: `this` prints the Zen of
    Python) before refuse_code refused it."""
    config = tmp_path / "this.yaml"
    config.write_text("trainer:\n  callbacks:\n    - class_path: this.Anything\n")
    with pytest.raises(SystemExit) as exit:
        cli(["fit", *tiny_args(swe_store, tmp_path), "--config", str(config)])
    captured = capsys.readouterr()
    assert exit.value.code == 2 and "Traceback" not in captured.err
    assert "Beautiful is better than ugly" not in captured.out + captured.err
    assert "this.Anything" in captured.err.splitlines()[-1]


def test_a_class_path_through_a_main_module_is_refused_before_its_import(swe_store, tmp_path, capsys, monkeypatch):
    """A review found: `cpuinfo.__main__.Foo` ran cpuinfo's own command (it took over `fit`'s arguments),
    `PIL.__main__.Foo` printed Pillow's 190-line report, before the class was found missing."""
    package = tmp_path / "mainpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    ran = tmp_path / "ran"
    (package / "__main__.py").write_text(f"open({str(ran)!r}, 'w').write('its program ran')\nclass Foo: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "main.yaml"
    config.write_text("trainer:\n  callbacks:\n    - class_path: mainpkg.__main__.Foo\n")
    with pytest.raises(SystemExit) as exit:
        cli(["fit", *tiny_args(swe_store, tmp_path / "run"), "--config", str(config)])
    captured = capsys.readouterr()
    assert exit.value.code == 2 and not ran.exists() and "Traceback" not in captured.err
    assert captured.err.splitlines()[-1].endswith(
        "'mainpkg.__main__.Foo' goes through a __main__ module, whose import runs a program; a configuration may "
        "only name classes of s2forecast, Lightning, torch or your own modules"
    )


def test_on_exception_checkpoint_is_refused_and_touches_nothing(swe_store, tmp_path, capsys):
    """A review found: OnExceptionCheckpoint resumed in silence from <dirpath>/<filename>.ckpt, replaced
    it, and removed it at the end of the run: another run's checkpoint was lost."""
    other = tmp_path / "other_run"
    other.mkdir()
    (other / "last.ckpt").write_text("someone's weights")
    config = tmp_path / "on_exception.yaml"
    config.write_text("trainer:\n  callbacks:\n    - class_path: pytorch_lightning.callbacks.OnExceptionCheckpoint\n"
                      f"      init_args: {{dirpath: {other}, filename: last}}\n")  # fmt: skip
    with pytest.raises(SystemExit) as exit:
        cli(["fit", *tiny_args(swe_store, tmp_path / "run"), "--config", str(config)])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "s2forecast fit: error: trainer.callbacks: OnExceptionCheckpoint resumes from, replaces and removes a file at "
        "its dirpath that this run did not write; use ModelCheckpoint's save_on_exception: true instead"
    )
    assert (other / "last.ckpt").read_text() == "someone's weights"
