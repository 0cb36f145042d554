"""What an evaluation scores: variables, metrics, baselines and regions, each chosen by name.

The default is ``s2forecast evaluate``'s: every forecast variable, WeatherBench2's deterministic
metrics (plus its ensemble metrics and a rank histogram for an ensemble forecast), both baselines
and WB2's standard regions (plus its land regions when the truth has a land-sea mask).
"""

from dataclasses import dataclass

from s2forecast.evaluation.metrics import METRICS, get_metric
from s2forecast.evaluation.regions import check_region_names
from s2forecast.user_errors import UserError

DETERMINISTIC = ("rmse", "acc", "bias")  # the default metrics (of an ensemble: of its mean)
ENSEMBLE = ("ensemble_mean_rmse", "crps", "spread", "spread_skill")  # added for an ensemble forecast
# name -> definition recorded in results files (the climatology baseline's is in the climatology_* attributes)
BASELINES = {"persistence": "f_t(tau) = truth at the init time t", "climatology": None}


def _names(value, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else tuple(value)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UserError(f"{what}(s) {duplicates} given twice; give each once")
    return names


@dataclass(frozen=True)
class EvaluationConfig:
    """The variables, metrics, baselines and regions of an evaluation; names are checked on creation.

    Attributes:
        variables: forecast variables to score; None: every variable with dims (time,
            prediction_timedelta, ..., latitude, longitude).
        metrics: names in :data:`~s2forecast.evaluation.metrics.METRICS`; None: :data:`DETERMINISTIC`,
            plus :data:`ENSEMBLE` and ``rank_histogram`` for an ensemble forecast (:meth:`metrics_for`).
        baselines: names in :data:`BASELINES` (persistence ``f_t(tau) = o_t``, climatology
            ``f_t(tau) = c(t + tau)``), scored beside the forecast as the ``source`` dim.
        regions: standard or land region names or boxes ``"lat0,lat1,lon0,lon1"``
            (``evaluation.regions``); None: WB2's standard set, plus its land regions when the
            truth has a land-sea mask.

    Raises:
        ValueError: an unknown metric or baseline (naming the known ones), a bad region, a name given twice.
    """

    variables: tuple[str, ...] | None = None
    metrics: tuple[str, ...] | None = None
    baselines: tuple[str, ...] = tuple(BASELINES)
    regions: tuple[str, ...] | None = None

    def __post_init__(self):
        set_field = object.__setattr__  # frozen: normalize once here
        set_field(self, "variables", _names(self.variables, "variable"))
        metrics = _names(self.metrics, "metric")
        if metrics is not None:
            if not metrics:
                raise UserError(f"no metric chosen; choose some of {', '.join(METRICS)}")
            for name in metrics:
                get_metric(name)  # names the known ones
            if all(get_metric(name).statistic_dims for name in metrics):  # results are tables of scalar scores
                raise UserError(
                    f"metrics {list(metrics)} hold no score of one number per lead; add one, e.g. crps or rmse"
                )
        set_field(self, "metrics", metrics)
        baselines = _names(self.baselines, "baseline")
        unknown = [name for name in baselines if name not in BASELINES]
        if unknown:
            raise UserError(f"unknown baseline(s) {unknown}; known baselines: {', '.join(BASELINES)}")
        set_field(self, "baselines", baselines)
        set_field(self, "regions", None if self.regions is None else check_region_names(self.regions))

    @property
    def sources(self) -> tuple[str, ...]:
        """The ``source`` labels of the results: the forecast, then the baselines."""
        return ("forecast", *self.baselines)

    def metrics_for(self, ensemble: bool) -> tuple[str, ...]:
        """The metrics scored for a deterministic or an ensemble forecast.

        Raises:
            ValueError: a metric that needs ensemble members (the rank histogram) for a deterministic forecast.
        """
        if self.metrics is None:
            return DETERMINISTIC + ENSEMBLE + ("rank_histogram",) if ensemble else DETERMINISTIC
        if not ensemble:
            needing = [name for name in self.metrics if METRICS[name].needs_members]
            if needing:
                raise UserError(f"metric(s) {needing} need an ensemble forecast (a member dim); this one has none")
        return self.metrics
