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


@pytest.mark.parametrize(
    "hook, function, shown",
    [("on_fit_start", "os.system", "posix.system"), ("on_train_start", "builtins.print", "builtins.print")],
)
def test_function_in_a_config_file_is_refused_before_anything_runs(swe_store, tmp_path, capsys, hook, function, shown):
    config = tmp_path / "hooks.yaml"
    config.write_text(f"{LAMBDA}        {hook}: {function}\n")
    with pytest.raises(SystemExit) as exit:
        cli(["fit", *tiny_args(swe_store, tmp_path), "--config", str(config)])
    captured = capsys.readouterr()
    error = captured.err.splitlines()[-1]
    assert exit.value.code == 2 and "Traceback" not in captured.err, captured.err
    assert error.startswith(f"s2forecast fit: error: trainer.callbacks[0].init_args.{hook}: {shown} is a function")
    assert "Trainer object" not in captured.out and not list(tmp_path.rglob("*.ckpt"))  # never called, nothing trained


def test_function_on_the_command_line_is_refused(swe_store, tmp_path, capsys):
    lambda_callback = "--trainer.callbacks+=pytorch_lightning.callbacks.LambdaCallback"
    with pytest.raises(SystemExit) as exit:
        cli(["fit", *tiny_args(swe_store, tmp_path), lambda_callback, "--trainer.callbacks.on_fit_end=shutil.rmtree"])
    assert exit.value.code == 2
    assert "on_fit_end: shutil.rmtree is a function" in capsys.readouterr().err


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
