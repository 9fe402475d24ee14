"""NASNet-A: `zoo:nasnet_a` (TASO's benchmark graph) and `zoo:nasnet` (the published network).

Zoph et al., "Learning Transferable Architectures for Scalable Image Recognition"
(CVPR 2018) found two cells by architecture search. Each takes the outputs of the two
previous cells, `h` (the last) and `p` (the one before), and adds pairs of operations
on them into five blocks, which are concatenated:

    normal:     b1 = sep5(h) + sep3(p)      b2 = sep5(p) + sep3(p)
                b3 = avg3(h) + p            b4 = avg3(p) + avg3(p)
                b5 = sep3(h) + h            out = concat(p, b1, ..., b5)
    reduction:  b1 = sep5(h, /2) + sep7(p, /2)   b2 = max3(h, /2) + sep7(p, /2)
                b3 = avg3(h, /2) + sep5(p, /2)   b4 = avg3(b1) + b2
                b5 = sep3(b1) + max3(h, /2)      out = concat(b2, b3, b4, b5)

`zoo:nasnet_a` is the graph of TASO's `examples/nasnet_a.py` (structure read, not
copied): from a [batch, 128, 56, 56] feature map, three stages of 5 normal cells and a
reduction cell doubling the filters, with no batchnorm; `h` and `p` are first brought
to the cell's filters by a relu-fused 1x1 convolution, a separable convolution is a
depthwise and a 1x1 convolution, and every stage restarts with `p = h` (so the cells
never see inputs of different sizes). TASO's normal cell is the paper's with every
separable convolution 3x3 (the paper has two 5x5) and without `p` in the concat; its
reduction cell concatenates all five blocks (the paper the last four). TASO's
optimizations were measured on exactly this graph, so it is kept as is.

`zoo:nasnet` is the published ImageNet network, as SwapAdvisor trains it with the
number of normal cells per stage raised to R ("NasNet-25": R = 25, 3R normal cells).
Its layers are those of the reference implementations: a 3x3/2 valid stem convolution
and batchnorm; two reduction cells as the stem (filters F/4, F/2; the first takes the
stem convolution for both `h` and `p`); R normal cells at F, a reduction cell at 2F,
R normal cells at 2F, a reduction cell at 4F, R normal cells at 4F; relu, global
average pooling, a linear classifier. In a cell, `h` goes through relu, 1x1
convolution and batchnorm; `p` too where its width differs, and where its map is
larger it is halved by the "factorized reduction" (relu; two 1x1 convolutions of F/2
on the even pixels and on the pixels shifted by one, concatenated; batchnorm). A
separable operation is twice (relu, depthwise, pointwise, batchnorm), striding on the
first. F = 168 and a 96-channel stem is NASNet-A Large (R = 6), F = 44 and a 32-channel
stem NASNet-A Mobile (R = 4). There is no auxiliary head and no drop-path (training
only).
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.ir.builder import shape_of
from tasoc.models.layers import ConvNet, fitting
from tasoc.models.registry import ZooError, register, require_positive

TASO_STAGES = 3
"""Stages of TASO's graph, each ending in a reduction cell."""

MIN_FILTERS = 4
"""The stem cells work at F/4 filters and split F/2 in halves: F must be at least 4."""


def _spatial(x: SSAValue) -> tuple[int, ...]:
    return shape_of(x)[2:]


# ------------------------------------------------------------ TASO's nasnet_a


class _TasoCells:
    """Emits the cells of TASO's NASNet-A graph: no batchnorm, relu only on the 1x1s."""

    def __init__(self, net: ConvNet) -> None:
        self.net = net

    def _inputs(
        self, prev: SSAValue, cur: SSAValue, filters: int, name: str
    ) -> tuple[SSAValue, SSAValue]:
        h = self.net.conv(cur, filters, 1, name=f"{name}_h")
        p = self.net.conv(prev, filters, 1, name=f"{name}_p")
        return h, p

    def _sep(self, x: SSAValue, kernel: int, name: str, strides: int = 1) -> SSAValue:
        return self.net.separable(x, shape_of(x)[1], kernel, name=name, strides=strides)

    def normal(self, prev: SSAValue, cur: SSAValue, filters: int, name: str) -> SSAValue:
        g = self.net.g
        h, p = self._inputs(prev, cur, filters, name)

        def avg(x: SSAValue) -> SSAValue:
            return self.net.pool(x, "avg", 3)

        # All ten operands first, then the five adds: the op order of TASO's graph.
        pairs = [
            (self._sep(h, 3, f"{name}_b1"), h),
            (self._sep(p, 3, f"{name}_b2l"), self._sep(h, 3, f"{name}_b2r")),
            (avg(h), p),
            (avg(p), avg(p)),
            (self._sep(p, 3, f"{name}_b5l"), self._sep(p, 3, f"{name}_b5r")),
        ]
        return g.concat([g.add(left, right) for left, right in pairs], axis=1)

    def reduction(self, prev: SSAValue, cur: SSAValue, filters: int, name: str) -> SSAValue:
        g, net = self.net.g, self.net
        h, p = self._inputs(prev, cur, filters, name)
        b1 = g.add(self._sep(p, 7, f"{name}_b1l", 2), self._sep(h, 5, f"{name}_b1r", 2))
        b2 = g.add(net.pool(h, "max", 3, strides=2), self._sep(p, 7, f"{name}_b2", 2))
        b3 = g.add(net.pool(h, "avg", 3, strides=2), self._sep(p, 5, f"{name}_b3", 2))
        b4 = g.add(net.pool(h, "max", 3, strides=2), self._sep(b1, 3, f"{name}_b4"))
        b5 = g.add(net.pool(b1, "avg", 3), b2)
        return g.concat([b1, b2, b3, b4, b5], axis=1)


@register(
    loss="mse",
    source="Zoph et al., Learning Transferable Architectures (CVPR 2018); the cell graph "
    "of TASO's examples/nasnet_a.py, batch 1, 128x56x56 input",
    small={"size": 16, "filters": 8, "cells": 1},
)
def nasnet_a(*, batch: int = 1, size: int = 56, filters: int = 128, cells: int = 5) -> ModuleOp:
    """TASO's NASNet-A graph: 3 stages of normal cells and a reduction cell on a feature map."""
    require_positive(batch=batch, size=size, filters=filters, cells=cells)
    net = ConvNet(batchnorm=False)
    emit = _TasoCells(net)
    x = net.g.input("x", (batch, filters, size, size))
    for stage in range(TASO_STAGES):
        prev = cur = x
        for index in range(1, cells + 1):
            name = f"s{stage + 1}n{index}"
            prev, cur = cur, emit.normal(prev, cur, filters << stage, name)
        x = emit.reduction(prev, cur, filters << (stage + 1), f"s{stage + 1}r")
    return net.build(x)


# ------------------------------------------------------- the published network


class _Cells:
    """Emits the cells of the published NASNet-A, batchnorm and all."""

    def __init__(self, net: ConvNet) -> None:
        self.net = net

    def _squeeze(self, x: SSAValue, filters: int, name: str) -> SSAValue:
        return self.net.conv(self.net.g.relu(x), filters, 1, name=name, relu=False)

    def _factorized_reduction(self, x: SSAValue, filters: int, name: str) -> SSAValue:
        """Halve the map without dropping pixels: one half of the filters sees the even
        pixels, the other the pixels shifted by one (split off the first row and
        column, then pad a zero row and column at the end)."""
        g, net = self.net.g, self.net
        x = g.relu(x)
        _, _, height, width = shape_of(x)
        half = filters // 2
        even = net.pool(x, "avg", 1, strides=2, padding="valid")
        shifted = g.split(g.split(x, 2, (1, height - 1))[1], 3, (1, width - 1))[1]
        odd = net.pool(shifted, "avg", 1, strides=2, padding=(0, 0, 1, 1))
        paths = [
            net.conv(even, half, 1, name=f"{name}_even", relu=False, norm=False),
            net.conv(odd, filters - half, 1, name=f"{name}_odd", relu=False, norm=False),
        ]
        return net.norm(g.concat(paths, axis=1), name)

    def _inputs(
        self, prev: SSAValue | None, cur: SSAValue, filters: int, name: str
    ) -> tuple[SSAValue, SSAValue]:
        h = self._squeeze(cur, filters, f"{name}_h")
        if prev is None:
            return h, cur
        if _spatial(prev) != _spatial(h):
            return h, self._factorized_reduction(prev, filters, f"{name}_p")
        if shape_of(prev)[1] != filters:
            return h, self._squeeze(prev, filters, f"{name}_p")
        return h, prev

    def _sep(self, x: SSAValue, filters: int, kernel: int, name: str, strides: int = 1) -> SSAValue:
        for layer in range(2):
            x = self.net.separable(
                self.net.g.relu(x),
                filters,
                kernel,
                name=f"{name}_{layer}",
                strides=strides if layer == 0 else 1,
            )
        return x

    def normal(self, prev: SSAValue, cur: SSAValue, filters: int, name: str) -> SSAValue:
        g = self.net.g
        h, p = self._inputs(prev, cur, filters, name)

        def sep(x: SSAValue, kernel: int, tag: str) -> SSAValue:
            return self._sep(x, filters, kernel, f"{name}_{tag}")

        def avg(x: SSAValue) -> SSAValue:
            return self.net.pool(x, "avg", 3)

        blocks = [
            g.add(sep(h, 5, "b1l"), sep(p, 3, "b1r")),
            g.add(sep(p, 5, "b2l"), sep(p, 3, "b2r")),
            g.add(avg(h), p),
            g.add(avg(p), avg(p)),
            g.add(sep(h, 3, "b5"), h),
        ]
        return g.concat([p, *blocks], axis=1)

    def reduction(self, prev: SSAValue | None, cur: SSAValue, filters: int, name: str) -> SSAValue:
        g, net = self.net.g, self.net
        h, p = self._inputs(prev, cur, filters, name)

        def sep(x: SSAValue, kernel: int, tag: str, strides: int = 2) -> SSAValue:
            return self._sep(x, filters, kernel, f"{name}_{tag}", strides)

        def pool(x: SSAValue, kind: str) -> SSAValue:
            return net.pool(x, kind, 3, strides=2)

        b1 = g.add(sep(h, 5, "b1l"), sep(p, 7, "b1r"))
        b2 = g.add(pool(h, "max"), sep(p, 7, "b2"))
        b3 = g.add(pool(h, "avg"), sep(p, 5, "b3"))
        b4 = g.add(net.pool(b1, "avg", 3), b2)
        b5 = g.add(sep(b1, 3, "b5", strides=1), pool(h, "max"))
        return g.concat([b2, b3, b4, b5], axis=1)


@register(
    loss="softmax-cross-entropy",
    source="Zoph et al., Learning Transferable Architectures (CVPR 2018), NASNet-A Large "
    "cells; SwapAdvisor's NasNet-25 (R = 25), batch 64, 224x224",
    small={"repeat": 1, "filters": 8, "stem_filters": 8, "batch": 1, "image": 32},
)
def nasnet(
    *,
    repeat: int = 25,
    filters: int = 168,
    stem_filters: int = 96,
    batch: int = 64,
    image: int = 224,
    classes: int = 1000,
) -> ModuleOp:
    """NASNet-A with `repeat` normal cells per stage: images -> [batch, classes] logits."""
    require_positive(
        repeat=repeat,
        filters=filters,
        stem_filters=stem_filters,
        batch=batch,
        image=image,
        classes=classes,
    )
    if filters < MIN_FILTERS:
        raise ZooError(f"option 'filters' must be at least {MIN_FILTERS}, got {filters}")
    net = ConvNet(batchnorm=True)
    emit = _Cells(net)
    x = net.image(batch, image)
    with fitting("image", image):
        stem = net.conv(x, stem_filters, 3, name="stem", strides=2, padding="valid", relu=False)
    prev, cur = stem, emit.reduction(None, stem, filters // 4, "stem1")
    prev, cur = cur, emit.reduction(prev, cur, filters // 2, "stem2")
    for stage in range(3):
        if stage:
            prev, cur = cur, emit.reduction(prev, cur, filters << stage, f"r{stage}")
        for index in range(1, repeat + 1):
            prev, cur = cur, emit.normal(prev, cur, filters << stage, f"s{stage + 1}n{index}")
    return net.build(net.classifier(net.g.relu(cur), classes))
