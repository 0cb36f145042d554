"""scripts/neighborhood_tiles.py: the neighbor pairs behind the GPU figures' effective FLOP rate."""

import importlib.util
import json
from pathlib import Path

import pytest

from s2forecast.geometry import Grid
from s2forecast.ops import default_radius, spherical_neighborhood

SCRIPT = Path(__file__).parents[2] / "scripts" / "neighborhood_tiles.py"


def load_script():
    spec = importlib.util.spec_from_file_location("neighborhood_tiles", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("shape, theta", [((8, 16), None), ((12, 24), 0.6), ((13, 20), 0.3)])
def test_neighbor_pairs_are_the_disks_pairs(shape, theta):
    grid = Grid(*shape)
    theta = theta or default_radius(grid)
    inside = int(spherical_neighborhood(grid, theta).dense_mask().sum())
    for block_m, block_n in [(16, 16), (64, 32)]:
        work = load_script().tile_work(grid, theta, block_m, block_n)
        assert work["neighbor_pairs"] == inside
        assert work["scored_pairs"] >= inside and 0 < work["fraction"] <= 1


def test_lines_and_bad_tiles(capsys):
    script = load_script()
    script.main(["--nlat", "8", "--nlon", "16", "--tiles", "16x16"])
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["setup"], row["BLOCK_M"], row["BLOCK_N"]) == ("8x16", 16, 16)
    with pytest.raises(SystemExit) as exit_status:
        script.main(["--tiles", "64-32"])
    assert exit_status.value.code == 2 and "got '64-32'" in capsys.readouterr().err
