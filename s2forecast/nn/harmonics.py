"""Spherical harmonic analysis of real fields on any grid s2forecast knows, with the grid's own
quadrature: differentiable, for losses on spectral coefficients (the spectral CRPS).

c_lm = int f Y_lm^* dOmega = 2 pi sum_j w_j P_lm(cos colat_j) F_m(colat_j), F_m the Fourier
coefficients of row j (``rfft``, norm "forward"), P_lm torch-harmonics' orthonormal associated
Legendre functions, w_j the grid's latitude quadrature (``geometry.latitude_quadrature``:
torch-harmonics' rules for equiangular and Gauss-Legendre grids, to round-off, so the
coefficients are those of torch-harmonics' ``RealSHT(csphase=False)``; Fejer's first rule for WeatherBench2's
cell-centred grids, which torch-harmonics has no rule for). Degrees are truncated as
torch-harmonics does (``truncate_sht``), to those whose squares the rule integrates exactly:
what ``evaluation.spectra.spherical_harmonic_power`` computes in NumPy for the scores.
"""

import math

import torch
from torch_harmonics.legendre import legpoly
from torch_harmonics.truncation import truncate_sht

from s2forecast.geometry import Grid
from s2forecast.geometry.quadrature import latitude_quadrature
from s2forecast.nn.geometric_buffers import GeometricBuffers
from s2forecast.user_errors import UserError


class SphericalHarmonicAnalysis(GeometricBuffers):
    """Orthonormal spherical harmonic coefficients of (..., nlat, nlon) fields on ``grid`` (rows
    north to south, as the grid's colatitudes).

    Computes in float32 for float32, bf16 and fp16 fields, in float64 for float64 fields (with
    the exact float64 kernel: kept by a ``.double()`` module, computed per call otherwise).

    Attributes:
        lmax, mmax: degrees 0..lmax-1 and orders 0..mmax-1 (m <= l; the others are 0).
    """

    def __init__(self, grid: Grid):
        super().__init__()
        kind = "legendre-gauss" if grid.kind == "legendre-gauss" else "equiangular"
        # Gauss-Legendre integrates degree 2 nlat - 1 exactly; the equiangular rules ~nlat - 1
        exact = grid.nlat if kind == "legendre-gauss" else (grid.nlat + 1) // 2
        self.grid = grid
        self.lmax, self.mmax = truncate_sht(grid.nlat, grid.nlon, lmax=exact, grid=kind)
        self._register_geometry()

    def _geometry(self) -> dict[str, torch.Tensor]:
        """The kernel 2 pi w_j P_lm(cos colat_j), (mmax, lmax, nlat) float64."""
        colats, weights = latitude_quadrature(self.grid.nlat, self.grid.kind)
        x = torch.from_numpy(colats).cos()
        legendre = legpoly(self.mmax, self.lmax, x, norm="ortho", csphase=False)  # (mmax, lmax, nlat)
        return {"kernel": 2 * math.pi * legendre * torch.from_numpy(weights)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., nlat, nlon) real -> (..., lmax, mmax) complex coefficients (float32 or wider)."""
        if tuple(x.shape[-2:]) != self.grid.shape:
            shape = tuple(x.shape[-2:])
            raise UserError(f"fields of shape {shape} on a {self.grid.shape} analysis; give fields on its grid")
        dtype = torch.promote_types(x.dtype, torch.float32)
        kernel = self.kernel
        if dtype == torch.float64 and kernel.dtype != torch.float64:
            kernel = self._geometry()["kernel"]
        with torch.autocast(x.device.type, enabled=False):  # a loss term: in fp32 under bf16 training
            fourier = torch.fft.rfft(x.to(dtype), dim=-1, norm="forward")[..., : self.mmax]  # (..., nlat, mmax)
            parts = torch.view_as_real(fourier)  # (..., nlat, mmax, 2)
            coefficients = torch.einsum("mlj,...jmc->...lmc", kernel.to(x.device, dtype), parts)
        return torch.view_as_complex(coefficients.contiguous())
