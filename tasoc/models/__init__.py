"""The benchmark model zoo: built-in models the driver reads as `zoo:NAME?k=v&k2=v2`.

Importing this package registers every model; see `docs/models.md` for the list.
"""

from tasoc.models import (  # noqa: F401  (importing registers the models)
    alexnet,
    bert,
    candle_uno,
    dlrm,
    gnn,
    inception,
    nasnet,
    nasrnn,
    resnet,
    rnn,
    squeezenet,
    transformer,
    vgg,
)
from tasoc.models.registry import (
    TRAINING_KEYS,
    TRAINING_LOSSES,
    TRAINING_OPTIMIZERS,
    ModelStats,
    TrainingSpec,
    ZooError,
    ZooModel,
    ZooRequest,
    build_model,
    get_model,
    list_models,
    model_stats,
    parse_request,
    parse_spec,
    register,
    stats_table,
)

__all__ = [
    "TRAINING_KEYS",
    "TRAINING_LOSSES",
    "TRAINING_OPTIMIZERS",
    "ModelStats",
    "TrainingSpec",
    "ZooError",
    "ZooModel",
    "ZooRequest",
    "build_model",
    "get_model",
    "list_models",
    "model_stats",
    "parse_request",
    "parse_spec",
    "register",
    "stats_table",
]
