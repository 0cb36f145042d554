"""log(quadrature weight) per key, less the largest: the additive logit bias that turns softmax attention into
the quadrature of eqs. (26)/(27) of the attention paper.

Pure functions: layers keep the result as a buffer (``s2forecast.nn``), the functional ops
compute it per call (a log of nlat numbers)."""

import torch

from s2forecast.geometry import Grid


def log_row_weights(grid: Grid, device, dtype) -> torch.Tensor:
    """(nlat,) log quadrature weight of each latitude row (weights depend on the row only), less
    the largest: 0 at the equator's rows. A softmax does not see a constant; a bias made of it in
    bf16 keeps its resolution: log w itself rounded to bf16 made bf16 global attention at 33x64
    1.04e-2 off (relative L2), shifted 4.4e-3, where rounding its inputs and output alone gives
    4.0e-3 (tests/ops/test_attention_ops.py::test_bf16_error_is_that_of_rounding_the_inputs_and_output)."""
    log_w = torch.log(grid.quadrature_weights[:, 0].to(torch.float64))
    return (log_w - log_w.max()).to(device=device, dtype=dtype)


def bias_dtype(dtype: torch.dtype) -> torch.dtype:
    """Precision in which the log-weight bias is formed: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def log_quadrature_weights(grid: Grid, device, dtype) -> torch.Tensor:
    """(nlat*nlon,) log quadrature weight of every grid point, flattened row-major."""
    return log_row_weights(grid, device, dtype).repeat_interleave(grid.nlon)
