"""The kernels of the `fusion` family: chains of fused op groups, as XLA's fusion pass leaves
them in a training step.

A kernel starts from one anchor (a convolution, a matmul, a reduction, a pooling window, an
embedding lookup or a plain loop over one or several inputs) and grows by appending op groups
that each read the current value: bias and scale broadcasts, activation chains, layer-norm
style reduce-and-broadcast, dropout masks from random bits, index masks from `iota`,
residual adds, reshapes and transposes, slices and pads. Optimizer-update kernels work on
flattened 1-D parameters and return several outputs. Node features are filled as the
TpuGraphs featuriser fills them (shapes, element types, `dimensions`, windows, slices,
dynamic-slice sizes, padding, layouts), so the cost model can read everything back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tpu_tiles_models.synthetic.features import (
    COL_BASE_DILATION,
    COL_BATCH_GROUPS,
    COL_IS_ROOT,
    COL_PAD_HIGH,
    COL_PAD_LOW,
    COL_SLICE_LIMIT,
    COL_SLICE_START,
    COL_SLICE_STRIDE,
    COL_TUPLE_SIZE,
    COL_WINDOW_DILATION,
    COL_WINDOW_PAD_HIGH,
    COL_WINDOW_PAD_LOW,
    COL_WINDOW_SIZE,
    COL_WINDOW_STRIDE,
    MAX_NODES,
    OPCODES,
)
from tpu_tiles_models.synthetic.graph import Graph, pick, put_conv_fields, put_seq

COL_DYNAMIC_SLICE_SIZES = 121  # 2 dims + sum + product
COL_WINDOW_REVERSAL = 85  # 6 flags, then the true and false counts

_UNARY = ("exponential", "tanh", "logistic", "rsqrt", "negate", "abs", "log", "sqrt", "copy")
_BINARY = ("add", "multiply", "subtract", "maximum", "minimum", "divide")
_HIDDEN = (128, 256, 384, 512, 768, 1024, 1280, 2048, 3072, 4096, 5120, 8192)
_SEQ = (1, 8, 32, 64, 128, 196, 256, 384, 512, 1024, 2048)
_CHANNELS = (16, 24, 32, 48, 64, 96, 128, 144, 192, 256, 320, 384, 512, 640, 1024, 2048)
_SPATIAL = (4, 7, 8, 14, 16, 19, 28, 32, 38, 56, 64, 75, 112, 128, 150, 224, 256)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128)
_MAX_ELEMS = 1.2e8  # largest tensor a kernel touches
LAYOUT_STYLES = (0.5, 0.35, 0.15, 0.0)  # odds of each `graph.Graph.layout_style`
SWAPPED_INPUTS = 0.3  # share of inputs (rank >= 2) stored with their minor dims swapped
_NOT_OUTPUTS = {OPCODES[op] for op in ("constant", "parameter", "broadcast", "iota")}


@dataclass
class _Kernel:
    """A graph being built: the graph, its element type, the current value, the node count
    it grows to, and outputs besides the current value (multi-output kernels)."""

    g: Graph
    dtype: str
    cur: int
    target: int
    rng: np.random.Generator
    extra_outputs: list[int] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.g.shapes[self.cur]

    def left(self) -> int:
        return self.target - len(self.g.rows)


def _dims(rng: np.random.Generator, values: Sequence[int], rank: int) -> tuple[int, ...]:
    """A shape of `rank` dims drawn from `values`, no larger than `_MAX_ELEMS` elements."""
    for _ in range(50):
        shape = tuple(int(pick(rng, values)) for _ in range(rank))
        if np.prod(shape, dtype=float) <= _MAX_ELEMS:
            return shape
    return tuple(int(min(values)) for _ in range(rank))


# --------------------------------------------------------------------------------------
# Anchors: the first op group of a kernel. Each returns the node the epilogue continues from.
# --------------------------------------------------------------------------------------
def _conv_anchor(k: _Kernel) -> int:
    """2-D (NHWC) or 3-D (NDHWC) convolution, maybe depthwise, on converted inputs."""
    rng, g = k.rng, k.g
    spatial = 3 if rng.random() < 0.1 else 2
    for _ in range(50):
        n = int(pick(rng, _BATCH))
        sp = [int(pick(rng, _SPATIAL if spatial == 2 else (8, 16, 32, 64, 128)))] * spatial
        cin, cout = int(pick(rng, _CHANNELS)), int(pick(rng, _CHANNELS))
        win = int(pick(rng, (1, 3, 5, 7), (0.4, 0.45, 0.08, 0.07)))
        stride = 2 if rng.random() < 0.2 else 1
        out_sp = [-(-s // stride) for s in sp]
        if n * max(np.prod(sp) * cin, np.prod(out_sp) * cout) <= _MAX_ELEMS / 2:
            break
    groups = cin if spatial == 2 and cin >= 32 and rng.random() < 0.15 else 1
    if groups > 1:
        cout = cin
    in_dt = k.dtype
    x = g.add("parameter", (n, *sp, cin), in_dt)
    if rng.random() < 0.3:  # f32 activations converted for a bf16 convolution
        in_dt = "bf16"
        x = g.add("convert", (n, *sp, cin), in_dt, [x])
    w = g.add("parameter", (*([win] * spatial), cin // groups, cout), in_dt)
    c = g.add("convolution", (n, *out_sp, cout), k.dtype, [x, w])
    put_conv_fields(g.rows[c], (win, win), stride, groups)
    role = rng.random()  # a training step has forward, input- and weight-gradient convs
    if role < 0.2:  # the input gradient flips the window
        g.rows[c][COL_WINDOW_REVERSAL : COL_WINDOW_REVERSAL + 2] = 1
        g.rows[c][COL_WINDOW_REVERSAL + 6 : COL_WINDOW_REVERSAL + 8] = (2, 0)
    elif role < 0.25:  # the weight gradient groups the batch
        g.rows[c][COL_BATCH_GROUPS] = n
    if spatial == 3:
        pad = (win - 1) // 2
        put_seq(g.rows[c], COL_WINDOW_SIZE, [win] * 3, 6)
        put_seq(g.rows[c], COL_WINDOW_STRIDE, [stride] * 3, 6)
        put_seq(g.rows[c], COL_WINDOW_PAD_LOW, [pad] * 3, 6)
        put_seq(g.rows[c], COL_WINDOW_PAD_HIGH, [win - 1 - pad] * 3, 6)
        put_seq(g.rows[c], COL_WINDOW_DILATION, [1] * 3, 6)
    elif rng.random() < 0.1:  # atrous (dilated window) or transposed (dilated input)
        col = COL_WINDOW_DILATION if rng.random() < 0.5 else COL_BASE_DILATION
        put_seq(g.rows[c], col, [2, 2], 6)
    return c


def _dot_anchor(k: _Kernel) -> int:
    """Matmul [B.., M, K] x [K, N] (or batched attention-style [B, M, K] x [B, K, N])."""
    rng, g = k.rng, k.g
    for _ in range(50):
        batch = tuple(int(pick(rng, (2, 4, 8, 12, 16, 32))) for _ in range(int(rng.integers(0, 3))))
        m = int(pick(rng, _SEQ)) * int(pick(rng, (1, 1, 2, 4, 8)))
        kk, nn = int(pick(rng, _HIDDEN)), int(pick(rng, _HIDDEN + (64, 96, 1000, 30522)))
        if np.prod(batch, dtype=float) * m * max(kk, nn) <= _MAX_ELEMS / 2:
            break
    attention = bool(batch) and rng.random() < 0.5
    lhs = g.add("parameter", (*batch, m, kk), k.dtype)
    rhs_shape = (*batch, kk, nn) if attention else (kk, nn)
    rhs = g.add("parameter", rhs_shape, k.dtype)
    if rng.random() < 0.25:
        rhs = g.add("convert", rhs_shape, k.dtype, [rhs])
    return g.add("dot", (*batch, m, nn), k.dtype, [lhs, rhs])


def _reduce_anchor(k: _Kernel) -> int:
    """Reduction of a (maybe squared or exponentiated) input over its minor or major dims."""
    rng, g = k.rng, k.g
    rank = int(pick(rng, (2, 3, 4), (0.2, 0.4, 0.4)))
    shape = _dims(rng, (8, 16, 32, 64, 128, 256, 512, 768, 1024, 2048, 4096), rank)
    x = g.add("parameter", shape, k.dtype)
    if rng.random() < 0.5:
        op = pick(rng, ("multiply", "exponential", "abs"))
        x = g.add(op, shape, k.dtype, [x, x] if op == "multiply" else [x])
    red = [rank - 1] if rng.random() < 0.6 else list(range(rank - 1))
    out = tuple(s for i, s in enumerate(shape) if i not in red)
    init = g.add("constant", (), k.dtype)
    return g.add("reduce", out, k.dtype, [x, init], dims=red)


def _pool_anchor(k: _Kernel) -> int:
    """Max or average pooling (reduce-window) over NHWC, sometimes a global window."""
    rng, g = k.rng, k.g
    for _ in range(50):
        n, s, c = int(pick(rng, _BATCH)), int(pick(rng, _SPATIAL)), int(pick(rng, _CHANNELS))
        if n * s * s * c <= _MAX_ELEMS / 2:
            break
    glob = rng.random() < 0.25
    win, stride = (s, 1) if glob else pick(rng, ((3, 2), (2, 2), (3, 1)))
    out = 1 if glob else -(-s // stride)
    x = g.add("parameter", (n, s, s, c), k.dtype)
    init = g.add("constant", (), k.dtype)
    p = g.add("reduce-window", (n, out, out, c), k.dtype, [x, init])
    row = g.rows[p]
    put_seq(row, COL_WINDOW_SIZE, [1, win, win, 1], 6)
    put_seq(row, COL_WINDOW_STRIDE, [1, stride, stride, 1], 6)
    pad = 0 if glob or stride == win else (win - 1) // 2
    put_seq(row, COL_WINDOW_PAD_LOW, [0, pad, pad, 0], 6)
    put_seq(row, COL_WINDOW_PAD_HIGH, [0, pad, pad, 0], 6)
    put_seq(row, COL_WINDOW_DILATION, [1, 1, 1, 1], 6)
    return p


def _cumsum_anchor(k: _Kernel) -> int:
    """Prefix sum along the major dim, as XLA writes it: a reduce-window whose window spans
    the whole dim, padded low by its length minus one."""
    rng, g = k.rng, k.g
    length = int(pick(rng, (16, 64, 128, 512, 1024, 4096, 16384)))
    rest = _dims(rng, (1, 8, 32, 128, 256), int(rng.integers(0, 2)))
    x = g.add("parameter", (length, *rest), k.dtype)
    init = g.add("constant", (), k.dtype)
    p = g.add("reduce-window", (length, *rest), k.dtype, [x, init])
    ones = [1] * len(rest)
    row = g.rows[p]
    put_seq(row, COL_WINDOW_SIZE, [length, *ones], 6)
    put_seq(row, COL_WINDOW_STRIDE, [1, *ones], 6)
    put_seq(row, COL_WINDOW_PAD_LOW, [length - 1, *[0] * len(rest)], 6)
    put_seq(row, COL_WINDOW_PAD_HIGH, [0] * (1 + len(rest)), 6)
    put_seq(row, COL_WINDOW_DILATION, [1, *ones], 6)
    return p


def _gather_anchor(k: _Kernel) -> int:
    """Embedding lookup: dynamic-slice of rows out of a large table by s32 indices."""
    rng, g = k.rng, k.g
    vocab = int(pick(rng, (1000, 8192, 32000, 50257, 250000), (0.3, 0.3, 0.2, 0.15, 0.05)))
    hidden = int(pick(rng, (16, 32, 64, 128, 256, 512, 768, 1024)))
    rows = int(pick(rng, (8, 32, 128, 512, 2048, 8192)))
    table = g.add("parameter", (vocab, hidden), k.dtype)
    start = g.add("parameter", (), "s32")
    zero = g.add("constant", (), "s32")
    d = g.add("dynamic-slice", (rows, hidden), k.dtype, [table, start, zero])
    put_seq(g.rows[d], COL_DYNAMIC_SLICE_SIZES, [rows, hidden], 2)
    return d


def _loop_anchor(k: _Kernel) -> int:
    """A loop fusion's input: a parameter, maybe sliced, padded or transposed."""
    rng, g = k.rng, k.g
    rank = int(pick(rng, (1, 2, 3, 4, 5), (0.05, 0.25, 0.3, 0.38, 0.02)))
    shape = _dims(rng, (3, 7, 14, 28, 32, 56, 64, 128, 256, 512, 1000, 1024, 2048, 4096), rank)
    r = rng.random()
    if r < 0.15 and rank >= 2:
        src = shape[:-2] + (shape[-1], shape[-2])
        perm = list(range(rank - 2)) + [rank - 1, rank - 2]
        return g.add("transpose", shape, k.dtype, [g.add("parameter", src, k.dtype)], dims=perm)
    if r < 0.27:
        j = 1 if rank >= 2 and rng.random() < 0.8 else 0  # the sliced dim
        big = list(shape)
        big[j] *= int(pick(rng, (2, 3, 4)))
        x = g.add("slice", shape, k.dtype, [g.add("parameter", big, k.dtype)])
        start = [0] * rank
        start[j] = int(rng.integers(0, big[j] - shape[j] + 1))
        put_seq(g.rows[x], COL_SLICE_START, start, 2)
        put_seq(g.rows[x], COL_SLICE_STRIDE, [1] * rank, 2)
        put_seq(g.rows[x], COL_SLICE_LIMIT, [a + b for a, b in zip(start, shape)], 2)
        return x
    if r < 0.35:
        return _pad_input(k, shape)
    return g.add("parameter", shape, k.dtype)


def _pad_input(k: _Kernel, shape: tuple[int, ...]) -> int:
    """A parameter padded on some dims: mostly by a few elements (spatial borders), now and
    then by hundreds (up to a lane multiple or a longer sequence)."""
    rng, g, rank = k.rng, k.g, len(shape)
    low, high = [0] * rank, [0] * rank
    for j in range(rank):
        if shape[j] > 4 and (rng.random() < 0.5 or j == rank - 1):
            low[j], high[j] = int(rng.integers(0, 3)), int(rng.integers(1, 4))
            if rng.random() < 0.3 and shape[j] > 128:
                high[j] = int(rng.integers(1, min(shape[j] // 2, 1024)))
    small = [s - lo - hi for s, lo, hi in zip(shape, low, high)]
    if min(small) < 1:
        return g.add("parameter", shape, k.dtype)
    value = g.add("constant", (), k.dtype)
    x = g.add("pad", shape, k.dtype, [g.add("parameter", small, k.dtype), value])
    put_seq(g.rows[x], COL_PAD_LOW, low, 2)
    put_seq(g.rows[x], COL_PAD_HIGH, high, 2)
    return x


def _optimizer_anchor(k: _Kernel) -> int:
    """Adam-style update of a flattened parameter: several [N] inputs, a few outputs."""
    rng, g = k.rng, k.g
    n = int(np.exp(rng.uniform(np.log(256), np.log(1e6))))
    shape, dt = (n,), "f32"
    grad, m, v = (g.add("parameter", shape, dt) for _ in range(3))

    def scaled(x: int, op: str = "multiply") -> int:
        c = g.add("broadcast", shape, dt, [g.add("constant", (), dt)])
        return g.add(op, shape, dt, [x, c])

    m2 = g.add("add", shape, dt, [scaled(m), scaled(grad)])
    v2 = g.add("add", shape, dt, [scaled(v), scaled(g.add("multiply", shape, dt, [grad, grad]))])
    step = g.add("divide", shape, dt, [m2, scaled(g.add("sqrt", shape, dt, [v2]), "add")])
    k.extra_outputs = [m2, v2]
    return step


ANCHORS = {
    "conv": _conv_anchor,
    "dot": _dot_anchor,
    "reduce": _reduce_anchor,
    "pool": _pool_anchor,
    "cumsum": _cumsum_anchor,
    "gather": _gather_anchor,
    "loop": _loop_anchor,
    "optimizer": _optimizer_anchor,
}


def _anchor_kind(rng: np.random.Generator, kind_weights: Sequence[float]) -> str:
    """Anchor from the benchmark's (conv, dot, reduce, elementwise) mix; the element-wise
    share is split between loops, pooling, lookups and optimizer updates."""
    conv, dot, red, elem = (float(w) for w in kind_weights)
    names = ("conv", "dot", "reduce", "loop", "pool", "cumsum", "gather", "optimizer")
    weights = (conv, dot, red, 0.65 * elem, 0.04 * elem, 0.06 * elem, 0.15 * elem, 0.1 * elem)
    return str(pick(rng, names, weights))


# --------------------------------------------------------------------------------------
# Op groups appended after the anchor.
# --------------------------------------------------------------------------------------
def _bias(k: _Kernel) -> None:
    g, shape = k.g, k.shape
    p = g.add("parameter", shape[-1:], k.dtype)
    b = g.add("broadcast", shape, k.dtype, [p], dims=[len(shape) - 1])
    k.cur = g.add(pick(k.rng, ("add", "multiply", "subtract")), shape, k.dtype, [k.cur, b])


def _scalar(k: _Kernel) -> None:
    g, shape = k.g, k.shape
    b = g.add("broadcast", shape, k.dtype, [g.add("constant", (), k.dtype)])
    k.cur = g.add(pick(k.rng, _BINARY), shape, k.dtype, [k.cur, b])


def _unary(k: _Kernel) -> None:
    k.cur = k.g.add(pick(k.rng, _UNARY), k.shape, k.dtype, [k.cur])


def _gelu(k: _Kernel) -> None:
    g, shape, x, dt = k.g, k.shape, k.cur, k.dtype
    cube = g.add("multiply", shape, dt, [x, g.add("multiply", shape, dt, [x, x])])
    c = g.add("broadcast", shape, dt, [g.add("constant", (), dt)])
    inner = g.add("add", shape, dt, [x, g.add("multiply", shape, dt, [cube, c])])
    t = g.add("tanh", shape, dt, [g.add("multiply", shape, dt, [inner, c])])
    k.cur = g.add("multiply", shape, dt, [x, g.add("add", shape, dt, [t, c])])


def _norm(k: _Kernel) -> None:
    """Reduce over the minor dim, broadcast back, and centre or scale by it."""
    g, shape, dt = k.g, k.shape, k.dtype
    rank = len(shape)
    if rank < 2 or shape[-1] > 8192:  # real norms reduce hidden or channel dims
        return _unary(k)
    r = g.add("reduce", shape[:-1], dt, [k.cur, g.add("constant", (), dt)], dims=[rank - 1])
    b = g.add("broadcast", shape, dt, [r], dims=list(range(rank - 1)))
    k.cur = g.add(pick(k.rng, ("subtract", "divide", "multiply")), shape, dt, [k.cur, b])


def _dropout(k: _Kernel) -> None:
    """Random u32 bits -> shift -> float -> compare with a threshold -> select."""
    g, shape, dt = k.g, k.shape, k.dtype
    bits = g.add("parameter", shape, "u32")
    shift = g.add("broadcast", shape, "u32", [g.add("constant", (), "u32")])
    f = g.add("convert", shape, dt, [g.add("shift-right-logical", shape, "u32", [bits, shift])])
    rate = g.add("broadcast", shape, dt, [g.add("constant", (), dt)])
    keep = g.add("compare", shape, "pred", [f, rate])
    zero = g.add("broadcast", shape, dt, [g.add("constant", (), dt)])
    k.cur = g.add("select", shape, dt, [keep, k.cur, zero])


def _index_mask(k: _Kernel) -> None:
    """iota along the minor dim compared with a broadcast s32 bound (causal/length masks)."""
    g, shape, dt = k.g, k.shape, k.dtype
    rank = len(shape)
    io = g.add("iota", shape, "s32", dims=[rank - 1])
    bound = g.add("broadcast", shape, "s32", [g.add("parameter", (), "s32")])
    m = g.add("compare", shape, "pred", [io, bound])
    fill = g.add("broadcast", shape, dt, [g.add("constant", (), dt)])
    k.cur = g.add("select", shape, dt, [m, k.cur, fill])


def _side_input(k: _Kernel) -> None:
    g, shape = k.g, k.shape
    dt = pick(k.rng, (k.dtype, "bf16", "u8", "u16", "s32"), (0.6, 0.3, 0.03, 0.04, 0.03))
    p = g.add("parameter", shape, dt)
    if dt != k.dtype:
        p = g.add("convert", shape, k.dtype, [p])
    k.cur = g.add(pick(k.rng, ("add", "multiply")), shape, k.dtype, [k.cur, p])


def _residual(k: _Kernel) -> None:
    g, shape = k.g, k.shape
    same = [i for i in range(k.cur) if g.shapes[i] == shape and g.ops[i] != g.ops[k.cur]]
    if not same:
        return _side_input(k)
    other = same[int(k.rng.integers(len(same)))]
    k.cur = g.add(pick(k.rng, ("add", "multiply", "subtract")), shape, k.dtype, [k.cur, other])


def _clamp(k: _Kernel) -> None:
    g, shape, dt = k.g, k.shape, k.dtype
    lo = g.add("broadcast", shape, dt, [g.add("constant", (), dt)])
    hi = g.add("broadcast", shape, dt, [g.add("constant", (), dt)])
    k.cur = g.add("clamp", shape, dt, [lo, k.cur, hi])


def _convert(k: _Kernel) -> None:
    other = "f32" if k.dtype == "bf16" else "bf16"
    k.cur = k.g.add("convert", k.shape, other, [k.cur])
    k.dtype = other


def _reshape(k: _Kernel) -> None:
    """Splits the minor dim in two, or merges the two major dims (a bitcast when free)."""
    shape = k.shape
    split_ok = len(shape) < 5 or (len(shape) == 5 and k.rng.random() < 0.3)
    if len(shape) >= 2 and (not split_ok or k.rng.random() < 0.3):
        new = (shape[0] * shape[1],) + shape[2:]
    elif shape and shape[-1] % 2 == 0 and shape[-1] >= 16:
        f = int(pick(k.rng, [d for d in (2, 4, 8, 16) if shape[-1] % d == 0]))
        new = shape[:-1] + (shape[-1] // f, f)
    else:
        return _unary(k)
    op = "bitcast" if k.rng.random() < 0.3 else "reshape"
    k.cur = k.g.add(op, new, k.dtype, [k.cur])


def _transpose(k: _Kernel) -> None:
    shape = k.shape
    if len(shape) < 2:
        return _unary(k)
    perm = list(range(len(shape) - 2)) + [len(shape) - 1, len(shape) - 2]
    new = tuple(shape[p] for p in perm)
    k.cur = k.g.add("transpose", new, k.dtype, [k.cur], dims=perm)


# (op group, relative odds, the most nodes it adds)
_GROUPS = (
    (_bias, 0.17, 3),
    (_scalar, 0.13, 3),
    (_unary, 0.16, 1),
    (_gelu, 0.02, 11),
    (_norm, 0.08, 4),
    (_dropout, 0.04, 11),
    (_index_mask, 0.03, 8),
    (_side_input, 0.1, 3),
    (_residual, 0.04, 1),
    (_clamp, 0.03, 5),
    (_convert, 0.05, 1),
    (_reshape, 0.04, 1),
    (_transpose, 0.04, 1),
)


def _finish(k: _Kernel) -> None:
    """Marks the root: the current value, or a tuple of it and other outputs."""
    g = k.g
    outs = [k.cur] + k.extra_outputs
    if len(outs) == 1 and len(g.rows) >= 6 and k.rng.random() < 0.3:
        cands = [i for i in range(k.cur) if g.ops[i] not in _NOT_OUTPUTS and g.shapes[i]]
        for _ in range(int(k.rng.integers(1, 4)) if cands else 0):
            other = cands[int(k.rng.integers(len(cands)))]
            outs += [] if other in outs else [other]
    if len(outs) > 1 and len(g.rows) < MAX_NODES:
        root = g.add("tuple", (), "tuple", outs)
        g.rows[root][COL_TUPLE_SIZE] = len(outs)
    else:
        root = k.cur
    g.rows[root][COL_IS_ROOT] = 1.0


def node_target(rng: np.random.Generator) -> int:
    """Heavy-tailed node count: median ~30, a few long fusions up to the real maximum."""
    if rng.random() < 0.1:
        return int(rng.integers(2, 7))
    sigma = 1.1 if rng.random() < 0.1 else 0.75
    return int(np.clip(np.round(34.0 * np.exp(sigma * rng.standard_normal())), 2, MAX_NODES - 1))


def build(rng: np.random.Generator, kind_weights: Sequence[float]) -> tuple[Graph, str]:
    """One `fusion` kernel graph.

    Args:
      rng: the kernel's generator.
      kind_weights: the benchmark's (conv, dot, reduce, element-wise) mix.

    Returns:
      The graph (root marked) and its anchor kind.
    """
    kind = _anchor_kind(rng, kind_weights)
    dtype = "bf16" if rng.random() < 0.25 else "f32"
    g = Graph(
        layout_style=int(rng.choice(4, p=LAYOUT_STYLES)),
        layout_rng=rng,
        swapped_inputs=SWAPPED_INPUTS,
    )
    k = _Kernel(g, dtype, -1, node_target(rng), rng)
    k.cur = ANCHORS[kind](k)
    if kind == "reduce" and rng.random() < 0.35:  # a reduction fusion ends at its reduce
        k.target = len(g.rows)
    fns, weights, sizes = zip(*_GROUPS)
    p = np.asarray(weights) / np.sum(weights)
    while k.left() > 0 or g.ops[k.cur] == OPCODES["parameter"]:  # never end on a parameter
        fits = [i for i, s in enumerate(sizes) if s <= max(k.left(), 1)]
        choice = int(rng.choice(len(fns), p=p)) if k.left() >= 11 else int(pick(rng, fits))
        fns[choice](k)
        if len(g.rows) >= MAX_NODES - 12:
            break
    _finish(k)
    return g, kind
