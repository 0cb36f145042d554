"""The checkpoint's data description as a ``DataSpec``: the same plain dict as before (issue 26),
and checkpoints written before it (old keys, ``ensemble_size``) still load."""

import pytest
import torch

from s2forecast.geometry import Grid
from s2forecast.models.data_spec import DataSpec
from s2forecast.models.forecaster import Forecaster

# the ``data`` hyper-parameter exactly as training.data_info wrote it before DataSpec (key order too)
OLD_DICT = {
    "channels": ["temperature/500", "2m_temperature"],
    "static_channels": ["land_sea_mask"],
    "forcing_channels": ["toa_incident_solar"],
    "grid": [8, 16, "equiangular"],
    "history": 2,
    "step_hours": 6,
    "rollout_steps": 3,
    "mean": [250.5, 280.25],
    "std": [10.0, 15.5],
    "tendency_std": [1.5, 2.0],
    "static_mean": [0.3],
    "static_std": [0.45],
    "store": "runs/era5.zarr",
}


def test_old_dict_round_trips_exactly():
    spec = DataSpec.from_dict(OLD_DICT)
    assert spec.grid == Grid(8, 16, "equiangular") and spec.channels == ("temperature/500", "2m_temperature")
    assert spec.static_mean == (0.3,) and spec.history == 2 and spec.step_hours == 6
    again = spec.to_dict()
    assert again == OLD_DICT and list(again) == list(OLD_DICT)  # the checkpoint's hparams are unchanged
    assert DataSpec.from_dict(again) == spec


def test_old_dict_without_static_statistics():
    old = {k: v for k, v in OLD_DICT.items() if k not in ("static_mean", "static_std")}
    spec = DataSpec.from_dict(old)
    assert spec.static_mean is None and spec.static_std is None
    assert spec.to_dict() == old


def test_bad_dicts_name_the_key():
    incomplete = {k: v for k, v in OLD_DICT.items() if k != "tendency_std"}
    with pytest.raises(KeyError, match=r"lacks \['tendency_std'\]"):
        DataSpec.from_dict(incomplete)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        DataSpec.from_dict({**OLD_DICT, "colour": "red"})


def test_on_grid_changes_only_the_grid():
    spec = DataSpec.from_dict(OLD_DICT)
    finer = spec.on_grid(Grid(16, 32))
    assert finer.grid == Grid(16, 32) and finer.to_dict() == {**OLD_DICT, "grid": [16, 32, "equiangular"]}


def test_checkpoint_of_before_data_spec_loads(tmp_path):
    """A checkpoint as ``s2forecast fit`` wrote it before issue 26: the old data dict and an
    ensemble model's ``ensemble_size`` among its hyper-parameters."""
    network = {"embed_dim": 8, "num_layers": 1, "noise_channels": 2}
    trained = Forecaster("spherical", network, DataSpec.from_dict(OLD_DICT))
    hparams = {"architecture": "spherical", "network": network, "data": OLD_DICT, "residual": True,
               "loss": "crps", "ensemble_size": 2}  # fmt: skip
    state_dict = {"forecaster." + name: value for name, value in trained.state_dict().items()}
    torch.save({"hyper_parameters": hparams, "state_dict": state_dict}, tmp_path / "old.ckpt")
    loaded = Forecaster.from_checkpoint(tmp_path / "old.ckpt")
    assert loaded.data == DataSpec.from_dict(OLD_DICT) and loaded.stochastic
    ours, theirs = loaded.state_dict(), trained.state_dict()
    assert list(ours) == list(theirs) and all(torch.equal(ours[name], theirs[name]) for name in ours)
    assert loaded.mean.flatten().tolist() == [250.5, 280.25]


def test_with_statistics_shares_the_weights_and_changes_only_the_normalization():
    model = Forecaster("spherical", {"embed_dim": 8, "num_layers": 1}, DataSpec.from_dict(OLD_DICT))
    other = model.with_statistics([200.0, 290.0], [5.0, 20.0], [1.0, float("nan")])
    assert other.net is model.net and other.data.mean == (200.0, 290.0) and other.data.std == (5.0, 20.0)
    assert model.data.mean == (250.5, 280.25) and model.mean.flatten().tolist() == [250.5, 280.25]  # untouched
    assert other.mean.flatten().tolist() == [200.0, 290.0] and other.std.flatten().tolist() == [5.0, 20.0]
    assert other.tendency_scale.flatten().tolist() == pytest.approx([0.2, 1.0])  # tendency_std / std, or 1
    with pytest.raises(ValueError, match=r"statistics of \[1, 2, 2\] channels for 2"):
        model.with_statistics([1.0], [1.0, 2.0], [1.0, 2.0])


def test_normalization_in_the_modules_dtype():
    """A review found: normalize and to_physical rounded the float64 API's values to float32 (``.float()``)
    and labelled them float64; a float32 module's stay float32 whatever it is given."""
    model = Forecaster("spherical", {"embed_dim": 8, "num_layers": 1}, DataSpec.from_dict(OLD_DICT))
    third = torch.full((1, 2, 8, 16), 1 / 3, dtype=torch.float64)
    assert model.normalize(third).dtype == model.to_physical(third).dtype == torch.float32
    double = model.double()
    expected = third * double.std + double.mean  # float64 arithmetic
    assert torch.equal(double.to_physical(third), expected) and expected.dtype == torch.float64
    assert torch.equal(double.normalize(expected), (expected - double.mean) / double.std)


def test_on_grid_keeps_the_checkpoints_static_fields_only_on_its_own_grid():
    model = Forecaster("spherical", {"embed_dim": 8, "num_layers": 1}, DataSpec.from_dict(OLD_DICT))
    model.static_fields = {"land_sea_mask": torch.ones(8, 16)}
    assert model.on_grid(model.grid).static_fields is model.static_fields  # they were lost: {}
    assert model.on_grid(Grid(16, 32)).static_fields == {}  # another grid takes the store's


def test_on_grid_refuses_sprepes_learnable_mask_and_keeps_a_planar_model_on_its_own_grid():
    """SpRePE with a learnable mask failed in load_state_dict on another grid ('internal error' of
    rollout --other-grid); a planar model's own grid raised AttributeError (it has no on_grid)."""
    spec = DataSpec.from_dict(OLD_DICT)
    options = {"embed_dim": 8, "num_layers": 1, "position_embedding": "sprepe",
               "position_embedding_options": {"mask": "learnable"}}  # fmt: skip
    model = Forecaster("spherical", options, spec)
    with pytest.raises(ValueError, match=r"cannot run on .*16.*32.*: its position embedding 'sprepe' with mask "
                       r"'learnable' \(a weight per latent point\) is tied to the training grid; regrid"):  # fmt: skip
        model.on_grid(Grid(16, 32))
    planar = Forecaster("planar", {"embed_dim": 8, "num_layers": 1, "num_heads": 2, "patch_size": 4}, spec)
    assert planar.on_grid(planar.grid) is planar


def test_a_grid_the_encoder_cannot_map_is_one_line():
    """9x15 with scale factor 2 (latent 4x7) was torch-harmonics' ValueError, an internal error."""
    from s2forecast.models.spherical_transformer import SphericalTransformer

    with pytest.raises(
        ValueError,
        match=r"a 9x15 grid cannot run this network: its 15 longitudes are not a multiple "
        r"of the latent grid's 7 \(nlon // scale_factor 2\); use a grid whose nlon is a multiple of 2",
    ):
        SphericalTransformer(Grid(9, 15), 3, 3, embed_dim=8, num_layers=1)
    with pytest.raises(ValueError, match=r"^a 7x14 grid cannot run this network"):  # the data grid, not its 8x14 edges
        SphericalTransformer(Grid(7, 14, "equiangular-midpoint"), 3, 3, embed_dim=8, num_layers=1, scale_factor=4)


def test_checkpoint_messages_keep_the_quotes_of_their_detail():
    """A KeyError's message is quoted by str(), and its quotes go; a TypeError's closing quote went too:
    "unexpected keyword argument 'foo" (a review found it)."""
    from s2forecast.models.forecaster import _first_detail

    assert _first_detail(TypeError("__init__() got an unexpected keyword argument 'foo'")).endswith("'foo'")
    assert _first_detail(KeyError("missing key 'channels'")) == "missing key 'channels'"


def test_a_float64_forecaster_stays_float64_on_another_grid_and_with_other_statistics():
    """on_grid and with_statistics made a .double() model's weights and statistics float32 again:
    weights rounded, outputs normalized in float32 and labelled float64."""
    model = Forecaster("spherical", {"embed_dim": 8, "num_layers": 1}, DataSpec.from_dict(OLD_DICT)).double()
    for other in (model.on_grid(Grid(16, 32)), model.with_statistics([1.0, 2.0], [1.0, 2.0], [1.0] * 2)):
        assert {p.dtype for p in other.parameters()} == {torch.float64}
        assert {other.mean.dtype, other.std.dtype, other.tendency_scale.dtype} == {torch.float64}
    mean = 1.0 + 1e-9  # not a float32: kept whole in a float64 model
    assert model.with_statistics([mean] * 2, [1.0] * 2, [1.0] * 2).mean[0].item() == mean
