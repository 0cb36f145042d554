"""The processes of one rollout: which one this is, how many there are, and how they agree.

``torchrun`` sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (and ``MASTER_ADDR``/``MASTER_PORT``);
``srun`` sets ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS`` and ``SLURM_LOCALID``. With more than one
process, ``group`` joins them in a ``torch.distributed`` process group over gloo: they exchange
only small Python objects (paths, errors, lists of non-finite forecasts), never tensors, so gloo
serves CPU and GPU ranks alike and needs no device set up. The forecasts themselves go through
the zarr store, each rank writing its own slab of initialization times (``slab``).

Every rank reaches every collective call, failed or not (``check_all``): a rank whose Python
code fails reports it to the others, which then fail too instead of waiting; a rank that is
killed closes its connections, and the others' next collective call raises. While the ranks
forecast their shares (no collective for a long while), a failed rank also leaves a mark in the
store they write, and the others stop before their next batch (``inference.rollout``).
"""

import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from s2forecast.user_errors import UserError

MEETING_TIMEOUT = timedelta(minutes=10)  # how long the ranks wait for one another to start
COLLECTIVE_TIMEOUT = timedelta(days=7)  # longer than any rollout: a rank waits for the others' whole share
_collectives = None  # the process group of the collectives (COLLECTIVE_TIMEOUT) while ``Ranks.group`` is open

# raised again under the same class on the ranks where they did not happen (others: RuntimeError)
_SHARED_ERRORS = (UserError, FileExistsError, FileNotFoundError, PermissionError, OSError)


def _integer(environment: dict, name: str) -> int:
    text = environment[name]
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"environment variable {name}={text!r} must be an integer (set by torchrun or srun)") from None
    if value < 0:
        raise UserError(f"environment variable {name}={text!r} must be >= 0 (set by torchrun or srun)")
    return value


@dataclass(frozen=True)
class Ranks:
    """This process's place among the processes of one rollout.

    Attributes:
        rank: 0 .. world - 1; rank 0 claims, creates and commits the output.
        world: the number of processes.
        local_rank: the rank among the processes of this node (its GPU).
    """

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_environment(cls, environment: dict | None = None) -> "Ranks":
        """torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``, else srun's ``SLURM_PROCID``/
        ``SLURM_STEP_NUM_TASKS``/``SLURM_LOCALID``, else one process.

        Only a job step that srun started counts (``SLURM_STEP_NUM_TASKS``): a batch script's
        ``SLURM_NTASKS`` describes the allocation, not the processes running this command.
        """
        env = os.environ if environment is None else environment
        if "WORLD_SIZE" in env:
            names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
        elif "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env:
            names = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID")
        else:
            return cls()
        rank, world = _integer(env, names[0]) if names[0] in env else 0, _integer(env, names[1])
        local = _integer(env, names[2]) if names[2] in env else 0
        if world < 1 or rank >= world:
            raise UserError(f"{names[0]}={rank} is not below {names[1]}={world}; start the processes with torchrun or "
                            "srun, which set both")  # fmt: skip
        return cls(rank, world, local)

    @property
    def many(self) -> bool:
        return self.world > 1

    def device(self, device: str) -> str:
        """The device of this rank: "cuda" means its node's GPU ``local_rank`` (shared round-robin
        when a node has fewer GPUs than processes); any other device as it is."""
        if not self.many or device != "cuda":
            return device
        import torch

        return f"cuda:{self.local_rank % max(torch.cuda.device_count(), 1)}"

    def slab(self, n_times: int, batch_size: int) -> range:
        """This rank's contiguous initialization times (indices) out of ``n_times``: whole batches of
        ``batch_size``, so that no chunk or shard (which divide the batch) straddles two ranks and
        each batch starts where it starts in a one-process rollout (the noise is seeded per init
        time, so the split does not change it either)."""
        batches = -(-n_times // batch_size)
        first, last = batches * self.rank // self.world, batches * (self.rank + 1) // self.world
        return range(min(first * batch_size, n_times), min(last * batch_size, n_times))

    @contextmanager
    def group(self):
        """The process group of the ranks (gloo) while inside, when there is more than one and
        none exists yet; nothing for one process."""
        if not self.many:
            yield self
            return
        import torch.distributed as dist

        if dist.is_initialized():
            yield self
            return
        env = os.environ
        if "MASTER_ADDR" not in env and env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES")) == "1":
            os.environ["MASTER_ADDR"] = "127.0.0.1"  # srun on one node: no address to look up
        if "MASTER_PORT" not in env and "SLURM_JOB_ID" in env:  # one port per job step: two sruns of a job at once
            step = _integer(env, "SLURM_STEP_ID") if "SLURM_STEP_ID" in env else 0  # collided on the job's one port
            os.environ["MASTER_PORT"] = str(20000 + (_integer(env, "SLURM_JOB_ID") * 97 + step) % 20000)
        if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
            raise UserError(
                f"{self.world} processes but no MASTER_ADDR/MASTER_PORT to meet at; start them with torchrun, or "
                "under srun export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1) and "
                "MASTER_PORT=29500"
            )
        global _collectives
        try:
            # the default group's timeout is also how long the meeting waits for a rank that never starts
            dist.init_process_group("gloo", rank=self.rank, world_size=self.world, timeout=MEETING_TIMEOUT)
        except (dist.DistNetworkError, dist.DistStoreError) as error:  # a port taken, a peer that never came
            raise UserError(
                f"rank {self.rank} of {self.world} could not meet the others at {env['MASTER_ADDR']}:"
                f"{env['MASTER_PORT']} within {MEETING_TIMEOUT.total_seconds():g} s ({type(error).__name__}: "
                f"{str(error).splitlines()[0]}); see the other processes' logs, or set MASTER_PORT to a free port"
            ) from None
        try:
            # the collectives' own group: torch's 30 min failed a run whose ranks with fewer (or no) batches waited
            # longer for the others at the end; a dead peer is seen at once all the same (its socket closes)
            with self._contact():
                _collectives = dist.new_group(backend="gloo", timeout=COLLECTIVE_TIMEOUT)
            yield self
        finally:
            _collectives = None
            dist.destroy_process_group()

    def gather(self, value) -> list:
        """``value`` of every rank, in rank order (a picklable object)."""
        if not self.many:
            return [value]
        import torch.distributed as dist

        values = [None] * self.world
        with self._contact():
            dist.all_gather_object(values, value, group=_collectives)
        return values

    def broadcast(self, value):
        """Rank 0's ``value`` on every rank."""
        if not self.many:
            return value
        import torch.distributed as dist

        values = [value]
        with self._contact():
            dist.broadcast_object_list(values, src=0, group=_collectives)
        return values[0]

    @contextmanager
    def _contact(self):
        """gloo's error when a peer died (its socket closed) or never answered, as one line."""
        try:
            yield
        except RuntimeError as error:
            raise ConnectionError(
                f"rank {self.rank} of {self.world} lost contact with the other processes of this rollout (one of them "
                "stopped: see its log); nothing was written at --out, rerun the command"
            ) from error

    def check_all(self, error: BaseException | None) -> None:
        """Raise on every rank if any rank failed: its own ``error``, or the first rank's failure
        (same class for user errors and OS errors, prefixed with the rank that failed)."""
        kind = None if error is None else next((cls for cls in _SHARED_ERRORS if isinstance(error, cls)), RuntimeError)
        # classes travel by name: an exception class may not pickle
        failures = self.gather(None if error is None else (kind.__name__, str(error)))
        if error is not None:
            raise error
        for rank, failure in enumerate(failures):
            if failure is not None:
                name, message = failure
                shared = next((cls for cls in _SHARED_ERRORS if cls.__name__ == name), RuntimeError)
                raise shared(f"rank {rank} of {self.world} failed: {message}")


def collectively(ranks: Ranks, work, *args):
    """``work(*args)`` on this rank, then ``check_all``: its value when every rank succeeded."""
    try:
        value = work(*args)
    except Exception as error:
        ranks.check_all(error)
        raise  # not reached: check_all raised it
    ranks.check_all(None)
    return value
