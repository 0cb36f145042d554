"""Issue 29: network and rollout options the model cannot use end `s2forecast fit` with one line
naming the option (they were tracebacks: TypeError, ZeroDivisionError, or a failure at the first
training step), before any training step."""

import pytest
from session_fixtures import tiny_args

from s2forecast.cli import main

CASES = {
    "embed_dim sixteen": (["--model.network.embed_dim", "sixteen"], "network option embed_dim", "'sixteen'"),
    "embed_dim -16": (["--model.network.embed_dim", "-16"], "network option embed_dim must be >= 1", "-16"),
    "num_heads 0": (["--model.network.num_heads", "0"], "network option num_heads must be >= 1", "got 0"),
    "num_heads 3": (["--model.network.num_heads", "3"], "embed_dim=16 is not divisible by num_heads=3", ""),
    "rollout_steps 0": (["--data.init_args.rollout_steps", "0"], "rollout_steps must be an integer >= 1", "got 0"),
    "rollout_max above rollout_steps": (
        ["--model.rollout_max", "3"],
        "model.rollout_max is 3 steps but the data's rollout_steps is 2",
        "raise data rollout_steps",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fit_refuses_in_one_line(case, swe_store, tmp_path, capsys):
    extra, message, value = CASES[case]
    with pytest.raises(SystemExit) as exit:
        main(["fit", *tiny_args(swe_store, tmp_path, *extra)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("s2forecast")]
    assert exit.value.code == 2, lines
    assert len(errors) == 1 and errors[0] == lines[-1] and "Traceback" not in "\n".join(lines), lines
    assert lines[-1].startswith("s2forecast fit: error: ") and message in lines[-1] and value in lines[-1], lines[-1]
    assert not list(tmp_path.rglob("*.ckpt"))  # refused before training
