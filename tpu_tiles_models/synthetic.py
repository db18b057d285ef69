"""Synthetic TpuGraphs ``tile:xla`` data: fused XLA kernels, tile configs and runtimes.

Real TpuGraphs data cannot be downloaded everywhere, so this module writes trees in the
exact on-disk format of the real collection (``{train,valid,test}/<tile_id>.npz``, see
``UPSTREAM_CONTRACT.md``) from a seed:

* **Kernels** are fused HLO subgraphs (convolution, dot, reduce or element-wise fusions with
  parameters, broadcasts, constants and element-wise epilogues) whose 140 node features are
  filled at the documented indices (shape dims/sum/product, element type, window and
  convolution fields, slice/pad fields, layout). Nodes are in topological order and edges are
  ``[consumer, producer]``. Opcode ids are those of the TpuGraphs featuriser
  (``tpu_graphs/process_data/xla/hlo_opcode.h``), listed in :data:`OPCODES`.
* **Configs** are tile bounds: output bounds in hardware granules (128 lanes on the minor-most
  layout dimension, 8 sublanes on the second-minor, 1 elsewhere), kernel bounds for
  convolutions (window, input-feature chunk in units of 8, output-feature bound) and input
  bounds only for reductions; each block is 6 dims + sum + product (product 0 when empty).
* **Runtimes** come from a TPU-like analytic cost model that reads *only the features*
  (:func:`noise_free_runtime`), so a config's rank is learnable from the graph and the tile.
  Measured runtimes add ~1% noise; normalisers are the runtime of a graph-blind default tile
  with per-row jitter; a few configs are duplicated with different noise.

Two structurally different cost models exist: ``"roofline"`` (max of compute and memory per
tile with double buffering, hard scratchpad capacity, per-tile and per-pass overheads) and
``"alt"`` (faster, wider-MXU hardware, partial compute/memory overlap, an operand cache and a
smooth capacity penalty), so benchmarks can check a model does not overfit one generator.
"""

from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from tpu_tiles_models import files, kaggle

# --------------------------------------------------------------------------------------
# Feature layout (TpuGraphs README, "Node Features" and "Tile Config Features").
# --------------------------------------------------------------------------------------
NODE_FEAT_DIM = 140
CONFIG_FEAT_DIM = 24

#: HLO opcode ids of the TpuGraphs featuriser used by the generator (0 = unknown;
#: 97 "trace" and 101 "tuple-select" are tombstones and never emitted).
OPCODES: Dict[str, int] = {
    "abs": 1,
    "add": 2,
    "broadcast": 13,
    "clamp": 17,
    "compare": 20,
    "concatenate": 22,
    "constant": 24,
    "convert": 25,
    "convolution": 26,
    "copy": 27,
    "divide": 32,
    "dot": 34,
    "exponential": 37,
    "get-tuple-element": 45,
    "iota": 48,
    "log": 50,
    "maximum": 57,
    "minimum": 58,
    "multiply": 59,
    "negate": 60,
    "pad": 62,
    "parameter": 63,
    "power": 66,
    "reduce": 70,
    "reshape": 75,
    "rsqrt": 81,
    "select": 83,
    "slice": 92,
    "sqrt": 94,
    "subtract": 95,
    "tanh": 96,
    "transpose": 98,
    "tuple": 100,
    "logistic": 107,
}
_OP = OPCODES

# Column indices in node_feat.
COL_IS_ROOT = 0
COL_ELEM_TYPE = 2  # one-hot over columns 2..20
COL_SHAPE = 21  # 6 dims, then sum (27) and product (28)
COL_TUPLE_SIZE = 29
COL_PARAM_NUMBER = 30
COL_DIMENSIONS = 31  # 6 entries, no aggregates
COL_WINDOW_SIZE = 37
COL_WINDOW_STRIDE = 45
COL_WINDOW_PAD_LOW = 53
COL_WINDOW_PAD_HIGH = 61
COL_WINDOW_DILATION = 69
COL_BASE_DILATION = 77
COL_REVERSAL_FALSE = 92
COL_CONV_DIMS = 93  # 93..106
COL_FEATURE_GROUPS = 107
COL_BATCH_GROUPS = 108
COL_SLICE_START = 109  # blocks of 2 dims + sum + product
COL_SLICE_STRIDE = 113
COL_SLICE_LIMIT = 117
COL_PAD_LOW = 125
COL_PAD_HIGH = 129
COL_LAYOUT = 134  # minor_to_major, 6 entries

# Product columns of node features are 1 for an empty list (featuriser behaviour; the
# real train means of these columns are ~1.0).
_NODE_PRODUCT_COLS = (28, 44, 52, 60, 68, 76, 84, 112, 116, 120, 124, 128, 132)

# Offsets of element types inside the one-hot block, and their sizes in bytes.
_ELEM_TYPES: Dict[str, Tuple[int, int]] = {
    "pred": (1, 1),
    "s8": (2, 1),
    "s32": (4, 4),
    "u8": (6, 1),
    "u32": (8, 4),
    "f16": (10, 2),
    "f32": (11, 4),
    "bf16": (13, 2),
    "tuple": (16, 0),
}
# Bytes per element indexed by one-hot offset (invalid/opaque/token count as 0).
_BYTES_BY_TYPE = np.array([0, 1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 2, 8, 16, 0, 0, 0], float)

# Config feature blocks.
CFG_KERNEL = 0
CFG_OUTPUT = 8
CFG_INPUT = 16

# Real train-split scales (tile_feature_stats.json) the generator aims at, kept as
# constants so the package works without shared data: (mean, std) per column.
REAL_NODE_SCALES: Dict[int, Tuple[float, float]] = {
    0: (0.10, 0.30),  # is_root
    13: (0.71, 0.45),  # f32
    15: (0.22, 0.41),  # bf16
    21: (707.0, 69563.0),  # shape dim 0
    27: (1804.0, 73430.0),  # shape sum
    28: (6.29e6, 3.1e7),  # shape product
    30: (1.53, 2.88),  # parameter number
    44: (19.8, 910.0),  # window size product
    134: (1.50, 1.37),  # layout minor_to_major_0
}
REAL_CONFIG_SCALES: Dict[int, Tuple[float, float]] = {
    2: (15.5, 22.5),  # kernel bound 2
    7: (130.8, 189.4),  # kernel bounds product
    8: (8.7, 22.6),  # output bound 0
    14: (26.2, 29.8),  # output bounds sum
    15: (161.9, 232.3),  # output bounds product
    23: (0.21, 10.9),  # input bounds product
}

COST_MODELS = ("roofline", "alt")
SPLITS = ("train", "valid", "test")
MAX_NODES = 394
MAX_CONFIGS_DEFAULT = 6000
DOT_K_CHUNK = 512  # contraction elements per pass of a dot

# Op weights in VPU element-operations per output element (transcendentals are dearer;
# data movement costs a relayout pass).
_VPU_WEIGHT: Dict[int, float] = {
    _OP["exponential"]: 4.0,
    _OP["log"]: 4.0,
    _OP["tanh"]: 4.0,
    _OP["logistic"]: 4.0,
    _OP["rsqrt"]: 3.0,
    _OP["sqrt"]: 3.0,
    _OP["power"]: 6.0,
    _OP["divide"]: 2.0,
    _OP["transpose"]: 1.5,
    _OP["pad"]: 0.5,
    _OP["slice"]: 0.5,
    _OP["concatenate"]: 0.5,
    _OP["broadcast"]: 0.25,
    _OP["copy"]: 0.5,
}
_FREE_OPS = frozenset(
    {_OP["parameter"], _OP["constant"], _OP["tuple"], _OP["get-tuple-element"], _OP["reshape"]}
)


# --------------------------------------------------------------------------------------
# Graph construction.
# --------------------------------------------------------------------------------------
def _blank_row() -> np.ndarray:
    """A node feature row for an op with no optional fields."""
    row = np.zeros(NODE_FEAT_DIM, np.float64)
    row[list(_NODE_PRODUCT_COLS)] = 1.0
    return row


_BLANK_ROW = _blank_row()


def _put_seq(row: np.ndarray, start: int, values: Sequence[int], width: int) -> None:
    """Writes ``values`` (truncated to ``width``) then their sum and product."""
    for i, v in enumerate(values[:width]):
        row[start + i] = v
    row[start + width] = float(sum(values))
    row[start + width + 1] = float(math.prod(values))  # 1 for an empty list


@dataclass
class _Graph:
    """Accumulates nodes (in topological order) and ``[consumer, producer]`` edges."""

    layout_style: int
    rows: List[np.ndarray] = field(default_factory=list)
    ops: List[int] = field(default_factory=list)
    shapes: List[Tuple[int, ...]] = field(default_factory=list)
    edges: List[Tuple[int, int]] = field(default_factory=list)
    n_params: int = 0

    def add(
        self,
        op: str,
        shape: Sequence[int],
        dtype: str,
        operands: Iterable[int] = (),
        dims: Sequence[int] = (),
    ) -> int:
        """Adds one node fed by ``operands`` (in operand order) and returns its index."""
        row = _BLANK_ROW.copy()
        shape = tuple(int(s) for s in shape)
        row[COL_ELEM_TYPE + _ELEM_TYPES[dtype][0]] = 1.0
        _put_seq(row, COL_SHAPE, shape, 6)
        for i, d in enumerate(dims[:6]):
            row[COL_DIMENSIONS + i] = d
        for i, m in enumerate(_layout(len(shape), self.layout_style)):
            row[COL_LAYOUT + i] = m
        if op == "parameter":
            row[COL_PARAM_NUMBER] = self.n_params
            self.n_params += 1
        idx = len(self.rows)
        self.edges.extend((idx, int(o)) for o in operands)
        self.rows.append(row)
        self.ops.append(_OP[op])
        self.shapes.append(shape)
        return idx

    def arrays(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Returns node_feat float32 (n, 140), node_opcode uint8 (n,), edge_index int64."""
        feat = np.stack(self.rows).astype(np.float32)
        ops = np.asarray(self.ops, np.uint8)
        edges = np.asarray(self.edges, np.int64).reshape(-1, 2)
        return feat, ops, edges


def _layout(rank: int, style: int) -> Tuple[int, ...]:
    """minor_to_major for a rank; style 1 puts the batch dim second-minor (TPU conv style)."""
    if rank == 0:
        return ()
    if style == 1 and rank >= 3:
        return (rank - 1, 0) + tuple(range(rank - 2, 0, -1))
    if style == 2 and rank == 2:
        return (0, 1)
    return tuple(range(rank - 1, -1, -1))


def _conv_fields(
    row: np.ndarray, window: Tuple[int, int], stride: int, groups: int, out_shape: Tuple[int, ...]
) -> None:
    """Fills window and NHWC/HWIO convolution-dimension fields of a conv node."""
    pad = [(k - 1) // 2 for k in window]
    pad_hi = [k - 1 - p for k, p in zip(window, pad)]
    _put_seq(row, COL_WINDOW_SIZE, list(window), 6)
    _put_seq(row, COL_WINDOW_STRIDE, [stride, stride], 6)
    _put_seq(row, COL_WINDOW_PAD_LOW, pad, 6)
    _put_seq(row, COL_WINDOW_PAD_HIGH, pad_hi, 6)
    _put_seq(row, COL_WINDOW_DILATION, [1, 1], 6)
    _put_seq(row, COL_BASE_DILATION, [1, 1], 6)
    row[COL_REVERSAL_FALSE] = 2
    # input b,f,s0,s1,s2,s3 | kernel in_f,out_f,s0..s3 | output b,f
    conv_dims = [0, 3, 1, 2, 0, 0, 2, 3, 0, 1, 0, 0, 0, 3]
    row[COL_CONV_DIMS : COL_CONV_DIMS + 14] = conv_dims
    row[COL_FEATURE_GROUPS] = groups
    row[COL_BATCH_GROUPS] = 1


def _epilogue(g: _Graph, cur: int, dtype: str, target: int, rng: np.random.Generator) -> int:
    """Appends element-wise ops on ``cur`` until the graph has ``target`` nodes; returns root."""
    shape = g.shapes[cur]
    rank = len(shape)
    chain = [cur]
    unary = ("negate", "exponential", "tanh", "rsqrt", "abs", "logistic", "log", "copy", "sqrt")
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
        elif r < 0.62 and len(chain) > 1:
            other = chain[rng.integers(len(chain) - 1)]
            cur = g.add(
                ("add", "multiply", "subtract")[rng.integers(3)], shape, dtype, [cur, other]
            )
        elif r < 0.67 and left >= 4:
            c = g.add("constant", (), dtype)
            b = g.add("broadcast", shape, dtype, [c])
            m = g.add("compare", shape, "pred", [cur, b])
            cur = g.add("select", shape, dtype, [m, cur, b])
        else:
            cur = g.add(unary[rng.integers(len(unary))], shape, dtype, [cur])
        chain.append(cur)
    return cur


def _finish(g: _Graph, root: int, rng: np.random.Generator) -> None:
    """Marks the root; sometimes makes a multi-output fusion with a tuple root."""
    full = [i for i, s in enumerate(g.shapes) if s == g.shapes[root] and g.ops[i] not in _FREE_OPS]
    if len(full) >= 3 and len(g.rows) < MAX_NODES and rng.random() < 0.08:
        other = full[rng.integers(len(full) - 1)]
        root = g.add("tuple", (), "tuple", [root, other])
        g.rows[root][COL_TUPLE_SIZE] = 2
    g.rows[root][COL_IS_ROOT] = 1.0


def _pick(rng: np.random.Generator, values: Sequence, weights: Optional[Sequence] = None):
    """One element of ``values`` (optionally weighted)."""
    if weights is None:
        return values[rng.integers(len(values))]
    p = np.asarray(weights, float)
    return values[rng.choice(len(values), p=p / p.sum())]


_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_SPATIAL = (7, 8, 14, 16, 17, 28, 32, 35, 56, 64, 73, 112, 149, 224)
_CHANNELS = (3, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048)
_WINDOWS = ((1, 1), (3, 3), (5, 5), (7, 7), (1, 7), (7, 1), (1, 3), (3, 1), (11, 11))
_WINDOW_P = (0.38, 0.38, 0.06, 0.06, 0.03, 0.03, 0.02, 0.02, 0.02)


def _conv_kernel(g: _Graph, target: int, dtype: str, rng: np.random.Generator) -> Dict:
    """Convolution fusion: params (maybe converted/padded) -> conv -> element-wise epilogue."""
    for _ in range(50):
        n = _pick(rng, _BATCH)
        h = _pick(rng, _SPATIAL)
        w = h if rng.random() < 0.85 else _pick(rng, _SPATIAL)
        cin, cout = _pick(rng, _CHANNELS), _pick(rng, _CHANNELS)
        window = _pick(rng, _WINDOWS, _WINDOW_P)
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
    conv_shape = (n, ho, wo, cout)
    c = g.add("convolution", conv_shape, dtype, [x, k])
    _conv_fields(g.rows[c], window, stride, groups, conv_shape)
    return {"root": _epilogue(g, c, dtype, target, rng)}


def _dot_kernel(g: _Graph, target: int, dtype: str, rng: np.random.Generator) -> Dict:
    """Matmul fusion: lhs [B?, M, K] x rhs [B?, K, N] -> dot -> epilogue (K = lhs minor dim)."""
    for _ in range(50):
        m = int(2 ** rng.integers(3, 14))
        n_ = int(_pick(rng, (128, 256, 384, 512, 768, 1024, 2048, 3072, 4096, 8192, 96, 64)))
        k = int(_pick(rng, (64, 128, 256, 512, 768, 1024, 2048, 4096, 8192)))
        b = int(_pick(rng, (1, 1, 1, 2, 4, 8, 12, 16, 32, 64)))
        if b * m * max(n_, k) <= 6e7:
            break
    batched = b > 1
    lhs = g.add("parameter", (b, m, k) if batched else (m, k), dtype)
    rhs_shape = (b, k, n_) if batched and rng.random() < 0.7 else (k, n_)
    rhs = g.add("parameter", rhs_shape, dtype)
    if rng.random() < 0.2:
        rhs = g.add("convert", rhs_shape, dtype, [rhs])
    d = g.add("dot", (b, m, n_) if batched else (m, n_), dtype, [lhs, rhs])
    return {"root": _epilogue(g, d, dtype, target, rng)}


def _reduce_kernel(g: _Graph, target: int, dtype: str, rng: np.random.Generator) -> Dict:
    """Reduction fusion: param -> input-shaped prologue -> reduce -> epilogue."""
    rank = int(_pick(rng, (2, 3, 4), (0.2, 0.4, 0.4)))
    for _ in range(50):
        in_shape = tuple(
            int(_pick(rng, (16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096))) for _ in range(rank)
        )
        if np.prod(in_shape) <= 6e7:
            break
    if rng.random() < 0.6:
        red = (rank - 1,)  # softmax / layer-norm style
    else:
        red = tuple(range(rank - 1))  # batch-norm statistics style
    out_shape = tuple(s for i, s in enumerate(in_shape) if i not in red)
    x = g.add("parameter", in_shape, dtype)
    for _ in range(int(rng.integers(0, 3))):
        x = g.add(
            _pick(rng, ("exponential", "multiply", "convert", "subtract")), in_shape, dtype, [x]
        )
        if g.ops[-1] in (_OP["multiply"], _OP["subtract"]):
            g.edges.append((x, g.edges[-1][1]))  # binary op: square / centre with itself
    init = g.add("constant", (), dtype)
    r = g.add("reduce", out_shape, dtype, [x, init], dims=list(red))
    return {"root": _epilogue(g, r, dtype, target, rng), "reduce": (in_shape, red)}


def _elementwise_kernel(g: _Graph, target: int, dtype: str, rng: np.random.Generator) -> Dict:
    """Loop fusion: one or two inputs (maybe transposed, sliced or padded) -> element-wise ops."""
    rank = int(_pick(rng, (1, 2, 3, 4), (0.15, 0.35, 0.2, 0.3)))
    for _ in range(50):
        shape = tuple(
            int(_pick(rng, (3, 7, 14, 32, 64, 128, 200, 256, 512, 1000, 1024, 2048, 4096)))
            for _ in range(rank)
        )
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
        _put_seq(row, COL_SLICE_START, [0] * rank, 2)
        _put_seq(row, COL_SLICE_STRIDE, [1] * rank, 2)
        _put_seq(row, COL_SLICE_LIMIT, list(shape), 2)
    elif r < 0.32 and shape[-1] > 2:
        small = shape[:-1] + (shape[-1] - 2,)
        p = g.add("parameter", small, dtype)
        z = g.add("constant", (), dtype)
        x = g.add("pad", shape, dtype, [p, z])
        _put_seq(g.rows[x], COL_PAD_LOW, [0] * (rank - 1) + [1], 2)
        _put_seq(g.rows[x], COL_PAD_HIGH, [0] * (rank - 1) + [1], 2)
    else:
        x = g.add("parameter", shape, dtype)
    if len(g.rows) >= target:  # two-node kernels: parameter -> one op
        target = len(g.rows) + 1
    return {"root": _epilogue(g, x, dtype, target, rng)}


_FAMILIES: Dict[str, Callable[..., Dict]] = {
    "conv": _conv_kernel,
    "dot": _dot_kernel,
    "reduce": _reduce_kernel,
    "elementwise": _elementwise_kernel,
}

# Benchmark groups: model families with their kernel-family mix (conv, dot, reduce, elementwise).
_GROUPS: Dict[str, Tuple[Tuple[str, ...], Tuple[float, float, float, float]]] = {
    "convnet": (
        (
            "resnet50",
            "resnet101",
            "inception_v3",
            "efficientnet_b0",
            "efficientnet_b7",
            "mobilenet_v2",
            "mask_rcnn",
            "retinanet",
            "unet3d",
            "densenet121",
            "shapemask",
            "vgg16",
            "alexnet",
        ),
        (0.55, 0.05, 0.12, 0.28),
    ),
    "transformer": (
        (
            "bert_base",
            "bert_large",
            "transformer_lm",
            "t5_small",
            "gpt2_medium",
            "vit_b16",
            "wmt_transformer",
            "albert",
            "xlnet",
        ),
        (0.12, 0.38, 0.2, 0.3),
    ),
    "recsys": (
        ("ncf", "dlrm", "wide_deep", "rnn_lm", "lstm_translate", "deepfm"),
        (0.05, 0.3, 0.2, 0.45),
    ),
}


# --------------------------------------------------------------------------------------
# Reading a kernel back from its features (what the cost model sees).
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelGeometry:
    """Cost-relevant facts about a kernel, extracted from its features only."""

    kind: str  # "conv", "dot", "reduce" or "elementwise"
    out_dims: np.ndarray  # dims of the tiled output
    granule: np.ndarray  # elements per tile unit along each output dim (from the layout)
    out_bytes: float  # bytes per output element summed over all fusion outputs
    vpu_ops: float  # weighted element-wise ops per output element
    side_elems: np.ndarray  # element counts of parameters that do not feed the main op
    side_bytes: np.ndarray  # their bytes per element
    main_bytes: float = 4.0  # bytes per element of the main op's operands
    window: Tuple[int, int] = (1, 1)
    stride: int = 1
    cin: int = 1  # input features per group (conv) / contraction size K (dot)
    batch_dim: int = 0
    feat_dim: int = 0
    reduce_size: float = 1.0
    rhs_batched: bool = False
    operand_bytes: float = 0.0  # whole re-read operand (filter / rhs) plus side inputs
    in_dims: np.ndarray = field(default_factory=lambda: np.ones(1, np.int64))
    in_granule: np.ndarray = field(default_factory=lambda: np.ones(1, np.int64))


def _operands(n: int, edge_index: np.ndarray) -> List[List[int]]:
    """Producer lists per consumer in operand (edge) order."""
    ops: List[List[int]] = [[] for _ in range(n)]
    for u, v in edge_index.tolist():
        ops[u].append(v)
    return ops


def _ancestors(start: int, operands: List[List[int]]) -> set:
    """All transitive producers of ``start``."""
    seen, stack = set(), list(operands[start])
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            stack.extend(operands[v])
    return seen


def _dims_of(node_feat: np.ndarray, i: int) -> np.ndarray:
    """The shape of node ``i`` (leading non-zero dims of columns 21..26)."""
    d = node_feat[i, COL_SHAPE : COL_SHAPE + 6].astype(np.int64)
    rank = int(np.argmin(np.append(d, 0) > 0))
    return d[:rank]


def _granules(node_feat: np.ndarray, i: int, rank: int) -> np.ndarray:
    """Tile-unit sizes per dim: 128 lanes on the minor-most dim, 8 sublanes on the next."""
    g = np.ones(rank, np.int64)
    m2m = node_feat[i, COL_LAYOUT : COL_LAYOUT + max(rank, 1)].astype(np.int64)
    if rank >= 1:
        g[m2m[0] % rank] = 128
    if rank >= 2 and m2m[1] % rank != m2m[0] % rank:
        g[m2m[1] % rank] = 8
    return g


def kernel_geometry(
    node_feat: np.ndarray, node_opcode: np.ndarray, edge_index: np.ndarray
) -> KernelGeometry:
    """Extracts the tiled output, main op and side inputs of a kernel from its arrays."""
    opc = np.asarray(node_opcode).astype(np.int64)
    n = len(opc)
    operands = _operands(n, np.asarray(edge_index))
    elems = node_feat[:, COL_SHAPE + 7].astype(np.float64)
    ebytes = _BYTES_BY_TYPE[np.argmax(node_feat[:, COL_ELEM_TYPE : COL_ELEM_TYPE + 19], axis=1)]
    roots = np.flatnonzero(node_feat[:, COL_IS_ROOT] > 0)
    root = int(roots[-1]) if len(roots) else n - 1
    outs = operands[root] if opc[root] == _OP["tuple"] and operands[root] else [root]
    tiled = outs[0]
    out_dims = _dims_of(node_feat, tiled)
    if len(out_dims) == 0:
        out_dims = np.ones(1, np.int64)
    out_elems = float(np.prod(out_dims))
    main, kind = -1, "elementwise"
    for op, name in ((_OP["convolution"], "conv"), (_OP["dot"], "dot"), (_OP["reduce"], "reduce")):
        cand = np.flatnonzero(opc == op)
        if len(cand):
            main, kind = int(cand[np.argmax(elems[cand])]), name
            break
    feeds_main = _ancestors(main, operands) if main >= 0 else set()
    params = [i for i in np.flatnonzero(opc == _OP["parameter"]) if i not in feeds_main]
    vpu = 0.0
    for i in range(n):
        if opc[i] in _FREE_OPS or i == main:
            continue
        vpu += _VPU_WEIGHT.get(int(opc[i]), 1.0) * elems[i] / out_elems
    extra: Dict = {}
    if kind == "conv":
        x, k = operands[main][:2]
        row = node_feat[main]
        groups = max(int(row[COL_FEATURE_GROUPS]), 1)
        in_dims = _dims_of(node_feat, x)
        extra = dict(
            window=(int(row[COL_WINDOW_SIZE]), int(row[COL_WINDOW_SIZE + 1])),
            stride=max(int(row[COL_WINDOW_STRIDE]), 1),
            cin=max(int(in_dims[int(row[COL_CONV_DIMS + 1])]) // groups, 1),
            batch_dim=int(row[COL_CONV_DIMS + 12]),
            feat_dim=int(row[COL_CONV_DIMS + 13]),
            main_bytes=float(ebytes[x]),
            operand_bytes=float(elems[k] * ebytes[k]),
        )
    elif kind == "dot":
        lhs, rhs = operands[main][:2]
        extra = dict(
            cin=int(_dims_of(node_feat, lhs)[-1]),
            main_bytes=float(ebytes[lhs]),
            operand_bytes=float(elems[rhs] * ebytes[rhs]),
            rhs_batched=len(_dims_of(node_feat, rhs)) == len(_dims_of(node_feat, main)) > 2,
        )
    elif kind == "reduce":
        x = operands[main][0]
        in_dims = _dims_of(node_feat, x)
        extra = dict(
            reduce_size=elems[x] / max(elems[main], 1.0),
            main_bytes=float(ebytes[x]),
            in_dims=in_dims,
            in_granule=_granules(node_feat, x, len(in_dims)),
        )
    return KernelGeometry(
        kind=kind,
        out_dims=out_dims,
        granule=_granules(node_feat, tiled, len(out_dims)),
        out_bytes=float(sum(max(ebytes[o], 1.0) for o in outs)),
        vpu_ops=vpu,
        side_elems=elems[params],
        side_bytes=ebytes[params],
        **extra,
    )


# --------------------------------------------------------------------------------------
# Cost models.
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hardware:
    """Constants of one simulated TPU core (rates per nanosecond)."""

    mxu_bf16: float  # MXU flop/ns with 16-bit operands
    mxu_f32: float  # MXU flop/ns with 32-bit operands (multi-pass)
    vpu: float  # element-wise op/ns
    hbm: float  # bytes/ns
    vmem: float  # scratchpad bytes
    mxu_dim: int  # systolic array width (row/contraction padding granule)
    tile_ns: float  # fixed cost per tile (grid step)
    pass_ns: float  # cost per reduction pass within a tile
    launch_ns: float  # kernel launch
    overlap: float = 1.0  # fraction of min(compute, memory) hidden (alt only)
    cache: float = 0.0  # bytes of operand cache (alt only)
    cache_speedup: float = 1.0


HARDWARE: Dict[str, Hardware] = {
    # A v3-like core: 16 MiB VMEM, 128x128 MXU, strict double buffering.
    "roofline": Hardware(60e3, 20e3, 2.0e3, 450.0, 16 * 2**20, 128, 350.0, 60.0, 2500.0),
    # A wider, faster core with a smaller scratchpad and an operand cache.
    "alt": Hardware(
        180e3, 45e3, 5.0e3, 800.0, 8 * 2**20, 256, 150.0, 120.0, 4000.0, 0.7, 24 * 2**20, 3.0
    ),
}


def _tile_terms(geom: KernelGeometry, cfg: np.ndarray, mxu_dim: int) -> Dict[str, np.ndarray]:
    """Per-config tile quantities: tile count, flops, bytes streamed/reused, working set."""
    rank = len(geom.out_dims)
    units = -(-geom.out_dims // geom.granule)
    b = np.clip(cfg[:, CFG_OUTPUT : CFG_OUTPUT + rank], 1, units).astype(np.float64)
    ext = b * geom.granule  # tile extent in elements per dim
    tiles = np.prod(np.ceil(units / b), axis=1)
    e_t = np.prod(ext, axis=1)
    passes = np.ones(len(cfg))
    stream = np.zeros(len(cfg))  # operand bytes streamed once per tile
    reuse = np.zeros(len(cfg))  # operand bytes re-read by every tile (cacheable)
    chunk = np.zeros(len(cfg))  # bytes resident per pass
    mxu = np.zeros(len(cfg))
    eff = np.ones(len(cfg))
    vpu = geom.vpu_ops * e_t
    mb = geom.main_bytes
    if geom.kind == "conv":
        sp = [d for d in range(rank) if d not in (geom.batch_dim, geom.feat_dim)]
        kh, kw = geom.window
        ci = np.clip(cfg[:, CFG_KERNEL + 2] * 8, 8, None)
        ci = np.minimum(ci, geom.cin)
        passes = np.ceil(geom.cin / ci)
        rows = ext[:, geom.batch_dim] * np.prod(ext[:, sp], axis=1)
        in_sp = [(ext[:, d] - 1) * geom.stride + k for d, k in zip(sp, (kh, kw))]
        in_tile = ext[:, geom.batch_dim] * np.prod(in_sp, axis=0) * ci * mb
        w_tile = kh * kw * ci * ext[:, geom.feat_dim] * mb
        stream, reuse = in_tile * passes, w_tile * passes
        chunk = in_tile + w_tile
        depth = passes * ci
        mxu = 2.0 * e_t * kh * kw * depth
        eff = (rows / (np.ceil(rows / mxu_dim) * mxu_dim)) * np.sqrt(
            ci / (np.ceil(ci / mxu_dim) * mxu_dim)
        )
    elif geom.kind == "dot":
        k = float(geom.cin)
        bt = np.prod(ext[:, :-2], axis=1) if rank > 2 else np.ones(len(cfg))
        rows = bt * ext[:, -2] if rank >= 2 else ext[:, -1]
        stream = rows * k * mb
        reuse = (bt if geom.rhs_batched else 1.0) * k * ext[:, -1] * mb
        # The compiler streams the contraction in fixed chunks; only one is resident.
        passes = np.full(len(cfg), np.ceil(k / DOT_K_CHUNK))
        chunk = (stream + reuse) / passes
        mxu = 2.0 * e_t * k
        eff = rows / (np.ceil(rows / mxu_dim) * mxu_dim)
    elif geom.kind == "reduce":
        r_chunk = _reduce_chunk(geom, cfg, ext)
        passes = np.ceil(geom.reduce_size / r_chunk)
        stream = e_t * geom.reduce_size * mb
        chunk = e_t * r_chunk * mb
        vpu = vpu + e_t * geom.reduce_size
    side_tile = np.minimum(geom.side_elems[None, :], e_t[:, None])
    side = side_tile @ geom.side_bytes if len(geom.side_bytes) else np.zeros(len(cfg))
    small = geom.side_elems[None, :] < e_t[:, None]  # broadcast operands re-read per tile
    side_reuse = (side_tile * small) @ geom.side_bytes if len(geom.side_bytes) else 0.0
    out = e_t * geom.out_bytes
    return {
        "tiles": tiles,
        "passes": passes,
        "mxu": mxu,
        "eff": np.maximum(eff, 1.0 / 64),
        "vpu": vpu,
        "stream": stream + side - side_reuse + out,
        "reuse": reuse + side_reuse,
        "ws": 2.0 * (chunk + side) + e_t * 4.0 + out,
        "f32": np.full(len(cfg), mb >= 4),
    }


def _reduce_chunk(geom: KernelGeometry, cfg: np.ndarray, ext: np.ndarray) -> np.ndarray:
    """Reduced elements per pass: input tile elements over output tile elements (all of the
    reduction when the input bounds are empty)."""
    ri = len(geom.in_dims)
    in_b = cfg[:, CFG_INPUT : CFG_INPUT + ri]
    in_tile = np.prod(np.minimum(in_b * geom.in_granule, geom.in_dims), axis=1)
    out_tile = np.prod(np.minimum(ext, geom.out_dims), axis=1)
    chunk = np.clip(in_tile / out_tile, 1.0, geom.reduce_size)
    return np.where(cfg[:, CFG_INPUT + 7] > 0, chunk, geom.reduce_size)


def _roofline_time(t: Dict[str, np.ndarray], hw: Hardware) -> np.ndarray:
    """Max(compute, memory) per tile; a tile overflowing VMEM loses overlap and spills."""
    peak = np.where(t["f32"], hw.mxu_f32, hw.mxu_bf16)
    comp = t["mxu"] / (peak * t["eff"]) + t["vpu"] / hw.vpu
    mem = (t["stream"] + t["reuse"]) / hw.hbm
    over = t["ws"] / hw.vmem
    # An overflowing tile cannot double-buffer and re-fetches what spilled.
    per_tile = np.where(over <= 1.0, np.maximum(comp, mem), comp + mem * (1.0 + over))
    per_tile = per_tile + hw.tile_ns + hw.pass_ns * t["passes"]
    return t["tiles"] * per_tile + mem + hw.launch_ns


def _alt_time(t: Dict[str, np.ndarray], hw: Hardware, operand_bytes: float) -> np.ndarray:
    """Partial overlap, cached operand re-reads and a smooth capacity penalty."""
    peak = np.where(t["f32"], hw.mxu_f32, hw.mxu_bf16)
    comp = t["mxu"] / (peak * t["eff"]) + t["vpu"] / hw.vpu
    cached = operand_bytes <= hw.cache
    reuse = t["reuse"] / (hw.cache_speedup if cached else 1.0)
    mem = (t["stream"] + reuse) / hw.hbm
    per_tile = comp + mem - hw.overlap * np.minimum(comp, mem)
    over = np.maximum(t["ws"] / hw.vmem - 1.0, 0.0)
    per_tile = per_tile * (1.0 + 2.0 * over**2) + hw.tile_ns + hw.pass_ns * np.sqrt(t["passes"])
    return t["tiles"] * per_tile + 2.0 * mem + hw.launch_ns


def _check_cost_model(cost_model: str) -> None:
    """Raises ValueError naming the argument and the choices."""
    if cost_model not in COST_MODELS:
        raise ValueError(f"cost_model must be one of {COST_MODELS}, got {cost_model!r}")


def geometry_runtime(geom: KernelGeometry, config_feat: np.ndarray, cost_model: str) -> np.ndarray:
    """Noise-free runtime in ns of each config row for an extracted geometry."""
    _check_cost_model(cost_model)
    hw = HARDWARE[cost_model]
    cfg = np.asarray(config_feat, np.float64).reshape(-1, CONFIG_FEAT_DIM)
    terms = _tile_terms(geom, cfg, hw.mxu_dim)
    if cost_model == "roofline":
        return _roofline_time(terms, hw)
    operand_bytes = geom.operand_bytes + float(np.dot(geom.side_elems, geom.side_bytes))
    return _alt_time(terms, hw, operand_bytes)


def noise_free_runtime(
    node_feat: np.ndarray,
    node_opcode: np.ndarray,
    edge_index: np.ndarray,
    config_feat: np.ndarray,
    cost_model: str = "roofline",
) -> np.ndarray:
    """The generator's runtime (ns, float64, no noise) of each config, from features only."""
    geom = kernel_geometry(node_feat, node_opcode, edge_index)
    return geometry_runtime(geom, config_feat, cost_model)


# --------------------------------------------------------------------------------------
# Configs.
# --------------------------------------------------------------------------------------
def _bound_options(units: int) -> np.ndarray:
    """Bounds an autotuner tries on a dim of ``units`` granules: powers of two (cheap index
    maths, but padding when they do not divide) and even splits ceil(units / k), k <= 8."""
    units = max(int(units), 1)
    p = 2 ** np.arange(int(np.log2(units)) + 1)
    even = -(-units // np.arange(1, 9))
    return np.unique(np.concatenate([p, even]))


def _block(values: np.ndarray, width: int = 6) -> np.ndarray:
    """(c, k) bounds -> (c, 8) block of 6 dims + sum + product (product 0 when empty)."""
    out = np.zeros((len(values), width + 2))
    k = min(values.shape[1], width)
    out[:, :k] = values[:, :k]
    out[:, width] = values.sum(axis=1)
    out[:, width + 1] = np.prod(values, axis=1) if values.shape[1] else 0.0
    return out


def _config_pool(
    geom: KernelGeometry, meta: Dict, size: int, rng: np.random.Generator
) -> np.ndarray:
    """Up to ``size`` distinct random configs (float64 (c, 24))."""
    units = -(-geom.out_dims // geom.granule)
    choices = [_bound_options(int(u)) for u in units]
    if geom.kind == "conv":
        choices.append(_bound_options(-(-geom.cin // 8)))
    if "reduce" in meta:  # how many chunks the outermost reduced dim is split into
        choices.append(_reduce_splits(geom, meta))
    sizes = tuple(len(c) for c in choices)
    total = math.prod(sizes)
    # Distinct configs by drawing distinct flat indices of the option grid (no sorting).
    if total <= 4 * size:
        flat = rng.permutation(total)[:size]
    else:
        flat = np.unique(rng.integers(total, size=size + size // 8 + 8))[:size]
        flat = flat[rng.permutation(len(flat))]
    idx = np.unravel_index(flat, sizes)
    space = np.stack([c[i] for c, i in zip(choices, idx)], axis=1)
    return _config_rows(geom, meta, space)


def _config_rows(geom: KernelGeometry, meta: Dict, space: np.ndarray) -> np.ndarray:
    """Turns sampled bound columns into 24-wide config features."""
    rank = len(geom.out_dims)
    out_b = space[:, :rank].astype(np.float64)
    cfg = np.zeros((len(space), CONFIG_FEAT_DIM))
    cfg[:, CFG_OUTPUT : CFG_OUTPUT + 8] = _block(out_b)
    if geom.kind == "conv":
        kh, kw = geom.window
        kb = np.stack(
            [
                np.full(len(space), kh),
                np.full(len(space), kw),
                space[:, rank],
                out_b[:, geom.feat_dim],
            ],
            axis=1,
        )
        cfg[:, CFG_KERNEL : CFG_KERNEL + 8] = _block(kb.astype(np.float64))
    if "reduce" in meta:
        split = space[:, rank] if space.shape[1] > rank else np.ones(len(space))
        block = _block(_reduce_input_bounds(geom, meta, out_b, split))
        # Input bounds are only reported when the reduction itself is tiled (split > 1),
        # which keeps them mostly 0 as in the real data.
        cfg[:, CFG_INPUT : CFG_INPUT + 8] = block * (split > 1)[:, None]
    return cfg


def _reduce_splits(geom: KernelGeometry, meta: Dict) -> np.ndarray:
    """Split counts (powers of two) tried on the outermost reduced dim."""
    j = min(meta["reduce"][1])
    n_units = -(-int(geom.in_dims[j]) // int(geom.in_granule[j]))
    return 2 ** np.arange(int(np.log2(n_units)) + 1)


def _reduce_input_bounds(
    geom: KernelGeometry, meta: Dict, out_b: np.ndarray, split: np.ndarray
) -> np.ndarray:
    """Input tile of a reduction: kept dims follow the output tile, reduced dims are whole
    except the outermost, which is cut into ``split`` chunks (accumulated over passes)."""
    in_shape, red = meta["reduce"]
    in_rank = len(in_shape)
    g_in = geom.in_granule
    ext = out_b * geom.granule
    cols, k = [], 0
    for j in range(in_rank):
        n_units = -(-in_shape[j] // g_in[j])
        if j == min(red):
            cols.append(np.ceil(n_units / split).astype(float))
        elif j in red:
            cols.append(np.full(len(out_b), n_units, float))
        else:
            cols.append(np.clip(np.ceil(ext[:, k] / g_in[j]), 1, n_units))
            k += 1
    return np.stack(cols, axis=1)


def default_config(
    geom: KernelGeometry, meta: Optional[Dict] = None, cost_model: str = "roofline"
) -> np.ndarray:
    """The compiler-style default tile: ~64K output elements filled minor dims first, then
    halved on its largest dim until the working set fits half the scratchpad; it ignores
    compute/memory balance, so it is good on some kernels and poor on others."""
    rank = len(geom.out_dims)
    units = -(-geom.out_dims // geom.granule)
    b = np.ones(rank, np.int64)
    budget = 65536.0
    for d in np.argsort(-geom.granule, kind="stable"):
        fit = max(int(budget // geom.granule[d]), 1)
        opts = _bound_options(int(units[d]))
        b[d] = opts[opts <= fit].max() if (opts <= fit).any() else 1
        budget = max(budget / (b[d] * geom.granule[d]), 1.0)
    meta = meta or {}
    hw = HARDWARE[cost_model]
    extra = []  # conv input-feature chunk (halved) or reduce split count (doubled)
    if geom.kind == "conv":
        extra = [min(16, -(-geom.cin // 8))]
    elif "reduce" in meta:
        extra = [1]
    while True:
        row = _config_rows(geom, meta, np.array([list(b) + extra]))
        if _tile_terms(geom, row, hw.mxu_dim)["ws"][0] <= hw.vmem / 2:
            return row[0]
        if b.max() > 1:
            d = int(np.argmax(b))
            b[d] = -(-b[d] // 2)
        elif geom.kind == "conv" and extra[0] > 1:
            extra[0] = -(-extra[0] // 2)
        elif "reduce" in meta and extra[0] < _reduce_splits(geom, meta)[-1]:
            extra[0] *= 2
        else:
            return row[0]


# --------------------------------------------------------------------------------------
# One kernel.
# --------------------------------------------------------------------------------------
def _num_configs(kind: str, rng: np.random.Generator) -> int:
    """Heavy-tailed config count: large for convolutions, small for simple fusions."""
    median = {"conv": 400.0, "dot": 150.0, "reduce": 80.0, "elementwise": 80.0}[kind]
    return int(np.clip(np.round(median * np.exp(1.1 * rng.standard_normal())), 2, 20000))


def make_kernel(
    rng: np.random.Generator,
    *,
    family_weights: Sequence[float] = (0.3, 0.2, 0.15, 0.35),
    max_configs: Optional[int] = None,
    min_configs: int = 2,
    cost_model: str = "roofline",
    labelled: bool = True,
) -> Dict[str, np.ndarray]:
    """Builds one kernel's npz arrays (runtimes zero when ``labelled`` is False)."""
    _check_cost_model(cost_model)
    family = list(_FAMILIES)[rng.choice(4, p=np.asarray(family_weights) / sum(family_weights))]
    target = int(np.clip(np.round(40.0 * np.exp(0.6 * rng.standard_normal())), 2, MAX_NODES - 1))
    if rng.random() < 0.08:  # tiny fusions (a parameter and one or two ops) are common too
        target = int(rng.integers(2, 8))
    dtype = "bf16" if rng.random() < 0.25 else "f32"
    g = _Graph(layout_style=int(rng.choice(3, p=(0.5, 0.35, 0.15))))
    meta = _FAMILIES[family](g, target, dtype, rng)
    _finish(g, meta["root"], rng)
    node_feat, node_opcode, edge_index = g.arrays()
    geom = kernel_geometry(node_feat, node_opcode, edge_index)
    cfg, cost = _choose_configs(geom, meta, rng, max_configs, min_configs, cost_model)
    default_cost = geometry_runtime(
        geom, default_config(geom, meta, cost_model)[None, :], cost_model
    )[0]
    c = len(cfg)
    runtime = cost * np.exp(0.01 * rng.standard_normal(c))
    normalizer = default_cost * np.exp(0.01 * rng.standard_normal(c))
    return {
        "node_feat": node_feat,
        "node_opcode": node_opcode,
        "edge_index": edge_index,
        "config_feat": cfg.astype(np.float32),
        "config_runtime": np.maximum(np.round(runtime), 1).astype(np.int64) * int(labelled),
        "config_runtime_normalizers": np.maximum(np.round(normalizer), 1).astype(np.int64),
    }


def _choose_configs(
    geom: KernelGeometry,
    meta: Dict,
    rng: np.random.Generator,
    max_configs: Optional[int],
    min_configs: int,
    cost_model: str,
) -> Tuple[np.ndarray, np.ndarray]:
    """Samples configs like an autotuner: drops those far slower than the best seen, adds dups."""
    want = _num_configs(geom.kind, rng)
    want = min(want, max_configs if max_configs is not None else MAX_CONFIGS_DEFAULT)
    want = max(want, min_configs)
    # Cost the whole option grid when it is small (a random part of it otherwise), so the
    # number kept is limited by the pruning and the wanted count, not by luck.
    pool = _config_pool(geom, meta, max(4 * want, min(4096, 32 * want)), rng)
    cost = geometry_runtime(geom, pool, cost_model)
    # Per-kernel pruning threshold gives worst/best spreads of ~3-30x (heavy-tailed).
    spread = float(np.clip(14.0 * np.exp(0.8 * rng.standard_normal()), 2.5, 300.0))
    keep = np.flatnonzero(cost <= spread * cost.min())[:want]
    # ~2% re-measured duplicates (taking the place of distinct configs at the cap), and
    # duplicates to reach min_configs when the option grid is too small.
    n_dup = int(rng.binomial(len(keep), 0.02))
    keep = keep[: max(min(len(keep), want - n_dup), 1)]
    n_dup = max(n_dup, min_configs - len(keep))
    if n_dup:
        keep = np.append(keep, rng.choice(keep, size=n_dup))
        keep = keep[rng.permutation(len(keep))]
    return pool[keep], cost[keep]


# --------------------------------------------------------------------------------------
# Ids, files and the whole tree.
# --------------------------------------------------------------------------------------
def _benchmarks(seed: int) -> Dict[str, List[Tuple[str, str]]]:
    """Disjoint (name, group) benchmark pools for train and valid."""
    rng = np.random.default_rng([seed, 7919])
    names = []
    for group, (models, _) in _GROUPS.items():
        for m in models:
            for mode in ("train", "inference"):
                batch = int(_pick(rng, (1, 8, 16, 32, 64, 128, 256)))
                names.append((f"{m}_{mode}_batch_{batch}", group))
    order = rng.permutation(len(names))
    cut = int(0.8 * len(names))
    return {"train": [names[i] for i in order[:cut]], "valid": [names[i] for i in order[cut:]]}


def read_test_ids(path: str | Path) -> List[str]:
    """Tile ids (without ``tile:xla:``) of a sample_submission-style csv, in file order."""
    prefix = kaggle.TILE_PREFIX
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return [r[0][len(prefix) :] for r in rows if r and r[0].startswith(prefix)]


def _split_plan(
    counts: Dict[str, int], seed: int, test_ids: Optional[List[str]]
) -> List[Tuple[str, int, str, Tuple[float, ...]]]:
    """(split, index, tile_id, family weights) for every kernel, deterministic in seed."""
    pools = _benchmarks(seed)
    plan, seen = [], set()
    for s_idx, split in enumerate(SPLITS):
        rng = np.random.default_rng([seed, 104729, s_idx])
        for i in range(counts[split]):
            if split == "test":
                group = list(_GROUPS)[rng.integers(len(_GROUPS))]
                tid = test_ids[i] if test_ids is not None else rng.bytes(16).hex()
            else:
                name, group = pools[split][rng.integers(len(pools[split]))]
                tid = f"{name}_{rng.bytes(8).hex()}"
            while tid in seen:  # never two kernels with one id
                tid = hashlib.md5(tid.encode()).hexdigest() if split == "test" else tid + "0"
            seen.add(tid)
            plan.append((split, i, tid, _GROUPS[group][1]))
    return plan


def _write_npz(path: Path, arrays: Dict[str, np.ndarray]) -> None:
    """Writes an npz atomically (see `files.atomic_path`)."""
    with files.atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def generate(
    out_dir: str | Path,
    *,
    train: int = 300,
    valid: int = 60,
    test: int = 60,
    seed: int = 0,
    max_configs: Optional[int] = None,
    min_configs: int = 2,
    cost_model: str = "roofline",
    test_ids_from: Optional[str | Path] = None,
    progress: bool = True,
) -> dict:
    """Writes out_dir/{train,valid,test}/<tile_id>.npz; returns a summary dict
    {"train": n, "valid": n, "test": n, "kernels": total, "configs": total_configs, "out_dir": str}.

    ``test_ids_from`` (a sample_submission.csv) fixes the test ids and count; ``max_configs``
    caps configs per kernel (default 6000); test runtimes are written as zeros.
    """
    _check_cost_model(cost_model)
    if min_configs < 1 or (max_configs is not None and max_configs < min_configs):
        raise ValueError(f"need 1 <= min_configs <= max_configs, got {min_configs}, {max_configs}")
    test_ids = read_test_ids(test_ids_from) if test_ids_from is not None else None
    counts = {
        "train": train,
        "valid": valid,
        "test": len(test_ids) if test_ids is not None else test,
    }
    out = Path(out_dir)
    for split in SPLITS:
        (out / split).mkdir(parents=True, exist_ok=True)
    plan = _split_plan(counts, seed, test_ids)
    if progress:
        from tqdm import tqdm

        plan = tqdm(plan, desc="synthetic kernels", unit="kernel")
    total_configs = 0
    for split, i, tid, weights in plan:
        rng = np.random.default_rng([seed, SPLITS.index(split), i, 1])
        arrays = make_kernel(
            rng,
            family_weights=weights,
            max_configs=max_configs,
            min_configs=min_configs,
            cost_model=cost_model,
            labelled=split != "test",
        )
        total_configs += len(arrays["config_feat"])
        _write_npz(out / split / f"{tid}.npz", arrays)
    return {
        **counts,
        "kernels": sum(counts.values()),
        "configs": total_configs,
        "out_dir": str(out),
    }


def _quantiles(values: Sequence[float]) -> Dict[str, float]:
    """min / p10 / p50 / p90 / max of a list (empty -> {})."""
    if not len(values):
        return {}
    q = np.quantile(np.asarray(values, np.float64), [0.0, 0.1, 0.5, 0.9, 1.0])
    return {k: float(v) for k, v in zip(("min", "p10", "p50", "p90", "max"), q)}


def summarize(root: str | Path) -> dict:
    """Counts and quick stats of a generated (or real) tree, for the CLI to print.

    Returns {"root", "kernels", "configs", "splits": {split: {"kernels", "configs", "nodes",
    "edges", "configs_per_kernel", "best_ratio", "worst_over_best"}}} where the last five are
    quantile dicts (ratio stats only for splits with runtimes).
    """
    root = Path(root)
    splits: Dict[str, Dict] = {}
    for split in SPLITS:
        files = sorted((root / split).glob("*.npz"))
        nodes, edges, configs, best, spread = [], [], [], [], []
        for path in files:
            with np.load(path) as d:
                nodes.append(len(d["node_opcode"]))
                edges.append(len(d["edge_index"]))
                configs.append(len(d["config_runtime"]))
                rt = d["config_runtime"].astype(np.float64)
                if rt.min() > 0:
                    best.append(float(np.min(rt / d["config_runtime_normalizers"])))
                    spread.append(float(rt.max() / rt.min()))
        splits[split] = {
            "kernels": len(files),
            "configs": int(sum(configs)),
            "nodes": _quantiles(nodes),
            "edges": _quantiles(edges),
            "configs_per_kernel": _quantiles(configs),
            "best_ratio": _quantiles(best),
            "worst_over_best": _quantiles(spread),
        }
    return {
        "root": str(root),
        "kernels": sum(s["kernels"] for s in splits.values()),
        "configs": sum(s["configs"] for s in splits.values()),
        "splits": splits,
    }
