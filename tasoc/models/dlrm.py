"""`zoo:dlrm`: the deep learning recommendation model at the shapes of FlexFlow's evaluation.

DLRM (Naumov et al., "Deep Learning Recommendation Model for Personalization and
Recommendation Systems", 2019) predicts a click from a sample's dense features and
its categorical features. The Jia thesis (ch. 3.7.3) trains it on Criteo Ad Kaggle
data: 13 dense features, 26 categorical features with one embedding table each, of
dimension 64; a bottom MLP of widths 512, 512, 64 and a top MLP of widths 1024,
1024, 1024, 1. Criteo's tables range from a handful of rows to about ten million;
here every table has `rows` rows, by default the 1,000,000 of FlexFlow's DLRM
example, so the tables hold most of the parameters, as in the real model.

The graph, with F = tables + 1 feature vectors:
1. the bottom MLP (relu after every layer) maps `dense` [batch, 13] to [batch, embed];
2. `sparse_ids` [batch, tables] is split into one column per table, each looked up
   in its table (`graph.embedding`, a bag of one id) to [batch, 1, embed];
3. the bottom output and the embeddings are concatenated to T: [batch, F, embed];
4. the interaction is DLRM's "dot": the pairwise dot products T @ T^T, of which the
   F(F-1)/2 below the diagonal are kept. With no gather op, they are cut out of the
   flattened [batch, F*F] products by one split whose pieces alternate between the
   i entries left of the diagonal in row i (kept) and the rest of that row (dropped),
   then joined to the bottom output by one concat: [batch, embed + F(F-1)/2];
5. the top MLP (relu between layers) ends in one unit and a sigmoid: the click
   probability [batch, 1].

Dense layers have no bias, as in FlexFlow's DLRM example. That example's default
interaction is concatenation; this model uses the dot interaction of the DLRM paper,
which is also what makes the model more than MLPs around a lookup.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from tasoc.ir.builder import GraphBuilder, shape_of
from tasoc.models.attention import linear, mlp_weights, relu_mlp
from tasoc.models.registry import register, require_positive
from tasoc.models.rnn import IDS_DTYPE


def lower_triangle_pieces(features: int) -> tuple[int, ...]:
    """Split sizes that cut a flattened [F, F] matrix into runs strictly below the
    diagonal (odd positions: row i's first i entries) and the runs between them.

    Row 0 has nothing below the diagonal, so the sizes start with a dropped run of F
    and end with row F-1's diagonal entry, a dropped run of 1.
    """
    sizes = [features]
    for row in range(1, features):
        sizes += [row, features - row]
    return tuple(sizes)


@register(
    loss="mse",
    source="Naumov et al., DLRM (2019); FlexFlow's evaluation on Criteo Kaggle "
    "(Jia thesis ch. 3.7.3)",
    small={
        "tables": 3,
        "rows": 10,
        "embed": 4,
        "dense": 5,
        "bottom_width": 8,
        "top_width": 8,
        "top_layers": 2,
        "batch": 2,
    },
)
def dlrm(
    *,
    tables: int = 26,
    rows: int = 1_000_000,
    embed: int = 64,
    dense: int = 13,
    bottom_width: int = 512,
    bottom_layers: int = 2,
    top_width: int = 1024,
    top_layers: int = 3,
    batch: int = 64,
) -> ModuleOp:
    """DLRM: bottom MLP, per-table embeddings, dot-product interaction, top MLP to a click."""
    require_positive(
        tables=tables,
        rows=rows,
        embed=embed,
        dense=dense,
        bottom_width=bottom_width,
        bottom_layers=bottom_layers,
        top_width=top_width,
        top_layers=top_layers,
        batch=batch,
    )
    g = GraphBuilder()
    dense_in = g.input("dense", (batch, dense))
    ids = g.input("sparse_ids", (batch, tables), IDS_DTYPE)
    bottom_widths = [bottom_width] * bottom_layers + [embed]
    bottom = relu_mlp(g, dense_in, mlp_weights(g, dense, bottom_widths, "bot"))

    columns = g.split(ids, axis=1, sizes=(1,) * tables)
    embedded = [
        g.embedding(column, g.param(f"emb{index}", (rows, embed)))
        for index, column in enumerate(columns)
    ]
    vectors = g.concat([g.reshape(bottom, (batch, 1, embed)), *embedded], axis=1)

    features = tables + 1
    dots = g.matmul(vectors, g.transpose(vectors, (0, 2, 1)))
    flat = g.reshape(dots, (batch, features * features))
    pairs = g.split(flat, axis=1, sizes=lower_triangle_pieces(features))[1::2]
    interaction = g.concat([bottom, *pairs], axis=1)

    top_widths = [top_width] * top_layers
    top = relu_mlp(g, interaction, mlp_weights(g, shape_of(interaction)[-1], top_widths, "top"))
    return g.build(g.sigmoid(linear(g, top, "top_out", 1)))
