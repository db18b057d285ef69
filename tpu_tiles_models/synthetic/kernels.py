"""The fused XLA kernels of the analytic families (`analytic`): one main op
(convolution, dot, reduce, or none for a loop fusion) fed by parameters, with an element-wise
epilogue.

Each builder takes a `Graph`, a target node count, an element type and an rng, adds the
kernel's nodes and returns a dict with the root node (`"root"`) and, for reductions,
`"reduce": (input shape, reduced dims)`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tpu_tiles_models.synthetic.features import (
    COL_IS_ROOT,
    COL_PAD_HIGH,
    COL_PAD_LOW,
    COL_SLICE_LIMIT,
    COL_SLICE_START,
    COL_SLICE_STRIDE,
    COL_TUPLE_SIZE,
    MAX_NODES,
    OPCODES,
)
from tpu_tiles_models.synthetic.geometry import FREE_OPS
from tpu_tiles_models.synthetic.graph import Graph, pick, put_conv_fields, put_seq

Builder = Callable[[Graph, int, str, np.random.Generator], dict[str, Any]]

_UNARY = ("negate", "exponential", "tanh", "rsqrt", "abs", "logistic", "log", "copy", "sqrt")


def epilogue(g: Graph, cur: int, dtype: str, target: int, rng: np.random.Generator) -> int:
    """Appends element-wise ops on node `cur` until `g` has `target` nodes; returns the last."""
    shape = g.shapes[cur]
    rank = len(shape)
    chain = [cur]
    while len(g.rows) < target:
        left = target - len(g.rows)
        r = rng.random()
        if r < 0.3 and left >= 3 and rank >= 1:
            # bias/scale along the minor dim: parameter [C] -> broadcast -> binary op
            p = g.add("parameter", shape[-1:], dtype)
            b = g.add("broadcast", shape, dtype, [p], dims=[rank - 1])
            op = ("add", "multiply", "subtract", "maximum", "divide")[rng.integers(5)]
            cur = g.add(op, shape, dtype, [cur, b])
        elif r < 0.4 and left >= 3:
            c = g.add("constant", (), dtype)
            b = g.add("broadcast", shape, dtype, [c])
            op = ("multiply", "maximum", "minimum", "add")[rng.integers(4)]
            cur = g.add(op, shape, dtype, [cur, b])
        elif r < 0.52 and left >= 2:
            p = g.add("parameter", shape, dtype)
            cur = g.add(("add", "multiply")[rng.integers(2)], shape, dtype, [cur, p])
        elif r < 0.57 and len(chain) > 1:
            other = chain[rng.integers(len(chain) - 1)]
            op = ("add", "multiply", "subtract")[rng.integers(3)]
            cur = g.add(op, shape, dtype, [cur, other])
        elif r < 0.59 and left >= 4:
            c = g.add("constant", (), dtype)
            b = g.add("broadcast", shape, dtype, [c])
            m = g.add("compare", shape, "pred", [cur, b])
            cur = g.add("select", shape, dtype, [m, cur, b])
        else:
            cur = g.add(_UNARY[rng.integers(len(_UNARY))], shape, dtype, [cur])
        chain.append(cur)
    return cur


def finish(g: Graph, root: int, rng: np.random.Generator) -> None:
    """Marks the root; sometimes (8%) makes a multi-output fusion with a tuple root."""
    full = [i for i, s in enumerate(g.shapes) if s == g.shapes[root] and g.ops[i] not in FREE_OPS]
    if len(full) >= 3 and len(g.rows) < MAX_NODES and rng.random() < 0.08:
        other = full[rng.integers(len(full) - 1)]
        root = g.add("tuple", (), "tuple", [root, other])
        g.rows[root][COL_TUPLE_SIZE] = 2
    g.rows[root][COL_IS_ROOT] = 1.0


BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SPATIAL = (7, 8, 14, 16, 17, 28, 32, 35, 56, 64, 73, 112, 149, 224)
CHANNELS = (3, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048)
WINDOWS = ((1, 1), (3, 3), (5, 5), (7, 7), (1, 7), (7, 1), (1, 3), (3, 1), (11, 11))
WINDOW_P = (0.38, 0.38, 0.06, 0.06, 0.03, 0.03, 0.02, 0.02, 0.02)


def conv_kernel(g: Graph, target: int, dtype: str, rng: np.random.Generator) -> dict[str, Any]:
    """Convolution fusion: params (maybe converted) -> convolution -> element-wise epilogue."""
    for _ in range(50):
        n = pick(rng, BATCH)
        h = pick(rng, SPATIAL)
        w = h if rng.random() < 0.85 else pick(rng, SPATIAL)
        cin, cout = pick(rng, CHANNELS), pick(rng, CHANNELS)
        window = pick(rng, WINDOWS, WINDOW_P)
        stride = 2 if rng.random() < 0.2 else 1
        groups = 1
        if rng.random() < 0.08 and cin >= 16:
            groups, cout = cin, cin  # depthwise
        ho, wo = -(-h // stride), -(-w // stride)
        if max(n * h * w * cin, n * ho * wo * cout) <= 6e7:
            break
    in_dtype = dtype
    x = g.add("parameter", (n, h, w, cin), in_dtype)
    if rng.random() < 0.25:
        in_dtype = "bf16"
        x = g.add("convert", (n, h, w, cin), in_dtype, [x])
    k = g.add("parameter", (*window, cin // groups, cout), in_dtype)
    c = g.add("convolution", (n, ho, wo, cout), dtype, [x, k])
    put_conv_fields(g.rows[c], window, stride, groups)
    return {"root": epilogue(g, c, dtype, target, rng)}


def dot_kernel(g: Graph, target: int, dtype: str, rng: np.random.Generator) -> dict[str, Any]:
    """Matmul fusion: lhs [B?, M, K] x rhs [B?, K, N] -> dot -> epilogue (K = lhs minor dim)."""
    for _ in range(50):
        m = int(2 ** rng.integers(3, 14))
        n_ = int(pick(rng, (128, 256, 384, 512, 768, 1024, 2048, 3072, 4096, 8192, 96, 64)))
        k = int(pick(rng, (64, 128, 256, 512, 768, 1024, 2048, 4096, 8192)))
        b = int(pick(rng, (1, 1, 1, 2, 4, 8, 12, 16, 32, 64)))
        if b * m * max(n_, k) <= 6e7:
            break
    batched = b > 1
    lhs = g.add("parameter", (b, m, k) if batched else (m, k), dtype)
    rhs_shape = (b, k, n_) if batched and rng.random() < 0.7 else (k, n_)
    rhs = g.add("parameter", rhs_shape, dtype)
    if rng.random() < 0.2:
        rhs = g.add("convert", rhs_shape, dtype, [rhs])
    d = g.add("dot", (b, m, n_) if batched else (m, n_), dtype, [lhs, rhs])
    return {"root": epilogue(g, d, dtype, target, rng)}


def reduce_kernel(g: Graph, target: int, dtype: str, rng: np.random.Generator) -> dict[str, Any]:
    """Reduction fusion: param -> input-shaped prologue -> reduce -> epilogue."""
    rank = int(pick(rng, (2, 3, 4), (0.2, 0.4, 0.4)))
    sizes = (16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096)
    for _ in range(50):
        in_shape = tuple(int(pick(rng, sizes)) for _ in range(rank))
        if np.prod(in_shape) <= 6e7:
            break
    if rng.random() < 0.6:
        red = (rank - 1,)  # softmax / layer-norm style
    else:
        red = tuple(range(rank - 1))  # batch-norm statistics style
    out_shape = tuple(s for i, s in enumerate(in_shape) if i not in red)
    x = g.add("parameter", in_shape, dtype)
    for _ in range(int(rng.integers(0, 3))):
        op = pick(rng, ("exponential", "multiply", "convert", "subtract"))
        x = g.add(op, in_shape, dtype, [x])
        if g.ops[-1] in (OPCODES["multiply"], OPCODES["subtract"]):
            g.edges.append((x, g.edges[-1][1]))  # binary op: square / centre with itself
    init = g.add("constant", (), dtype)
    r = g.add("reduce", out_shape, dtype, [x, init], dims=list(red))
    return {"root": epilogue(g, r, dtype, target, rng), "reduce": (in_shape, red)}


def elementwise_kernel(
    g: Graph, target: int, dtype: str, rng: np.random.Generator
) -> dict[str, Any]:
    """Loop fusion: one input (maybe transposed, sliced or padded) -> element-wise ops."""
    rank = int(pick(rng, (1, 2, 3, 4), (0.15, 0.35, 0.2, 0.3)))
    sizes = (3, 7, 14, 32, 64, 128, 200, 256, 512, 1000, 1024, 2048, 4096)
    for _ in range(50):
        shape = tuple(int(pick(rng, sizes)) for _ in range(rank))
        if np.prod(shape) <= 6e7:
            break
    r = rng.random()
    if r < 0.15 and rank >= 2:
        perm = list(range(rank))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        src = tuple(shape[p] for p in perm)
        x = g.add("transpose", shape, dtype, [g.add("parameter", src, dtype)], dims=perm)
    elif r < 0.25:
        big = shape[:-1] + (shape[-1] * 2,)
        x = g.add("slice", shape, dtype, [g.add("parameter", big, dtype)])
        row = g.rows[x]
        put_seq(row, COL_SLICE_START, [0] * rank, 2)
        put_seq(row, COL_SLICE_STRIDE, [1] * rank, 2)
        put_seq(row, COL_SLICE_LIMIT, list(shape), 2)
    elif r < 0.32 and shape[-1] > 2:
        small = shape[:-1] + (shape[-1] - 2,)
        p = g.add("parameter", small, dtype)
        z = g.add("constant", (), dtype)
        x = g.add("pad", shape, dtype, [p, z])
        put_seq(g.rows[x], COL_PAD_LOW, [0] * (rank - 1) + [1], 2)
        put_seq(g.rows[x], COL_PAD_HIGH, [0] * (rank - 1) + [1], 2)
    else:
        x = g.add("parameter", shape, dtype)
    if len(g.rows) >= target:  # two-node kernels: parameter -> one op
        target = len(g.rows) + 1
    return {"root": epilogue(g, x, dtype, target, rng)}


# Kernel kinds in the order of every `kind_weights` tuple: (conv, dot, reduce, elementwise).
KERNEL_KINDS: dict[str, Builder] = {
    "conv": conv_kernel,
    "dot": dot_kernel,
    "reduce": reduce_kernel,
    "elementwise": elementwise_kernel,
}
# The mix of kernel kinds a family draws when its caller gives none (`kind_weights=None`).
KIND_WEIGHTS = (0.3, 0.2, 0.15, 0.35)
