"""The LightningModule that trains and scores a ``Forecaster`` autoregressively.

The model itself (network, normalization, one step, the rollout generator) is
``s2forecast.models.Forecaster``, a plain nn.Module that inference loads without Lightning;
this module owns one and adds the loss, the schedules, the optimizer and logging. Training rolls
out ``rollout`` steps through ``Forecaster.rollout`` and averages the loss over them;
``rollout`` follows a schedule (``rollout_start``, +1 every ``rollout_every_epochs`` epochs, up
to ``rollout_max``), stored in checkpoints.

Loss: mean over steps, channels and points of w_c * q_i * (prediction - target)^2 in
normalized units, q = the grid's quadrature weights normalized to mean 1 (the integral over
the sphere), w_c = per-variable weight x level weight (pressure / 1000 hPa by default, as in
anemoi and makani), normalized to mean 1. Validation and test log per channel the
latitude-weighted RMSE (WeatherBench2 cell areas) in physical units at every lead.
"""

import inspect
import math
import warnings

import numpy as np
import pytorch_lightning as pl
import torch

from s2forecast.data.fields import Batch
from s2forecast.models import ARCHITECTURES
from s2forecast.models.checkpoint import read_checkpoint
from s2forecast.models.data_spec import DataSpec
from s2forecast.models.forecaster import Forecaster, checkpoint_static_fields, forecaster_weights
from s2forecast.models.network_options import warn_inert_options
from s2forecast.models.spherical_transformer import grid_bound_embedding
from s2forecast.nn import SphericalHarmonicAnalysis
from s2forecast.training.checkpoints import (
    count_finished_epoch,
    end_epoch_of_last_batch,
    refuse_a_cut_optimizer_step,
    reopen_cut_epoch,
)
from s2forecast.training.datamodule import ResumableLoader
from s2forecast.training.losses import ensemble_loss, spectral_crps, weighted_mse
from s2forecast.user_errors import UserError

LEVEL_WEIGHTINGS = ("pressure", "none")
LOSSES = ("mse", "crps")


def data_info(datamodule) -> dict:
    """What a ForecastModule needs to know about its data (a ``DataSpec``), as plain JSON-able
    values (``DataSpec.to_dict``: saved in the checkpoint's hyperparameters, so a checkpoint runs
    without the store, and printed configs stay plain)."""
    stats, static = datamodule.stats, datamodule.static_stats
    spec = datamodule.spec
    return DataSpec(
        channels=tuple(datamodule.channels),
        static_channels=tuple(datamodule.static_channels),
        forcing_channels=tuple(datamodule.forcing_channels),
        grid=datamodule.grid,
        history=spec.history,
        step_hours=spec.step_hours,
        rollout_steps=spec.rollout,
        mean=tuple(stats.mean.tolist()),
        std=tuple(stats.std.tolist()),
        tendency_std=tuple(stats.tendency_std.tolist()),
        static_mean=None if static is None else tuple(static.mean.tolist()),
        static_std=None if static is None else tuple(static.std.tolist()),
        store=datamodule.store,
    ).to_dict()


def current_hparams(hparams: dict) -> dict:
    """A checkpoint's ForecastModule hyper-parameters in this version's names: ``ensemble_size``
    (before issue 26) is ``members``."""
    hparams = dict(hparams)
    if "ensemble_size" in hparams:
        hparams["members"] = hparams.pop("ensemble_size")
    return hparams


def option_problems(
    network, data, level_weighting, rollout_start, rollout_max, lr, weight_decay, warmup_steps, min_lr_ratio,
    members, loss, crps_mse_weight, crps_alpha=1.0, crps_spectral_weight=0.0, variable_weights=None,
    rollout_every_epochs=0,
) -> list[str]:  # fmt: skip
    """What is wrong with ForecastModule's options (its arguments of the same names), each problem
    naming its configuration key (``model.lr``) and the fix; empty when nothing is."""
    problems = []
    if loss not in LOSSES:
        problems.append(f"model.loss must be one of {LOSSES}, got {loss!r}")
    elif loss == "crps" and members < 2:
        problems.append(f"model.loss 'crps' needs model.members >= 2, got {members}")
    elif loss == "mse" and members != 1:
        problems.append(f"model.loss 'mse' trains one member; set model.members: 1 (got {members}) or model.loss: crps")
    if loss == "crps" and not (network or {}).get("noise_channels"):
        problems.append(
            "model.loss 'crps' needs a stochastic network: set model.network.noise_channels (e.g. 8), or the members "
            "would be identical"
        )
    if not 0 <= crps_mse_weight < math.inf:  # infinite: trained until the attention refused NaN, naming no key
        problems.append(f"model.crps_mse_weight must be a finite number >= 0, got {crps_mse_weight}")
    if not 0 <= crps_alpha <= 1:
        problems.append(f"model.crps_alpha must be in [0, 1] (1: the fair CRPS, 0: the standard one), got {crps_alpha}")
    if not 0 <= crps_spectral_weight < math.inf:
        problems.append(
            f"model.crps_spectral_weight must be a finite number >= 0 (0: no spectral CRPS), got {crps_spectral_weight}"
        )
    if data is None:
        problems.append("ForecastModule needs data=data_info(datamodule) (the CLI links it from --data)")
    else:
        problems += weight_problems(variable_weights or {}, data.get("channels", ()))
    if not 0 < lr < math.inf:
        problems.append(f"model.lr must be a finite positive number, got {lr}")
    if not 0 <= weight_decay < math.inf:
        problems.append(f"model.weight_decay must be a finite number >= 0, got {weight_decay}")
    if not 0 <= min_lr_ratio <= 1:
        problems.append(f"model.min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
    if warmup_steps < 0:
        problems.append(f"model.warmup_steps must be >= 0, got {warmup_steps}")
    if level_weighting not in LEVEL_WEIGHTINGS:
        problems.append(f"model.level_weighting must be one of {LEVEL_WEIGHTINGS}, got {level_weighting!r}")
    counts = {"rollout_start": rollout_start, "rollout_max": rollout_max, "rollout_every_epochs": rollout_every_epochs}
    fractional = [f"model.{k} must be a whole number, got {v!r}" for k, v in counts.items() if not _integer(v)]
    problems += fractional  # (a float 2.0 made the rollout 2.0 steps: range() fails at the first epoch)
    if not fractional and not 1 <= rollout_start <= rollout_max:
        problems.append(f"need 1 <= model.rollout_start <= model.rollout_max, got {rollout_start} and {rollout_max}")
    if not fractional and not rollout_every_epochs >= 0:
        problems.append(
            f"model.rollout_every_epochs must be >= 0 (epochs between one more rollout step; 0: the rollout stays at "
            f"rollout_start), got {rollout_every_epochs!r}"
        )
    return problems


def weight_problems(variable_weights: dict, channels) -> list[str]:
    """What is wrong with ``model.variable_weights`` for data of ``channels`` ("temperature/850"):
    names of no variable (a misspelt name would be ignored), weights that are negative, not
    finite or not numbers, or none > 0 (the loss would be 0 / 0)."""
    known = list(dict.fromkeys(channel.partition("/")[0] for channel in channels))
    problems = []
    unknown = [name for name in variable_weights if name not in known]
    if unknown:
        problems.append(f"model.variable_weights names {unknown}, not variables of the data; its variables are {known}")
    bad = {name: w for name, w in variable_weights.items() if not (_number(w) and math.isfinite(w) and w >= 0)}
    if bad:
        problems.append(f"model.variable_weights must be finite numbers >= 0, got {bad}")
    elif known and all(variable_weights.get(name, 1.0) == 0 for name in known):
        problems.append(
            "model.variable_weights gives every variable weight 0: the loss would be 0 / 0; give at least one variable "
            "a weight > 0 (unlisted variables weigh 1)"
        )
    return problems


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# what a fine-tuning config puts in model.init_from: refused until --model.init_from names a checkpoint
INIT_FROM_REQUIRED = "required"


def load_network_weights(forecaster: Forecaster, checkpoint: str) -> None:
    """Copy the network weights of ``checkpoint`` into ``forecaster`` (fine-tuning).

    Parameters must all be there with the same shapes; buffers that differ in shape are the
    grid's precomputed structure (DISCO filters, neighborhoods) and stay this grid's.

    Raises:
        ValueError: another architecture, other channels or options (names the first weights
            that differ), or not a checkpoint of s2forecast fit.
    """
    state = read_checkpoint(checkpoint)
    if "state_dict" not in state:
        raise UserError(f"--model.init_from {checkpoint} is not a checkpoint of s2forecast fit (no state_dict)")
    _check_same_network(forecaster, state.get("hyper_parameters") or {}, checkpoint)
    theirs = forecaster_weights(state["state_dict"])
    ours = forecaster.state_dict()
    parameters = {name for name, _ in forecaster.named_parameters()}
    extra = sorted(name for name in theirs if name.startswith("net.") and name not in ours)
    if extra:  # a deeper network's: its layers would be dropped without a word
        raise UserError(
            f"--model.init_from {checkpoint} does not fit this model: it has weight {extra[0]} this model lacks "
            f"({len(extra)} such); fine-tuning needs the same architecture, network options and channels"
        )
    missing = sorted(name for name in parameters if name not in theirs)
    differ = sorted(name for name in parameters if name in theirs and theirs[name].shape != ours[name].shape)
    if missing or differ:
        name = (missing or differ)[0]
        detail = "is missing" if missing else f"has shape {tuple(theirs[name].shape)}, not {tuple(ours[name].shape)}"
        raise UserError(
            f"--model.init_from {checkpoint} does not fit this model: weight {name} {detail} ({len(missing)} missing, "
            f"{len(differ)} of other shapes); fine-tuning needs the same architecture, network options and channels"
        )
    load = {name: value for name, value in theirs.items() if name in ours and value.shape == ours[name].shape}
    forecaster.load_state_dict(load, strict=False)


def _check_same_network(forecaster: Forecaster, hparams: dict, checkpoint: str) -> None:
    """The checkpoint's architecture, residual and network options (defaults filled in) are this
    model's; on another grid only without a grid-bound position embedding. Weights of the same
    shapes under other options (heads, activation, attention kind, scale factor) would load into
    another network silently."""
    if not hparams.get("network") and not hparams.get("architecture"):
        return  # a checkpoint without hyper-parameters: the weights' names and shapes alone are checked
    architecture = hparams.get("architecture", "spherical")
    if architecture != forecaster.architecture or hparams.get("residual", True) != forecaster.residual:
        raise UserError(
            f"--model.init_from {checkpoint} is a {architecture!r} network (residual {hparams.get('residual', True)}); "
            f"this model is {forecaster.architecture!r} (residual {forecaster.residual}): fine-tuning needs the same "
            "architecture, network options and channels"
        )
    cls = ARCHITECTURES[architecture]
    defaults = {name: p.default for name, p in inspect.signature(cls).parameters.items()
                if p.default is not inspect.Parameter.empty}  # fmt: skip
    theirs, ours = {**defaults, **(hparams.get("network") or {})}, {**defaults, **forecaster.network_options}
    differ = sorted(name for name in set(theirs) | set(ours) if theirs.get(name) != ours.get(name))
    if differ:
        name = differ[0]
        raise UserError(
            f"--model.init_from {checkpoint} has network option {name}={theirs.get(name)!r}, this model "
            f"{ours.get(name)!r} ({len(differ)} option(s) differ: {differ}); fine-tuning needs the same architecture, "
            "network options and channels"
        )
    spec = DataSpec.from_dict(hparams["data"]) if hparams.get("data") else forecaster.data
    for field in ("channels", "static_channels", "forcing_channels", "history"):
        # the encoder's and decoder's weights are per channel and in order: another order (or other channels
        # of the same number) has the same shapes and would load onto the wrong fields in silence
        trained, here = getattr(spec, field), getattr(forecaster.data, field)
        if trained != here:
            raise UserError(
                f"--model.init_from {checkpoint} was trained with {field.replace('_', ' ')} {_listed(trained)}, this "
                f"run has {_listed(here)}: its weights are per channel, in order; fine-tuning needs the same channels "
                "in the same order (e.g. data.init_args.variables, levels)"
            )
    trained_on = spec.grid
    bound = grid_bound_embedding(ours.get("position_embedding"), ours.get("position_embedding_options"))
    if bound and trained_on != forecaster.grid:
        raise UserError(
            f"--model.init_from {checkpoint}: {bound.removeprefix('its ')} {trained_on}, and this run's grid is "
            f"{forecaster.grid}: fine-tune it on its own grid, or train a model with a grid-free embedding (sprepe "
            "without a learnable mask, or none) for another"
        )


def _listed(value) -> str:
    return f"[{', '.join(map(str, value))}]" if isinstance(value, tuple) else str(value)


class ForecastModule(pl.LightningModule):
    """Autoregressive training and scoring of a network from ``s2forecast.models``.

    Args:
        architecture: "spherical" (``SphericalTransformer``) or "planar" (``PlanarTransformer``).
        network: keyword arguments of the network (embed_dim, num_layers, attention, ...).
        data: ``data_info(datamodule)``; the CLI links it from the DataModule.
        residual: predict the tendency (default) rather than the next state.
        variable_weights: loss weight per variable name (default 1): finite, >= 0, not all 0.
        level_weighting: "pressure" (weight pressure-level channels by level / 1000 hPa) or "none".
        rollout_start, rollout_every_epochs, rollout_max: the training rollout schedule.
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW with linear warm-up and cosine
            decay to min_lr_ratio * lr over the run's optimizer steps.
        members: ensemble members per sample trained together (a stochastic network:
            ``network.noise_channels`` > 0); members are a batch dimension on each rank.
        loss: "mse" (deterministic) or "crps" (the almost-fair ensemble CRPS over ``members``
            members, area- and channel-weighted as the MSE: ``training.losses``). With
            ``rollout_max`` > 1 the members are rolled out independently over the steps and the
            CRPS is averaged over them, as the MSE (multi-step CRPS fine-tuning).
        crps_mse_weight: with "crps", add this times the MSE of the ensemble mean.
        crps_alpha: with "crps", AIFS-CRPS's alpha in [0, 1]: alpha x fair CRPS + (1 - alpha) x
            standard CRPS (1: the fair CRPS; ``losses.almost_fair_crps``).
        crps_spectral_weight: with "crps", add this times the CRPS of the fields' spherical
            harmonic coefficients (the data grid's own quadrature; ``losses.spectral_crps``).
        init_from: fine-tuning: start from the network weights of this checkpoint (read
            weights-only), with this run's data, statistics, schedule and optimizer; the grid may
            differ where the network's weights do not depend on it (S2 models without grid-bound
            position embeddings). ``--ckpt_path`` instead resumes a run exactly. ``"required"``
            (a fine-tuning config's value) is refused: the checkpoint must be given.
    """

    def __init__(
        self,
        architecture: str = "spherical",
        network: dict[str, int | float | bool | str | list | dict | None] | None = None,
        data: dict | None = None,
        residual: bool = True,
        variable_weights: dict[str, float] | None = None,
        level_weighting: str = "pressure",
        rollout_start: int = 1,
        rollout_every_epochs: int = 0,
        rollout_max: int = 1,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.0,
        init_from: str | None = None,
        members: int = 1,
        loss: str = "mse",
        crps_mse_weight: float = 0.0,
        crps_alpha: float = 1.0,
        crps_spectral_weight: float = 0.0,
    ):
        super().__init__()
        problems = option_problems(
            network, data, level_weighting, rollout_start, rollout_max, lr, weight_decay, warmup_steps, min_lr_ratio,
            members, loss, crps_mse_weight, crps_alpha, crps_spectral_weight, variable_weights, rollout_every_epochs,
        )  # fmt: skip
        if problems:  # all at once, each naming its key: a run costs seconds before it gets here
            raise UserError("; ".join(problems))
        if init_from == INIT_FROM_REQUIRED:  # a fine-tuning config given without its checkpoint
            raise UserError(
                "model.init_from is required by this config (fine-tuning): pass --model.init_from CKPT, a "
                "checkpoint of the model to fine-tune (without it this run would train from scratch)"
            )
        self.save_hyperparameters()
        try:
            self.forecaster = Forecaster(architecture, network, DataSpec.from_dict(data), residual)
            warn_inert_options(architecture, ARCHITECTURES[architecture], network or {})
        except UserError as error:  # the network's own checks: name the options they are about
            raise UserError(f"model.architecture {architecture!r} with model.network {network}: {error}") from None
        if loss == "mse":  # the CRPS loss's weights: a config that sets them believes it changed something
            given = {"crps_mse_weight": crps_mse_weight, "crps_alpha": crps_alpha,
                     "crps_spectral_weight": crps_spectral_weight}  # fmt: skip
            defaults = inspect.signature(ForecastModule.__init__).parameters
            for name, value in given.items():
                if value != defaults[name].default:
                    warnings.warn(
                        f"model.{name} {value} has no effect: model.loss is 'mse' (it weights the CRPS loss); drop it "
                        "or set model.loss: crps",
                        UserWarning,
                        stacklevel=1,  # ours, printed as one line (stacklevel 2 is Lightning's cli.py)
                    )
        if init_from is not None:
            load_network_weights(self.forecaster, init_from)
        self.grid, self.channels = self.forecaster.grid, self.forecaster.channels
        quadrature = self.grid.quadrature_weights.float()
        self.register_buffer("quadrature", quadrature / quadrature.mean(), persistent=False)
        area = self.grid.area_weights.float()[:, None].expand(self.grid.shape)
        self.register_buffer("area", area / area.mean(), persistent=False)
        self.register_buffer("channel_weights", self._channel_weights(), persistent=False)
        # its Legendre table (376 MB at 0.25°) only where the spectral CRPS is computed
        self.analysis = SphericalHarmonicAnalysis(self.grid) if loss == "crps" and crps_spectral_weight else None
        self.rollout = rollout_start
        self._mse_sums: dict[str, list] = {}

    def _channel_weights(self) -> torch.Tensor:
        variable_weights = self.hparams.variable_weights or {}
        weights = []
        for channel in self.channels:
            name, _, level = channel.partition("/")
            weight = float(variable_weights.get(name, 1.0))
            if level and self.hparams.level_weighting == "pressure":
                weight *= float(level) / 1000.0
            weights.append(weight)
        weights = torch.tensor(weights)
        return weights / weights.mean()

    # --- the model ------------------------------------------------------------------------
    @property
    def net(self) -> torch.nn.Module:
        return self.forecaster.net

    def forward(self, batch: Batch, steps: int) -> torch.Tensor:
        """(batch, steps, channels, nlat, nlon) normalized predictions for leads 1..steps."""
        return torch.stack(list(self.forecaster.rollout(batch.inputs, batch.static, batch.forcings, steps)), dim=1)

    def ensemble(self, batch: Batch, steps: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(batch, members, steps, channels, nlat, nlon): each sample rolled out by every member
        (``Forecaster.ensemble_rollout``; each member draws its own noise, from ``generator``)."""
        leads = self.forecaster.ensemble_rollout(
            batch.inputs, batch.static, batch.forcings, steps, self.hparams.members, generator
        )
        return torch.stack(list(leads), dim=2)

    def noise_generator(self, index: int, stage: str = "train") -> torch.Generator:
        """The random numbers of model noise, from the run's seed (``seed_everything``), the stage and
        the optimizer step, not from the global random state: a run resumed from a checkpoint draws
        what the uninterrupted run drew (the global state restarts at the seed), in training and in
        validation. Training: a step's noise, ``index`` its batch (the micro-batch within the step),
        with the rank; validation and test: a sample's, ``index`` its position in the split, the
        same at every step, so that epochs are scored alike and ``validate`` of a checkpoint (which
        does not restore the step) scores as the fit did."""
        accumulate = self.trainer.accumulate_grad_batches if self._trainer is not None else 1
        index = index % accumulate if stage == "train" else index
        stages = ("train", "val", "test")
        rank = self.global_rank if stage == "train" else 0
        step = self.global_step if stage == "train" else 0
        key = [torch.initial_seed(), stages.index(stage), step, index, rank]
        seed = int(np.random.SeedSequence(key).generate_state(1, np.uint64)[0]) & (2**63 - 1)
        return torch.Generator(self.device).manual_seed(seed)

    @property
    def probabilistic(self) -> bool:
        """Trained as an ensemble (the CRPS loss)."""
        return self.hparams.loss == "crps"

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Checkpoints of before the Forecaster held the network as ``net.*``: remapped."""
        remapped = {("forecaster." + k if k.startswith("net.") else k): v for k, v in state_dict.items()}
        return super().load_state_dict(remapped, strict=strict, assign=assign)

    def loss(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Quadrature- and channel-weighted MSE of (batch, steps, channels, nlat, nlon) tensors, or
        for an ensemble model the almost-fair CRPS of (batch, members, steps, ...) against the
        target (plus its spectral CRPS and its mean's MSE, as configured)."""
        weights = self.channel_weights[:, None, None] * self.quadrature
        if not self.probabilistic:
            return weighted_mse(prediction, target, weights)
        hparams = self.hparams
        loss = ensemble_loss(prediction, target, weights, hparams.crps_mse_weight, hparams.crps_alpha)
        if self.analysis is not None:
            spectral = spectral_crps(prediction, target, self.analysis, self.channel_weights, hparams.crps_alpha)
            loss = loss + hparams.crps_spectral_weight * spectral
        return loss

    # --- Lightning hooks ----------------------------------------------------------------
    def on_train_epoch_start(self) -> None:
        every = self.hparams.rollout_every_epochs
        increase = self.current_epoch // every if every > 0 else 0
        self.rollout = min(self.hparams.rollout_max, self.hparams.rollout_start + increase)

    def setup(self, stage: str) -> None:
        """Before the first batch: the training rollout needs as many targets as rollout_max."""
        targets = self.forecaster.data.rollout_steps
        if stage == "fit" and targets < self.hparams.rollout_max:
            raise UserError(
                f"model.rollout_max is {self.hparams.rollout_max} steps but the data's rollout_steps is {targets}: "
                "raise data rollout_steps to at least rollout_max, or lower rollout_max"
            )
        start, most = self.hparams.rollout_start, self.hparams.rollout_max
        if stage == "fit" and most > start and not self.hparams.rollout_every_epochs:
            warnings.warn(
                f"model.rollout_max {most} is never reached: model.rollout_every_epochs is 0, so training rolls out "
                f"rollout_start {start} step(s) throughout; set rollout_every_epochs (epochs between one more step), "
                f"or rollout_max {start}",
                stacklevel=1,
            )

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        if self.probabilistic:
            prediction = self.ensemble(batch, self.rollout, self.noise_generator(batch_idx))
        else:
            prediction = self(batch, self.rollout)
        loss = self.loss(prediction, batch.targets[:, : self.rollout])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch.inputs))
        self.log("train/rollout", float(self.rollout), batch_size=len(batch.inputs))
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._score(batch, batch_idx, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._score(batch, batch_idx, "test")

    def predict_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        """Physical-unit forecasts (batch, steps, channels, nlat, nlon) for every target."""
        return self.to_physical(self(batch, batch.targets.shape[1]))

    def _score(self, batch: Batch, batch_idx: int, stage: str) -> None:
        steps = batch.targets.shape[1]
        # under DDP the last batches of a process may repeat samples of another one (padding):
        # only the leading ``counted`` rows are scored
        positions, counted = self._split_positions(stage, batch_idx, len(batch.inputs))
        if self.probabilistic:  # each sample's noise from its place in the split: the same scores whatever
            # the number of processes and the batch size
            generators = [self.noise_generator(position, stage) for position in positions]
            prediction = self.ensemble(batch, steps, generators)
        else:
            prediction = self(batch, steps)
        prediction, targets = prediction[:counted], batch.targets[:counted]
        # the loss is a mean over the batch: times its rows, a sum over the samples
        loss = self.loss(prediction, targets).detach() * counted if counted else torch.zeros((), device=self.device)
        if self.probabilistic:
            prediction = prediction.mean(dim=1)  # RMSE of the ensemble mean
        error = (self.to_physical(prediction) - self.to_physical(targets)).square()
        mse = (error * self.area).mean(dim=(-2, -1)).sum(dim=0)  # (steps, channels), summed over the batch
        sums = self._mse_sums.setdefault(stage, [torch.zeros_like(mse), torch.zeros_like(loss), 0])
        sums[0] += mse.detach()
        sums[1] += loss.to(sums[1].dtype)
        sums[2] += counted

    def _split_positions(self, stage: str, batch_idx: int, rows: int) -> tuple[list[int], int]:
        """The positions in the split of the ``rows`` samples of a validation or test batch, and how
        many of them (the leading ones) are not DDP's padding (``InOrderShardSampler``)."""
        loader = self.trainer.val_dataloaders if stage == "val" else self.trainer.test_dataloaders
        sampler, size = getattr(loader, "sampler", None), getattr(loader, "batch_size", None) or rows
        if not hasattr(sampler, "counted_rows"):  # one process: the batches in the split's order
            return list(range(batch_idx * size, batch_idx * size + rows)), rows
        return sampler.positions(batch_idx, size, rows), sampler.counted_rows(batch_idx, size, rows)

    def _log_scores(self, stage: str) -> None:
        """The loss and WeatherBench2's RMSE (sqrt of the mean over all samples of the area-weighted
        MSE, per lead) of the epoch's samples, each counted once whatever the number of processes."""
        if stage not in self._mse_sums:
            return
        total, loss, count = self._mse_sums.pop(stage)
        reduce = self.trainer.strategy.reduce
        total, loss = reduce(total, reduce_op="sum"), reduce(loss, reduce_op="sum")
        count = reduce(torch.tensor(float(count), device=total.device), reduce_op="sum")
        # the same value in every process: logged by each (ModelCheckpoint and EarlyStopping monitor
        # it in each), the mean over processes a no-op
        self.log(f"{stage}/loss", loss / count, prog_bar=True, sync_dist=True)
        rmse = (total / count).sqrt()
        for k in range(rmse.shape[0]):
            for c, channel in enumerate(self.channels):
                # rank_zero_only: a value the processes already share needs no reduction (sync_dist
                # then only quiets Lightning's advice to reduce it)
                self.log(f"{stage}/rmse/{channel}/step{k + 1}", rmse[k, c], rank_zero_only=True, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        self._log_scores("val")

    def on_test_epoch_end(self) -> None:
        self._log_scores("test")

    def _steps_of_this_fit(self) -> int:
        """The optimizer steps the learning-rate plan spans: Lightning's estimate (max_epochs x the
        epoch's steps, or max_steps), but for a resumed fit the steps taken plus those left at this fit's
        batch size (``ResumableLoader.resumed_batches_left``): the estimate counts every epoch at the new
        size, and after a change of batch size the decay ended early (the last steps at lr 0) or never
        (a review found it). Equal to the estimate for a resume without change."""
        trainer = self.trainer
        estimate = max(1, int(trainer.estimated_stepping_batches))
        done, epochs, loader = trainer.global_step, trainer.max_epochs, trainer.train_dataloader
        if done == 0 or epochs is None or epochs < 0 or not isinstance(loader, ResumableLoader):
            return estimate
        accumulate = trainer.accumulate_grad_batches
        per_epoch = math.ceil(trainer.num_training_batches / accumulate)
        left, epoch = loader.resumed_batches_left, trainer.current_epoch  # mid-epoch: the epoch it stopped in
        if left is None:  # from an epoch's start
            rest = (epochs - epoch) * per_epoch
        else:
            rest = math.ceil(left / accumulate) + (epochs - epoch - 1) * per_epoch
        total = done + max(0, rest)
        return max(1, min(total, trainer.max_steps) if trainer.max_steps != -1 else total)

    def to_physical(self, normalized: torch.Tensor) -> torch.Tensor:
        return self.forecaster.to_physical(normalized)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rollout"] = self.rollout
        checkpoint["static_fields"] = self._static_fields()
        if self._trainer is not None:  # whether it was saved inside an optimizer step (refuse_a_cut_optimizer_step)
            checkpoint["accumulate_grad_batches"] = self.trainer.accumulate_grad_batches

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if self._trainer is not None and self._trainer.state.fn == "fit":
            refuse_a_cut_optimizer_step(checkpoint)
        reopen_cut_epoch(checkpoint)  # before Lightning restores its loops from it
        end_epoch_of_last_batch(checkpoint)
        count_finished_epoch(checkpoint)
        self._drop_an_average_no_longer_kept(checkpoint)
        self.rollout = checkpoint.get("rollout", self.hparams.rollout_start)
        self.forecaster.static_fields = checkpoint_static_fields(checkpoint, self.forecaster)

    def _drop_an_average_no_longer_kept(self, checkpoint: dict) -> None:
        """A fit resumed from a checkpoint of EMAWeightAveraging without that callback goes on from the
        trained weights (``current_model_state``), which its optimizer state belongs to: Lightning
        loaded ``state_dict``, the average, and trained on from it in silence. Before Lightning loads
        the weights, which it does after this hook."""
        from pytorch_lightning.callbacks import WeightAveraging

        trainer = self._trainer
        if "current_model_state" not in checkpoint or trainer is None or trainer.state.fn != "fit":
            return
        if any(isinstance(callback, WeightAveraging) for callback in trainer.callbacks):
            return  # it restores both itself
        checkpoint["state_dict"] = checkpoint.pop("current_model_state")
        warnings.warn(
            "the checkpoint was trained with EMAWeightAveraging and this fit has no such callback: it goes on from "
            "the trained weights, and the average is dropped; add --trainer.callbacks+=s2forecast.training.callbacks."
            "EMAWeightAveraging to keep averaging",
            UserWarning,
            stacklevel=2,
        )

    def _static_fields(self) -> dict[str, torch.Tensor]:
        """The static fields the model trains with, physical units, for the checkpoint (so a
        forecast needs no store that has them); read once from the DataModule."""
        names = self.forecaster.data.static_channels
        if not self.forecaster.static_fields and names:
            datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
            if datamodule is not None and hasattr(datamodule, "physical_static_fields"):
                fields = datamodule.physical_static_fields()
                self.forecaster.static_fields = {name: torch.from_numpy(fields[name]) for name in names}
        return dict(self.forecaster.static_fields)

    def configure_optimizers(self):
        decay, no_decay = [], []
        for name, parameter in self.named_parameters():
            if parameter.requires_grad:
                (no_decay if parameter.ndim < 2 or "norm" in name else decay).append(parameter)
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.hparams.lr,
            betas=(0.9, 0.95),
        )
        steps = self.trainer.estimated_stepping_batches if self._trainer is not None else 0
        if steps == float("inf"):  # max_epochs -1 and no max_steps: "until stopped"
            raise UserError(
                "trainer.max_epochs -1 without trainer.max_steps trains until stopped, but the learning rate's cosine "
                "decay runs over the fit's optimizer steps: set trainer.max_steps (or a finite trainer.max_epochs)"
            )
        steps = int(steps)
        self._planned_steps = max(1, steps)  # a resumed fit's, once its progress is restored: on_train_start
        # not capped at the fit's length: a fit stopped inside its warm-up and continued with a
        # larger max_steps must follow the one plan (a cap squeezed the ramp into the first fit)
        warmup = self.hparams.warmup_steps
        if 0 < steps <= warmup:  # (0 steps: fit says it trained none)
            warnings.warn(
                f"model.warmup_steps {warmup} is not below this fit's {steps} optimizer steps: the learning rate "
                f"ends the fit still rising, at {steps / (warmup + 1):.2g} of model.lr; lower warmup_steps unless a "
                "longer fit will continue this one",
                stacklevel=1,
            )
        floor = self.hparams.min_lr_ratio

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / (warmup + 1)
            progress = min(1.0, (step - warmup) / max(1, self._planned_steps - warmup))
            return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_train_start(self) -> None:
        """The learning rate of the first step from this fit's schedule. A resumed optimizer holds
        the rate the previous fit's plan set after its last step (0.0 at the end of a decay that
        a larger max_steps now extends); the scheduler only sets the next one after a step.
        And no validation (nor its checkpoint) inside an optimizer step."""
        accumulate, every = self.trainer.accumulate_grad_batches, self.trainer.val_check_batch
        fraction = self.trainer.val_check_interval
        cut = isinstance(fraction, float) and every < self.trainer.num_training_batches and every % accumulate
        if cut and self.trainer.enable_validation:
            # (an integer interval is refused as the trainer is made: training.cli)
            raise UserError(
                f"trainer.val_check_interval {fraction:g} validates after batch {every} of an epoch's "
                f"{self.trainer.num_training_batches}, inside an optimizer step of trainer.accumulate_grad_batches "
                f"{accumulate}: its checkpoints could not be resumed; use an integer val_check_interval, a multiple of "
                f"{accumulate}"
            )
        self._planned_steps = self._steps_of_this_fit()
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
                groups = scheduler.optimizer.param_groups
                for group, base, factor in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
                    group["lr"] = base * factor(scheduler.last_epoch)
