"""Lightning DataModules for ERA5 and shallow-water stores, on one streaming core.

Both build ``FieldDataset`` splits from a store written by ``s2forecast convert-era5`` or
``s2forecast generate-swe`` (with ``s2forecast stats`` run on it) and serve ``Batch``es:
shuffled training batches, one store handle per worker, pinned memory. The training loader
resumes exactly where a checkpoint left it, mid-epoch included (``ResumableLoader``).
"""

import math
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch

from s2forecast.data.fields import NAN_POLICIES, FieldDataset, SampleSpec, SplitRangeError, check_read_threads
from s2forecast.data.swe import SWE_VARIABLES
from s2forecast.training.splits import check_overlap
from s2forecast.urls import hidden_values, is_url, redact
from s2forecast.user_errors import UserError

ERA5_SURFACE = ("2m_temperature", "10m_u_component_of_wind", "10m_v_component_of_wind", "mean_sea_level_pressure")
ERA5_PRESSURE = ("geopotential", "temperature", "u_component_of_wind", "v_component_of_wind", "specific_humidity")
# chunks of a sample read at once by default (measured with scripts/bench_data.py; README)
READ_THREADS = 16
# the splits each Lightning stage reads
STAGE_SPLITS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("test",)}


class EpochShuffleSampler(torch.utils.data.DistributedSampler):
    """This process's share of a permutation drawn from (seed, epoch), resumable mid-epoch.

    Lightning calls ``set_epoch`` before every epoch, so every epoch's order depends only on
    the seed and the epoch; ``start`` (set by ``ResumableLoader`` on resume) skips the indices
    already served in this epoch, without reading them. A ``DistributedSampler`` so that under
    DDP Lightning uses it as it is rather than wrapping it (each of ``num_replicas`` processes
    gets every ``num_replicas``-th index of the padded permutation).
    """

    def __init__(self, dataset: torch.utils.data.Dataset, seed: int, num_replicas: int = 1, rank: int = 0):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        self.start = 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.start = 0  # a position within another epoch
        super().set_epoch(epoch)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(len(self.dataset), generator=generator).tolist()
        order = (order * math.ceil(self.total_size / len(order)))[: self.total_size]  # equal shares
        start, self.start = self.start, 0
        return iter(order[self.rank : self.total_size : self.num_replicas][start:])


class InOrderShardSampler(torch.utils.data.DistributedSampler):
    """This process's share of a validation or test split under DDP: every ``num_replicas``-th
    sample from ``rank``, in order. As ``DistributedSampler`` (which Lightning would put in), the
    shares are padded to equal length with the split's first samples: every process must run as
    many batches (DDP's forward and the epoch's reductions are collective). ``counted_rows`` tells
    the padding apart, so that the scores count each sample of the split once."""

    def __init__(self, dataset: torch.utils.data.Dataset, num_replicas: int = 1, rank: int = 0):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False, drop_last=False)

    def counted_rows(self, batch_index: int, batch_size: int, rows: int) -> int:
        """How many leading rows of batch ``batch_index`` (of ``rows`` rows) are this process's own
        samples; the rest are padding. The padding ends a share: its position j is padding when
        ``j * num_replicas + rank`` is past the split's last sample."""
        own = max(0, -(-(len(self.dataset) - self.rank) // self.num_replicas))
        return min(rows, max(0, own - batch_index * batch_size))

    def positions(self, batch_index: int, batch_size: int, rows: int) -> list[int]:
        """The positions in the split of the rows of batch ``batch_index``: a share's j-th sample is
        the split's ``j * num_replicas + rank``-th (past its end: padding)."""
        first = batch_index * batch_size
        return [j * self.num_replicas + self.rank for j in range(first, first + rows)]


class ResumableLoader(torch.utils.data.DataLoader):
    """The training DataLoader, with the state Lightning checkpoints: the sampler's epoch and how
    many batches of it this loader has served. Lightning saves the ``state_dict`` of training
    loaders that have one and loads it when it resumes, before the first batch; the resumed run
    then serves the rest of that epoch in the uninterrupted run's order.
    """

    first = 0  # the position in the sampler's current epoch this iteration started from (samples)
    served = 0  # batches of this iteration handed out
    counted = 0  # batches of the current epoch served before this iteration (a resumed one), as Lightning counts
    resumed_batches = 0  # ``counted`` of the epoch a checkpoint stopped in
    resumed_batches_left = None  # batches Lightning runs in the rest of that epoch (None: stopped at an epoch's end)

    def __iter__(self):
        # A generator, so the sampler draws at the first batch, after Lightning's set_epoch: on
        # resume Lightning calls iter() before set_epoch, and workers draw indices at once.
        self.first = self.sampler.start if isinstance(self.sampler, EpochShuffleSampler) else 0
        self.counted = self.resumed_batches if self.first else 0
        self.served = 0
        for batch in super().__iter__():
            self.served += 1
            yield batch

    def state_dict(self) -> dict:
        # in samples, not batches: a run resumed with a smaller batch_size goes on from the same sample
        # (in batches it skipped or repeated samples of the epoch)
        samples = min(self.first + self.served * self.batch_size, len(self.sampler))
        return {"epoch": getattr(self.sampler, "epoch", 0), "samples": samples, "batch_size": self.batch_size,
                "epoch_batches": self.counted + self.served, "ranks": getattr(self.sampler, "num_replicas", 1),
                **self._permuted()}  # fmt: skip

    def _permuted(self) -> dict:
        """What an epoch's permutation is of: the sampler's seed and the training samples (a digest of
        their times: another split, store record, history or rollout length gives another)."""
        import hashlib

        digest = hashlib.sha256(str(len(self.dataset)).encode())
        if isinstance(self.dataset, FieldDataset):
            digest.update(np.ascontiguousarray(np.asarray(self.dataset.times)[self.dataset.samples]).view(np.uint8))
        return {"seed": getattr(self.sampler, "seed", None), "samples_digest": digest.hexdigest()[:16]}

    def load_state_dict(self, state: dict) -> None:
        if isinstance(self.sampler, EpochShuffleSampler):
            self.sampler.set_epoch(state["epoch"])
            # checkpoints written before "samples" counted batches of this batch size
            self.sampler.start = state["samples"] if "samples" in state else state["batches"] * self.batch_size
            self.resumed_batches = state.get("epoch_batches", state.get("batches", 0))
            self._check_ranks(state)
            self._check_same_permutation(state)
            self._check_rest_of_epoch(state)
            self.resumed_batches_left = self._rest_of_epoch(state)

    def _unserved_batches(self, state: dict) -> int | None:
        """The batches of this loader's size left in the epoch a checkpoint stopped in; None at an epoch's
        start or end, or for a checkpoint of before the batch size was recorded."""
        start, total = self.sampler.start, len(self.sampler)
        if "batch_size" not in state or start == 0 or _ended(start, self._share_of(state), state["batch_size"]):
            return None
        return (total - start) // self.batch_size if self.drop_last else -(-(total - start) // self.batch_size)

    def _rest_of_epoch(self, state: dict) -> int | None:
        """The batches Lightning runs in the rest of the epoch a checkpoint stopped in: until its count,
        restored from the checkpoint, reaches this loader's length, or the data ends (a count already past
        the length runs to the data's end). None as ``_unserved_batches``."""
        rest = self._unserved_batches(state)
        if rest is None or self.resumed_batches >= len(self):
            return rest
        return min(rest, len(self) - self.resumed_batches)

    def _check_ranks(self, state: dict) -> None:
        """A position mid-epoch is one in each rank's share of that epoch's permutation: on another
        number of ranks the shares differ, and samples of the epoch were trained twice or never.
        Refused (at an epoch's end any number goes on)."""
        ranks, now = state.get("ranks", self.sampler.num_replicas), self.sampler.num_replicas
        if ranks == now or self.sampler.start == 0:
            return
        if _ended(self.sampler.start, self._share_of(state), state["batch_size"]):
            return
        raise UserError(
            f"the checkpoint stopped mid-epoch (after {self.resumed_batches} batches) of a run on {ranks} process(es), "
            f"and this run has {now}: that position holds only on {ranks}; resume on {ranks} "
            "(trainer.devices x trainer.num_nodes), or from a checkpoint saved at an epoch's end"
        )

    def _check_same_permutation(self, state: dict) -> None:
        """A position mid-epoch is one in that epoch's permutation of the checkpointed run's samples: with
        another seed or other samples the rest of the epoch trained some samples twice and others never
        (a review found both accepted in silence). Refused (at an epoch's end anything goes on)."""
        if "seed" not in state or self.sampler.start == 0:  # a checkpoint of before the seed was recorded
            return
        if _ended(self.sampler.start, self._share_of(state), state["batch_size"]):
            return
        now = self._permuted()
        if state["seed"] != now["seed"]:
            changed = f"data.init_args.seed {state['seed']} (now {now['seed']})"
        elif "samples_digest" in state and state["samples_digest"] != now["samples_digest"]:
            changed = "other training samples (the split, the store's record, history or rollout length differ)"
        else:
            return
        raise UserError(
            f"the checkpoint stopped mid-epoch (after {self.resumed_batches} batches) of a run with {changed}: the "
            "rest of that epoch is a position in its permutation of its samples; resume with that run's data "
            "settings, or from a checkpoint saved at an epoch's end"
        )

    def _share_of(self, state: dict) -> int:
        """The samples of each rank's share in the checkpointed run (its number of ranks; before
        "ranks" was recorded, this run's)."""
        return -(-len(self.dataset) // state.get("ranks", self.sampler.num_replicas))

    def _check_rest_of_epoch(self, state: dict) -> None:
        """Lightning ends an epoch when its count of the epoch's batches, restored from the checkpoint,
        reaches this loader's length: mid-epoch with a larger batch_size that comes before the rest of
        the epoch is served, and samples would be skipped. Refused (a smaller one serves them all)."""
        rest = self._unserved_batches(state)
        if "epoch_batches" not in state or rest is None:
            return  # a new epoch, or the end of one
        # Lightning stops when its count equals the length (a count already past it runs to the data's end;
        # at equality it depends on where the checkpoint was saved, which the loader cannot tell: refused)
        if self.resumed_batches <= len(self) < self.resumed_batches + rest:
            more = len(self) - self.resumed_batches
            raise UserError(
                f"the checkpoint stopped mid-epoch after {self.resumed_batches} batches of {state['batch_size']}; "
                f"with data.init_args.batch_size {self.batch_size} Lightning may end that epoch after {more} more "
                f"batches, leaving {(rest - more) * self.batch_size} of its samples untrained: resume with batch_size "
                f"{state['batch_size']}, or change it at an epoch's end"
            )


def _ended(start: int, share: int, batch_size: int) -> bool:
    """Whether a checkpointed run that served ``start`` samples of a share of ``share`` in batches of
    ``batch_size`` had ended its epoch: what is left is less than a batch when it dropped the last
    partial one (a share longer than a batch), else nothing. The run's own setting, not this loader's
    (another batch size or number of ranks drops otherwise: an epoch's end was taken for its middle)."""
    return share - start < (batch_size if share > batch_size else 1)


class FieldDataModule(pl.LightningDataModule):
    """Train/validation/test splits of one store; see ``FieldDataset`` for the sample layout.

    Args:
        store: path of the zarr store.
        spec: the sample layout.
        splits: {"train" | "val" | "test": keyword arguments of ``FieldDataset`` (start/end
            or trajectories)}; a split left out is not served.
        batch_size, num_workers, pin_memory: DataLoader settings.
        nan_policy: "fail" or "skip" (``FieldDataset``).
        seed: seed of the training shuffle.
        stats: statistics written with ``s2forecast stats STORE --out STATS`` (required for a
            store s2forecast did not write); default: the store's own ``stats`` group.
        storage_options: fsspec options when ``store`` is a URL (e.g. {"token": "anon"} for
            public Google Cloud Storage).
        read_threads: chunks of a sample (its variables x time steps) each process reads at once;
            1: one after another. Over a URL every chunk is a request, so their latencies overlap.
        allow_overlap: splits that share trajectories or times are refused (``training.splits``);
            true: used anyway, with a warning.
    """

    def __init__(
        self,
        store: str | Path,
        spec: SampleSpec,
        splits: dict[str, dict],
        batch_size: int = 4,
        num_workers: int = 0,
        pin_memory: bool = True,
        nan_policy: str = "fail",
        seed: int = 0,
        stats: str | None = None,
        storage_options: dict | None = None,
        read_threads: int = READ_THREADS,
        allow_overlap: bool = False,
    ):
        super().__init__()
        problems = []  # all at once, each naming its key
        try:
            self.read_threads = check_read_threads(read_threads)
        except UserError as error:
            problems.append(f"data.init_args.{error}")
        if nan_policy not in NAN_POLICIES:
            problems.append(f"data.init_args.nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
        if not (isinstance(batch_size, int) and batch_size >= 1):
            problems.append(f"data.init_args.batch_size must be an integer >= 1, got {batch_size!r}")
        if not (isinstance(num_workers, int) and num_workers >= 0):
            problems.append(f"data.init_args.num_workers must be an integer >= 0, got {num_workers!r}")
        if not (isinstance(spec.history, int) and not isinstance(spec.history, bool) and spec.history >= 1):
            problems.append(f"data.init_args.history must be an integer >= 1 (input states), got {spec.history!r}")
        hours = spec.step_hours
        if not (isinstance(hours, int | float) and not isinstance(hours, bool) and math.isfinite(hours) and hours > 0):
            problems.append(f"data.init_args.step_hours must be a positive number of hours, got {hours!r}")
        if not (isinstance(spec.rollout, int) and spec.rollout >= 1):  # 0 serves inputs alone: inference only
            problems.append(
                f"data.init_args.rollout_steps must be an integer >= 1 (targets per sample), got {spec.rollout!r}"
            )
        if not spec.variables:
            problems.append("data.init_args.variables is empty: list the store variables to predict, or leave it out")
        if spec.levels is not None and not len(spec.levels):  # None is every level
            problems.append(
                "data.init_args.levels is empty, which would leave out every pressure-level variable: give the "
                "pressure levels (hPa) to use, or null (or leave it out) for all of the store's"
            )
        for name, split in splits.items():  # refused here, not when the stage that reads it starts (test's)
            bounds = split.get("trajectories", ())
            whole = isinstance(bounds, tuple) and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
            if "trajectories" in split and not (whole and len(bounds) == 2):  # the CLI's types check it; Python's not
                problems.append(
                    f"data.init_args.{name}_trajectories {bounds!r} is not a range: give [first, stop), two whole "
                    "numbers (stop excluded), or null for no such split"
                )
            elif whole and len(bounds) == 2 and bounds[0] >= bounds[1]:
                problems.append(
                    f"data.init_args.{name}_trajectories {list(bounds)} is an empty range: give [first, stop), "
                    "first < stop (stop excluded), or null for no such split"
                )
        unknown = set(splits) - {"train", "val", "test"}
        if unknown:
            problems.append(f"splits are 'train', 'val' and 'test', got {sorted(unknown)}")
        if problems:
            raise UserError("; ".join(problems))
        check_overlap(splits, allow_overlap)
        self.store, self.spec, self.splits = str(store), spec, splits
        self.batch_size, self.num_workers, self.pin_memory = batch_size, num_workers, pin_memory
        self.nan_policy, self.seed = nan_policy, seed
        self.stats_path, self.storage_options = stats, storage_options
        self.datasets: dict[str, FieldDataset] = {}
        self._layout: FieldDataset | None = None  # the whole store, for ``_any`` before setup
        self._train_loader: ResumableLoader | None = None
        self._train_state: dict | None = None  # restored before the training loader exists

    def _hide_secrets(self) -> None:
        """The recorded hyper-parameters (``hparams.yaml``, checkpoints: both get shared) without a
        URL's password or query string, nor the string values of ``storage_options``."""
        hparams = dict(self.hparams)
        for name in ("store", "stats"):
            if is_url(hparams.get(name)):
                hparams[name] = redact(hparams[name])
        if hparams.get("storage_options"):
            hparams["storage_options"] = hidden_values(hparams["storage_options"])
        self.save_hyperparameters(hparams)  # the recorded and the initial (logged) ones alike

    def setup(self, stage: str | None = None) -> None:
        """Build the configured splits ``stage`` reads (``STAGE_SPLITS``; None: all), so that e.g.
        ``fit`` runs on data without the test period."""
        for name in STAGE_SPLITS.get(stage, tuple(self.splits)):
            if name in self.splits:
                self.dataset(name)

    def dataset(self, split: str) -> FieldDataset:
        if split not in self.splits:
            raise UserError(f"no {split!r} split configured; configured: {sorted(self.splits)}")
        if split not in self.datasets:
            try:
                self.datasets[split] = self._field_dataset(**self.splits[split])
            except SplitRangeError as error:  # which of the splits' options it was
                raise UserError(f"{self.split_option(split)}: {error}") from None
        return self.datasets[split]

    def split_option(self, split: str) -> str:
        """The option that gives ``split``'s range, as a message names it."""
        return f"splits[{split!r}]"

    def _field_dataset(self, **split) -> FieldDataset:
        store = self.store
        if not is_url(store) and not Path(store).expanduser().exists():  # the first thing a new user meets
            relative = not Path(store).expanduser().is_absolute()
            where = f" (relative to the working directory {Path.cwd()})" if relative else ""
            raise UserError(
                f"data.init_args.store: no zarr store at {store}{where}; write one with `s2forecast generate-swe` or "
                "`s2forecast convert-era5`, or give the path of yours"
            )
        return FieldDataset(
            store, self.spec, nan_policy=self.nan_policy, stats_path=self.stats_path,
            storage_options=self.storage_options, read_threads=self.read_threads, **split,
        )  # fmt: skip

    # what a model needs to know before the first batch
    @property
    def channels(self) -> tuple[str, ...]:
        return self._any().channels

    @property
    def static_channels(self) -> tuple[str, ...]:
        return self._any().static_names

    @property
    def forcing_channels(self) -> tuple[str, ...]:
        return self._any().forcing_channels

    @property
    def grid(self):
        return self._any().grid

    @property
    def stats(self):
        return self._any().stats

    @property
    def static_stats(self):
        return self._any().static_stats

    def physical_static_fields(self) -> dict[str, np.ndarray]:
        """The static fields, name -> (nlat, nlon) float32 in their units (saved in checkpoints)."""
        dataset = self._any()
        return {name: dataset.physical_static(name) for name in dataset.static_names}

    def _any(self) -> FieldDataset:
        """A split already built, else the whole store: what the model needs (channels, grid,
        statistics) is the store's, and the stage (hence which splits exist) is not known yet
        when the CLI links it into the model."""
        if not self.datasets and self._layout is None:
            self._layout = self._field_dataset()
        return next(iter(self.datasets.values()), self._layout)

    def _loader(self, split: str, shuffle: bool, scored: bool = True) -> torch.utils.data.DataLoader:
        """``shuffle``: the training loader; else in order, and under DDP in shares padded to equal
        length when ``scored`` (validation and test, whose scores skip the padding), without
        padding for predict (Lightning's own sampler then: no sample predicted twice)."""
        dataset = self.dataset(split)
        options = dict(
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory and torch.cuda.is_available(),
            collate_fn=dataset.collate,
            persistent_workers=self.num_workers > 0,
        )
        # under DDP the sampler shards by rank (Lightning's distributed_sampler_kwargs)
        shards = (self.trainer.distributed_sampler_kwargs if self.trainer is not None else None) or {}
        if not shuffle:
            sampler = InOrderShardSampler(dataset, **shards) if scored and shards.get("num_replicas", 1) > 1 else None
            return torch.utils.data.DataLoader(dataset, sampler=sampler, **options)
        sampler = EpochShuffleSampler(dataset, self.seed, **shards)
        # the last partial batch of this process's share is dropped, unless it is the only one (from the
        # whole split's length, shares shorter than a batch had none: fit under DDP trained nothing)
        return ResumableLoader(dataset, sampler=sampler, drop_last=len(sampler) > self.batch_size, **options)

    def train_dataloader(self):
        self._train_loader = self._loader("train", shuffle=True)
        if self._train_state is not None:
            self._train_loader.load_state_dict(self._train_state)
            self._train_state = None
        return self._train_loader

    # The training loader's position goes into checkpoints twice: Lightning's fit loop saves it
    # but restores it only if it builds the loader after restoring, and ForecastModule's
    # configure_optimizers builds it before (estimated_stepping_batches); the DataModule's copy
    # is restored before either.
    def state_dict(self) -> dict:
        return {"train_loader": self._train_loader.state_dict()} if self._train_loader is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if "train_loader" in state:
            if self._train_loader is not None:
                self._train_loader.load_state_dict(state["train_loader"])
            else:
                self._train_state = state["train_loader"]

    def val_dataloader(self):
        return self._loader("val", shuffle=False)

    def test_dataloader(self):
        return self._loader("test", shuffle=False)

    def predict_dataloader(self):
        return self._loader("test", shuffle=False, scored=False)


class ERA5DataModule(FieldDataModule):
    """ERA5 in the WeatherBench2 layout (``s2forecast convert-era5``), split by date ranges.

    Args:
        store: the zarr store.
        variables: store variables to predict; pressure-level ones give one channel per level.
        levels: pressure levels (hPa); None: all in the store.
        static: static input fields, "auto" for land_sea_mask and geopotential_at_surface when
            present; [] or null: none.
        forcings: analytic forcings (``s2forecast.data.forcings.FORCINGS``); [] or null: none.
        history, step_hours, rollout_steps: input states, hours between states, targets.
        train_period, val_period, test_period: inclusive (start, end) dates; None: unused.
        batch_size, num_workers, pin_memory, nan_policy, seed, stats, storage_options, read_threads,
            allow_overlap: see ``FieldDataModule``.
    """

    def __init__(
        self,
        store: str,
        variables: list[str] = ERA5_SURFACE + ERA5_PRESSURE,
        levels: list[int] | None = None,
        static: list[str] | str | None = "auto",
        forcings: list[str] | None = ("toa_radiation", "time_of_day", "day_of_year"),
        history: int = 1,
        step_hours: float = 6.0,
        rollout_steps: int = 1,
        train_period: tuple[str, str] | None = ("1979-01-01", "2017-12-31"),
        val_period: tuple[str, str] | None = ("2018-01-01", "2018-12-31"),
        test_period: tuple[str, str] | None = ("2020-01-01", "2020-12-31"),
        batch_size: int = 4,
        num_workers: int = 2,
        pin_memory: bool = True,
        nan_policy: str = "fail",
        seed: int = 0,
        stats: str | None = None,
        storage_options: dict | None = None,
        read_threads: int = READ_THREADS,
        allow_overlap: bool = False,
    ):
        spec = SampleSpec(  # null (an empty YAML key) is none: it was a TypeError taken for a bug
            tuple(variables or ()),
            None if levels is None else tuple(levels),
            static if isinstance(static, str) else tuple(static or ()),
            tuple(forcings or ()),
            history,
            step_hours,
            rollout_steps,
        )
        periods = {"train": train_period, "val": val_period, "test": test_period}
        splits = {name: {"start": p[0], "end": p[1]} for name, p in periods.items() if p is not None}
        super().__init__(
            store, spec, splits, batch_size, num_workers, pin_memory, nan_policy, seed, stats, storage_options,
            read_threads=read_threads, allow_overlap=allow_overlap,
        )  # fmt: skip
        self.save_hyperparameters()
        self._hide_secrets()

    def split_option(self, split: str) -> str:
        return f"data.init_args.{split}_period"


class SWEDataModule(FieldDataModule):
    """Shallow-water trajectories (``s2forecast generate-swe``), split by trajectory index.

    Args:
        store: the zarr store.
        variables: subset of geopotential_height, vorticity, divergence.
        history, step_hours, rollout_steps: input states, hours between states, targets.
        train_trajectories, val_trajectories, test_trajectories: [first, stop) trajectory
            indices; None: unused.
        batch_size, num_workers, pin_memory, nan_policy, seed, stats, storage_options, read_threads,
            allow_overlap: see ``FieldDataModule``.
    """

    def __init__(
        self,
        store: str,
        variables: list[str] = SWE_VARIABLES,
        history: int = 1,
        step_hours: float = 1.0,
        rollout_steps: int = 1,
        train_trajectories: tuple[int, int] | None = (0, 6),
        val_trajectories: tuple[int, int] | None = (6, 7),
        test_trajectories: tuple[int, int] | None = (7, 8),
        batch_size: int = 4,
        num_workers: int = 0,
        pin_memory: bool = True,
        nan_policy: str = "fail",
        seed: int = 0,
        stats: str | None = None,
        storage_options: dict | None = None,
        read_threads: int = READ_THREADS,
        allow_overlap: bool = False,
    ):
        spec = SampleSpec(tuple(variables or ()), None, (), (), history, step_hours, rollout_steps)
        ranges = {"train": train_trajectories, "val": val_trajectories, "test": test_trajectories}
        splits = {name: {"trajectories": tuple(r) if isinstance(r, list | tuple) else r}
                  for name, r in ranges.items() if r is not None}  # fmt: skip
        super().__init__(
            store, spec, splits, batch_size, num_workers, pin_memory, nan_policy, seed, stats, storage_options,
            read_threads=read_threads, allow_overlap=allow_overlap,
        )  # fmt: skip
        self.save_hyperparameters()
        self._hide_secrets()

    def split_option(self, split: str) -> str:
        return f"data.init_args.{split}_trajectories"
