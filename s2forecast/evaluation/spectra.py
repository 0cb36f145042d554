"""Power spectra of forecasts and truth: does the forecast lose small scales (is it blurry)?

Two spectra, both on plain ``xarray.DataArray`` fields with ``latitude`` (degrees, either
order) and ``longitude`` (degrees, evenly spaced) as their last two dimensions:

- ``zonal_energy_spectrum``: WeatherBench2's ``ZonalEnergySpectrum``. Along each latitude
  circle of circumference C = 2 pi R cos(lat), with F[k] = (1/L) sum_l f[l] exp(-2 pi i k l / L),
  S[0] = C |F[0]|^2 and S[k] = 2 C |F[k]|^2 for k > 0 (units: m x units^2), so that
  sum_k S[k] = (C / L) sum_l f[l]^2, the discrete integral of f^2 around the circle (WB2 also
  doubles the Nyquist term of an even L, and so does this: Parseval holds up to that term).
  ``zonal_spectrum_band`` averages it over a latitude band as WB2 does: each latitude's
  spectrum is interpolated to common frequencies (1/m; the narrowest range), then averaged
  with cos(latitude) weights; but the zonal mean's power stays at frequency 0 (WB2 spreads it
  into the longest wavelength: ``_on_frequencies``).
- ``spherical_harmonic_power``: the power per total wavenumber (degree) l of the expansion in
  orthonormal spherical harmonics, P(l) = (|c_l0|^2 + 2 sum_{m>0} |c_lm|^2) / (4 pi), so that
  sum_l P(l) over the kept degrees is the area mean of f^2 (units^2) for a field without power
  above them (equiangular grids keep about nlat / 2 degrees, Gauss-Legendre grids nlat; a
  field's power above is left out, not folded in). Coefficients come from the grid's own
  quadrature (``geometry.latitude_quadrature``: torch-harmonics' rules for equiangular and
  Gauss-Legendre grids, Fejer's for WB2's cell-centred grids) and torch-harmonics' normalized
  associated Legendre functions (``geometry.quadrature.normalized_legendre``, in NumPy: scoring imports no
  torch); degrees are truncated as torch-harmonics' SHT does (``truncate_sht``: those whose
  squares the rule integrates exactly).

``spectra`` computes both for a forecast and its truth at chosen leads, averaged over
initialization times, as one dataset for the results file and the plots.
"""

import functools
import math

import numpy as np
import xarray as xr

from s2forecast.geometry import Grid
from s2forecast.geometry.quadrature import latitude_quadrature, normalized_legendre
from s2forecast.user_errors import UserError

EARTH_RADIUS_M = 6_371_000.0  # WeatherBench2's schema.EARTH_RADIUS_M
DEFAULT_BAND_DEG = (30.0, 60.0)  # |latitude| range of the band-averaged zonal spectrum (WB2's figures)


def _check_field(field: xr.DataArray) -> None:
    if tuple(field.dims[-2:]) != ("latitude", "longitude"):
        raise UserError(
            f"a spectrum needs (..., latitude, longitude) as the last dimensions, got {field.dims}; transpose first"
        )


def zonal_energy_spectrum(field: xr.DataArray) -> xr.DataArray:
    """WeatherBench2's zonal energy spectrum (module docstring) of each latitude circle.

    Args:
        field: (..., latitude, longitude), longitudes evenly spaced over 360 degrees.

    Returns:
        (..., latitude, zonal_wavenumber) in m x (the field's units)^2, with coordinates
        ``frequency`` (1/m) and ``wavelength`` (m) on (latitude, zonal_wavenumber).
    """
    _check_field(field)
    nlon = field.sizes["longitude"]
    spacing = np.diff(field["longitude"].values)
    if nlon < 2 or not np.allclose(spacing, 360.0 / nlon, rtol=0, atol=1e-3):
        raise UserError(f"the zonal spectrum needs {nlon} longitudes evenly spaced over 360 degrees")
    values = np.asarray(field.values, dtype=np.float64)
    coefficients = np.fft.rfft(values, axis=-1, norm="forward")
    # every k > 0 twice, the Nyquist term of an even L included: WB2's definition, kept so the
    # spectra compare with WB2's (Parseval then holds up to that one, normally tiny, term)
    twice = np.concatenate(([1.0], np.full(coefficients.shape[-1] - 1, 2.0)))
    circumference = 2 * np.pi * EARTH_RADIUS_M * np.cos(np.deg2rad(field["latitude"].values))
    power = np.abs(coefficients) ** 2 * twice * circumference[:, None]
    wavenumber = np.arange(coefficients.shape[-1])
    with np.errstate(divide="ignore"):
        frequency = wavenumber[None, :] / np.maximum(circumference[:, None], 1e-9)  # 1/m; a pole row is a point
        wavelength = 1.0 / frequency
    dims = (*field.dims[:-1], "zonal_wavenumber")
    coords = {name: coord for name, coord in field.coords.items() if "longitude" not in coord.dims}
    spectrum = xr.DataArray(power, dims=dims, coords=coords)
    return spectrum.assign_coords(
        zonal_wavenumber=wavenumber,
        frequency=(("latitude", "zonal_wavenumber"), frequency, {"units": "1 / m"}),
        wavelength=(("latitude", "zonal_wavenumber"), wavelength, {"units": "m"}),
    ).assign_attrs(units=_squared(field.attrs.get("units"), "m"), long_name="zonal energy spectrum")


def zonal_spectrum_band(spectrum: xr.DataArray, band_deg: tuple[float, float] = DEFAULT_BAND_DEG) -> xr.DataArray:
    """The zonal spectrum averaged over latitudes with |latitude| in ``band_deg`` (both
    hemispheres), as WeatherBench2 does: interpolated to common frequencies, then averaged
    with cos(latitude) weights; the zonal mean's power only at frequency 0 (``_on_frequencies``).

    Args:
        spectrum: ``zonal_energy_spectrum`` output, (..., latitude, zonal_wavenumber).
        band_deg: (low, high) absolute latitudes in degrees, 0 <= low < high <= 90.

    Returns:
        (..., frequency) with a ``wavelength`` coordinate (m).
    """
    low, high = band_deg
    if not 0.0 <= low < high <= 90.0:
        raise UserError(f"a latitude band needs 0 <= low < high <= 90 degrees, got {band_deg}")
    latitude = spectrum["latitude"].values
    inside = (np.abs(latitude) >= low) & (np.abs(latitude) <= high) & (np.abs(latitude) < 90.0)
    if not inside.any():
        raise UserError(f"no grid latitude lies in the band |latitude| in [{low:g}, {high:g}] degrees")
    band = spectrum.isel(latitude=np.flatnonzero(inside))
    frequency = band["frequency"].values  # (latitude, zonal_wavenumber)
    common = np.linspace(0.0, frequency[:, -1].min(), frequency.shape[1])  # the narrowest range, as WB2
    values = np.moveaxis(band.values, band.dims.index("latitude"), -2)  # (..., latitude, wavenumber)
    interpolated = np.stack([_on_frequencies(values[..., i, :], f, common) for i, f in enumerate(frequency)], axis=-2)
    weights = np.cos(np.deg2rad(band["latitude"].values))
    averaged = (interpolated * weights[:, None]).sum(axis=-2) / weights.sum()
    other = [d for d in band.dims if d not in ("latitude", "zonal_wavenumber")]
    coords = {d: band.coords[d] for d in other if d in band.coords}
    with np.errstate(divide="ignore"):
        wavelength = 1.0 / common
    result = xr.DataArray(averaged, dims=(*other, "frequency"), coords=coords)
    return result.assign_coords(
        frequency=("frequency", common, {"long_name": "zonal spatial frequency", "units": "1 / m"}),
        wavelength=("frequency", wavelength, {"long_name": "zonal wavelength", "units": "m"}),
    ).assign_attrs(spectrum.attrs | {"latitude_band_deg": f"{low:g} to {high:g} (both hemispheres)"})


def _on_frequencies(power: np.ndarray, frequency: np.ndarray, common: np.ndarray) -> np.ndarray:
    """(..., wavenumber) ``power`` of one latitude at its ``frequency`` (wavenumber / circumference),
    linearly interpolated to ``common`` (``common[0] = frequency[0] = 0``).

    Unlike WeatherBench2, the zonal mean's power stays at frequency 0: between 0 and the latitude's
    k = 1 frequency (a wavelength longer than its circle, which a lower latitude of the band has)
    the interpolation runs from zero power, not from the mean's. From the mean's, as WB2, the band's
    longest plotted wavelength took up to half the mean's power, orders of magnitude above any wave
    (Z500: 1e16 against 1e11)."""
    wave = power.copy()
    wave[..., 0] = 0.0
    interpolated = np.apply_along_axis(lambda row: np.interp(common, frequency, row), -1, wave)
    interpolated[..., 0] = power[..., 0]
    return interpolated


def spherical_harmonic_power(field: xr.DataArray) -> xr.DataArray:
    """Power per total wavenumber of ``field`` (module docstring): its sum over the kept degrees
    is the area mean of the field squared, less the power above them.

    Args:
        field: (..., latitude, longitude) on a global grid s2forecast knows (equiangular with
            poles, cell-centred, Gauss-Legendre; latitudes in either order).

    Returns:
        (..., degree) in (the field's units)^2, with a ``wavelength`` coordinate
        2 pi R / sqrt(l (l + 1)) (m; infinite for l = 0).
    """
    _check_field(field)
    grid = Grid.from_coords(field["latitude"].values, field["longitude"].values)
    values = np.asarray(field.values, dtype=np.float64)
    if field["latitude"].values[0] < field["latitude"].values[-1]:
        values = values[..., ::-1, :]  # north first, as the quadrature's colatitudes
    power = _sh_power(values, grid)
    degree = np.arange(power.shape[-1])
    with np.errstate(divide="ignore"):
        wavelength = 2 * np.pi * EARTH_RADIUS_M / np.sqrt(degree * (degree + 1.0))
    coords = {name: c for name, c in field.coords.items() if not {"latitude", "longitude"} & set(c.dims)}
    result = xr.DataArray(power, dims=(*field.dims[:-2], "degree"), coords=coords)
    coords = {
        "degree": ("degree", degree, {"long_name": "total wavenumber (spherical harmonic degree)", "units": "1"}),
        "wavelength": ("degree", wavelength, {"long_name": "wavelength 2 pi R / sqrt(l (l + 1))", "units": "m"}),
    }
    return result.assign_coords(coords).assign_attrs(
        units=_squared(field.attrs.get("units")), long_name="spherical harmonic power per degree"
    )


# fields transformed at once: at 0.25 deg each holds ~25 MB of Fourier and Legendre coefficients in flight
SH_FIELDS = 8


def _sh_power(values: np.ndarray, grid: Grid) -> np.ndarray:
    """(..., nlat, nlon) north-first values -> (..., lmax) power per degree (area mean units)."""
    # the degrees whose squares the rule integrates exactly: Gauss-Legendre nlat; equiangular
    # rules (Clenshaw-Curtis, Fejer), exact to degree ~nlat - 1, (nlat + 1) // 2; then
    # torch-harmonics' truncate_sht: triangular, at most the longitudes' Nyquist order
    exact = grid.nlat if grid.kind == "legendre-gauss" else (grid.nlat + 1) // 2
    lmax = mmax = min(exact, grid.nlon // 2 + 1)
    table = _weighted_legendre(mmax, lmax, grid.nlat, grid.kind)  # (mmax, lmax, nlat)
    flat = values.reshape(-1, grid.nlat, grid.nlon)
    power = np.empty((flat.shape[0], lmax))
    for start in range(0, flat.shape[0], SH_FIELDS):  # a few fields at a time: memory independent of their number
        power[start : start + SH_FIELDS] = _sh_power_of(flat[start : start + SH_FIELDS], table, grid.nlon)
    return power.reshape(*values.shape[:-2], lmax)


def _sh_power_of(fields: np.ndarray, table: np.ndarray, nlon: int) -> np.ndarray:
    """(fields, nlat, nlon) -> (fields, lmax) power per degree, with the weighted Legendre ``table``."""
    mmax = table.shape[0]
    fourier = np.fft.rfft(fields, axis=-1, norm="forward")[..., :mmax]  # (fields, nlat, mmax)
    # c_lm = int f Y_lm^* dOmega = 2 pi sum_j w_j P_lm(x_j) F_m(theta_j): per m one real matrix product
    # (BLAS) of the fields' real and of their imaginary parts (7x faster than an einsum at 0.25 deg)
    by_order = fourier.transpose(2, 1, 0)  # (mmax, nlat, fields)
    real, imag = np.ascontiguousarray(by_order.real), np.ascontiguousarray(by_order.imag)
    del fourier, by_order
    coefficients = np.matmul(table, real) + 1j * np.matmul(table, imag)  # (mmax, lmax, fields)
    twice = np.concatenate(([1.0], np.full(mmax - 1, 2.0)))  # m > 0 stands for +-m
    if 2 * (mmax - 1) == nlon:
        # the Nyquist order of an even nlon (kept where the latitudes resolve it) is one real
        # coefficient, +m and -m alike: counted once, the sum stays the grid's mean square
        twice[-1] = 1.0
    power = (np.abs(2 * np.pi * coefficients) ** 2 * twice[:, None, None]).sum(axis=0)  # (lmax, fields)
    return power.T / (4 * math.pi)


# one grid's table: 0.75 GB and 1-10 s at 0.25 deg, the same for every field; evaluate frees it when its
# spectra are done (release_tables)
@functools.lru_cache(maxsize=1)
def _weighted_legendre(mmax: int, lmax: int, nlat: int, kind: str) -> np.ndarray:
    """(mmax, lmax, nlat) w_j P_lm(x_j): the orthonormal associated Legendre functions (2 pi int
    P_lm^2 dx = 1) at the grid's colatitudes times its quadrature weights (summing to 2). Read-only:
    it is shared between calls."""
    colats, weights = latitude_quadrature(nlat, kind)
    legendre = normalized_legendre(mmax, lmax, np.cos(colats))
    legendre *= weights  # in place: the table alone is 0.75 GB at 0.25 deg
    legendre.flags.writeable = False
    return legendre


def release_tables() -> None:
    """Free the cached Legendre table (``_weighted_legendre``): 0.75 GB at 0.25 deg."""
    _weighted_legendre.cache_clear()


def _squared(units: str | None, times: str = "") -> str:
    if not units:
        return times or "1"
    squared = f"({units})**2"
    return f"{times} {squared}" if times else squared


def spectra(
    forecast: xr.DataArray,
    truth: xr.DataArray,
    band_deg: tuple[float, float] = DEFAULT_BAND_DEG,
    member_dim: str | None = None,
) -> xr.Dataset:
    """Spectra of a forecast and of its truth, averaged over initialization times (and an
    ensemble's members: the mean power of the members, not the power of their mean). A field with
    a NaN or inf (any time or member) makes the average NaN: the caller leaves such fields out.

    Both fields may hold their dims in any order (WeatherBench2 stores (..., longitude, latitude)):
    they are put in the spectra's order ``(..., latitude, longitude)`` first.

    Args:
        forecast: (time, lead_time, [member_dim,] [level,] latitude, longitude) forecast field.
        truth: the verifying truth aligned with ``forecast`` (its dims and coordinates, without
            ``member_dim``).
        band_deg: |latitude| band of the zonal spectrum.
        member_dim: the forecast's ensemble dim, averaged over; None for a deterministic forecast.

    Returns:
        Dataset with ``sh_power`` (source, lead_time, [level,] degree) and ``zonal_power``
        (source, lead_time, [level,] frequency), source = ["forecast", "truth"]; coordinates
        ``degree_wavelength`` and ``zonal_wavelength`` (m).
    """
    dims = [d for d in forecast.dims if d != member_dim]
    if {"latitude", "longitude"} <= set(dims) and set(dims) == set(truth.dims):
        forecast = forecast.transpose(..., "latitude", "longitude")
        dims = [d for d in forecast.dims if d != member_dim]
        truth = truth.transpose(*dims)
    sizes = {d: forecast.sizes[d] for d in dims}
    if tuple(dims) != truth.dims or tuple(sizes.values()) != truth.shape:
        raise UserError(f"forecast {dict(forecast.sizes)} and truth {dict(truth.sizes)} must be aligned")
    sources = []
    for source in (forecast, truth):
        averaged = [d for d in ("time", member_dim) if d in source.dims]
        # two wavelength coordinates in one dataset: named by the axis they belong to
        # skipna=False: a member or time of NaN power makes the mean NaN, not the mean of the others in silence
        sh = spherical_harmonic_power(source).mean(averaged, skipna=False).rename(wavelength="degree_wavelength")
        zonal = zonal_spectrum_band(zonal_energy_spectrum(source), band_deg).mean(averaged, skipna=False)
        zonal = zonal.rename(wavelength="zonal_wavelength")
        sources.append(xr.Dataset({"sh_power": sh, "zonal_power": zonal}))
    result = xr.concat(sources, dim="source", coords="minimal", compat="override")
    return result.assign_coords(source=["forecast", "truth"])
