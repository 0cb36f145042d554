"""Bad arguments of the spherical layers and helpers are one line (a UserError), not a deep error."""

import pytest
import torch

import s2forecast.geometry
from s2forecast.geometry import Grid
from s2forecast.nn import SphericalHarmonicAnalysis
from s2forecast.ops import default_radius
from s2forecast.user_errors import UserError


def test_fields_on_another_grid_and_a_radius_of_no_grid_are_user_errors():
    with pytest.raises(UserError, match=r"^fields of shape \(4, 8\) on a \(8, 16\) analysis; give fields on its grid"):
        SphericalHarmonicAnalysis(Grid(8, 16))(torch.zeros(4, 8))
    with pytest.raises(UserError, match=r"^grid must be an s2forecast.geometry.Grid, got tuple$"):
        default_radius((8, 16))  # an AttributeError


def test_the_lazy_geometry_functions_are_listed():
    assert {"haversine", "rotation_matrix", "within_radius"} <= set(dir(s2forecast.geometry))
