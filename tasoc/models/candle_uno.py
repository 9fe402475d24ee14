"""`zoo:candle_uno`: CANDLE's Uno drug-response network at the shapes of FlexFlow's evaluation.

Uno (CANDLE Benchmarks, Pilot1/Uno) predicts how a cancer cell line responds to a
pair of drugs. The Jia thesis (ch. 3.7.3) describes FlexFlow's configuration: each
sample has a cell's RNA-seq features (942), and for each of two drugs its
descriptors (5270) and fingerprints (2048), plus the two doses; cell and drug features
go through feature MLPs of 3 layers of width 1000, the encodings are concatenated
and a top MLP of widths 1000, 1000, 1000, 1 predicts the response.

The seven inputs are taken in the order of FlexFlow's Uno example: `cell_rnaseq`,
`dose1`, `dose2`, `drug1_descriptors`, `drug1_fingerprints`, `drug2_descriptors`,
`drug2_fingerprints`, all [batch, width]. The doses enter the concatenation as they
are. Every dense layer is bias-free with relu, except the last, a single linear
unit (the response is a regression target).

**Shared drug encoders.** In Uno the feature model of a feature type is built once
and applied to both drugs, so drug 1 and drug 2 share the descriptor and the
fingerprint encoders (weights `drug_descriptors_w*`, `drug_fingerprints_w*`);
that is the default. FlexFlow's example builds a separate encoder per input, which
`shared_drug_encoders=false` reproduces (`drug1_descriptors_w*`, ...): 11.3 M more
weights at the default widths, and four independent branches for the optimizers
instead of two pairs that could be batched.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.ir.builder import GraphBuilder, shape_of
from tasoc.models.attention import linear, mlp_weights, relu_mlp
from tasoc.models.registry import register, require_positive

DRUGS = ("drug1", "drug2")
DRUG_FEATURES = ("descriptors", "fingerprints")


@register(
    loss="mse",
    source="CANDLE Uno (ECP-CANDLE Benchmarks, Pilot1/Uno); FlexFlow's evaluation "
    "(Jia thesis ch. 3.7.3)",
    small={
        "feature_width": 8,
        "feature_layers": 2,
        "top_width": 8,
        "top_layers": 2,
        "cell_features": 6,
        "drug_descriptors": 7,
        "drug_fingerprints": 5,
        "batch": 2,
    },
)
def candle_uno(
    *,
    feature_width: int = 1000,
    feature_layers: int = 3,
    top_width: int = 1000,
    top_layers: int = 3,
    cell_features: int = 942,
    drug_descriptors: int = 5270,
    drug_fingerprints: int = 2048,
    shared_drug_encoders: bool = True,
    batch: int = 64,
) -> ModuleOp:
    """Uno: MLP encoders for cell and drug features, concatenated, then an MLP to one response."""
    require_positive(
        feature_width=feature_width,
        feature_layers=feature_layers,
        top_width=top_width,
        top_layers=top_layers,
        cell_features=cell_features,
        drug_descriptors=drug_descriptors,
        drug_fingerprints=drug_fingerprints,
        batch=batch,
    )
    g = GraphBuilder()
    widths = {"descriptors": drug_descriptors, "fingerprints": drug_fingerprints}
    cell = g.input("cell_rnaseq", (batch, cell_features))
    doses = [g.input(f"dose{index}", (batch, 1)) for index in (1, 2)]
    drug_inputs = {
        (drug, kind): g.input(f"{drug}_{kind}", (batch, widths[kind]))
        for drug in DRUGS
        for kind in DRUG_FEATURES
    }

    encoder_widths = [feature_width] * feature_layers
    cell_encoder = mlp_weights(g, cell_features, encoder_widths, "cell_rnaseq")
    encoded = [relu_mlp(g, cell, cell_encoder), *doses]
    drug_encoders: dict[str, list[SSAValue]] = {}
    for (drug, kind), value in drug_inputs.items():
        name = f"drug_{kind}" if shared_drug_encoders else f"{drug}_{kind}"
        if name not in drug_encoders:
            drug_encoders[name] = mlp_weights(g, widths[kind], encoder_widths, name)
        encoded.append(relu_mlp(g, value, drug_encoders[name]))

    joined = g.concat(encoded, axis=1)
    top_weights = mlp_weights(g, shape_of(joined)[-1], [top_width] * top_layers, "top")
    top = relu_mlp(g, joined, top_weights)
    return g.build(linear(g, top, "top_out", 1))
