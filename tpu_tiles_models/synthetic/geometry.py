"""Reading a kernel back from its npz arrays: the tiled output, the main op and its operands,
the element-wise work per output element. Cost models see a kernel only through
`KernelGeometry` (or the same helpers), so runtimes are a function of what a learned model
sees."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpu_tiles_models.synthetic.features import (
    BYTES_BY_TYPE,
    COL_CONV_DIMS,
    COL_ELEM_TYPE,
    COL_FEATURE_GROUPS,
    COL_IS_ROOT,
    COL_LAYOUT,
    COL_SHAPE,
    COL_WINDOW_SIZE,
    COL_WINDOW_STRIDE,
    OPCODES,
)

_OP = OPCODES

# Op weights in VPU element-operations per output element (transcendentals are dearer;
# data movement costs a relayout pass).
VPU_WEIGHT: dict[int, float] = {
    **{_OP[o]: 4.0 for o in ("exponential", "log", "tanh", "logistic")},
    **{_OP[o]: 3.0 for o in ("rsqrt", "sqrt")},
    _OP["power"]: 6.0,
    _OP["divide"]: 2.0,
    _OP["transpose"]: 1.5,
    **{_OP[o]: 0.5 for o in ("pad", "slice", "concatenate", "copy")},
    _OP["broadcast"]: 0.25,
}
# Ops that cost nothing inside a fusion (no element-wise work of their own).
FREE_OPS = frozenset(
    {_OP["parameter"], _OP["constant"], _OP["tuple"], _OP["get-tuple-element"], _OP["reshape"]}
)


@dataclass(frozen=True)
class KernelGeometry:
    """Cost-relevant facts about a kernel, extracted from its features only."""

    kind: str  # the main op: "conv", "dot", "reduce" or "elementwise"
    out_dims: np.ndarray  # `[rank]` dims of the tiled output
    granule: np.ndarray  # `[rank]` elements per tile unit along each output dim (from the layout)
    out_bytes: float  # bytes per output element summed over all fusion outputs
    vpu_ops: float  # weighted element-wise ops per output element
    side_elems: np.ndarray  # `[p]` element counts of parameters that do not feed the main op
    side_bytes: np.ndarray  # `[p]` their bytes per element
    # `[p]` the output dim along which each runs contiguously in memory: its own layout's minor
    # dim; the last output dim for a lower-rank operand that is broadcast; -1 for a scalar
    side_minor: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    main_bytes: float = 4.0  # bytes per element of the main op's operands
    window: tuple[int, int] = (1, 1)  # convolution window (kh, kw)
    stride: int = 1  # convolution stride
    cin: int = 1  # input features per group (conv) or contraction size K (dot)
    batch_dim: int = 0  # output dim of the convolution's batch
    feat_dim: int = 0  # output dim of the convolution's features
    reduce_size: float = 1.0  # input elements per output element of a reduction
    rhs_batched: bool = False  # whether a batched dot's rhs has the batch dims too
    operand_bytes: float = 0.0  # bytes of the operand every tile re-reads (filter or rhs)
    in_dims: np.ndarray = field(default_factory=lambda: np.ones(1, np.int64))  # a reduction's input
    in_granule: np.ndarray = field(default_factory=lambda: np.ones(1, np.int64))  # its tile units


def operand_lists(n: int, edge_index: np.ndarray) -> list[list[int]]:
    """Producer lists per consumer, in operand (edge) order, for `n` nodes."""
    ops: list[list[int]] = [[] for _ in range(n)]
    for u, v in edge_index.tolist():
        ops[u].append(v)
    return ops


def ancestors(start: int, operands: list[list[int]]) -> set[int]:
    """All transitive producers of node `start`."""
    seen, stack = set(), list(operands[start])
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            stack.extend(operands[v])
    return seen


def dims_of(node_feat: np.ndarray, i: int) -> np.ndarray:
    """The shape of node `i`: the leading non-zero dims of columns 21..26, `[rank]` int64."""
    d = node_feat[i, COL_SHAPE : COL_SHAPE + 6].astype(np.int64)
    rank = int(np.argmin(np.append(d, 0) > 0))
    return d[:rank]


def granules(node_feat: np.ndarray, i: int, rank: int) -> np.ndarray:
    """Tile-unit sizes per dim of node `i`: 128 lanes on the minor-most layout dim, 8
    sublanes on the next, 1 elsewhere; `[rank]` int64."""
    g = np.ones(rank, np.int64)
    m2m = node_feat[i, COL_LAYOUT : COL_LAYOUT + max(rank, 1)].astype(np.int64)
    if rank >= 1:
        g[m2m[0] % rank] = 128
    if rank >= 2 and m2m[1] % rank != m2m[0] % rank:
        g[m2m[1] % rank] = 8
    return g


def element_bytes(node_feat: np.ndarray) -> np.ndarray:
    """Bytes per element of every node, from the one-hot element type: `[n]` float64."""
    return BYTES_BY_TYPE[np.argmax(node_feat[:, COL_ELEM_TYPE : COL_ELEM_TYPE + 19], axis=1)]


def root_outputs(node_feat: np.ndarray, opc: np.ndarray, operands: list[list[int]]) -> list[int]:
    """The fusion's outputs: the root, or the operands of a tuple root."""
    roots = np.flatnonzero(node_feat[:, COL_IS_ROOT] > 0)
    root = int(roots[-1]) if len(roots) else len(opc) - 1
    return operands[root] if opc[root] == _OP["tuple"] and operands[root] else [root]


def kernel_geometry(
    node_feat: np.ndarray, node_opcode: np.ndarray, edge_index: np.ndarray
) -> KernelGeometry:
    """The tiled output, main op and side inputs of a kernel, from its npz arrays (`[n, 140]`
    node features, `[n]` opcodes, `[m, 2]` `(consumer, producer)` edges)."""
    opc = np.asarray(node_opcode).astype(np.int64)
    n = len(opc)
    operands = operand_lists(n, np.asarray(edge_index))
    elems = node_feat[:, COL_SHAPE + 7].astype(np.float64)
    ebytes = element_bytes(node_feat)
    outs = root_outputs(node_feat, opc, operands)
    tiled = outs[0]
    out_dims = dims_of(node_feat, tiled)
    if len(out_dims) == 0:
        out_dims = np.ones(1, np.int64)
    out_elems = float(np.prod(out_dims))
    main, kind = -1, "elementwise"
    for op, name in ((_OP["convolution"], "conv"), (_OP["dot"], "dot"), (_OP["reduce"], "reduce")):
        cand = np.flatnonzero(opc == op)
        if len(cand):
            main, kind = int(cand[np.argmax(elems[cand])]), name
            break
    feeds_main = ancestors(main, operands) if main >= 0 else set()
    params = [i for i in np.flatnonzero(opc == _OP["parameter"]) if i not in feeds_main]
    vpu = 0.0
    for i in range(n):
        if opc[i] in FREE_OPS or i == main:
            continue
        vpu += VPU_WEIGHT.get(int(opc[i]), 1.0) * elems[i] / out_elems
    extra = _main_op_fields(kind, main, node_feat, operands, elems, ebytes)
    return KernelGeometry(
        kind=kind,
        out_dims=out_dims,
        granule=granules(node_feat, tiled, len(out_dims)),
        out_bytes=float(sum(max(ebytes[o], 1.0) for o in outs)),
        vpu_ops=vpu,
        side_elems=elems[params],
        side_bytes=ebytes[params],
        side_minor=np.array([_minor_dim(node_feat, i, len(out_dims)) for i in params], np.int64),
        **extra,
    )


def _minor_dim(node_feat: np.ndarray, i: int, out_rank: int) -> int:
    """The output dim along which parameter `i` runs contiguously (see `side_minor`)."""
    rank = len(dims_of(node_feat, i))
    if rank == 0:
        return -1
    if rank < out_rank:
        return out_rank - 1
    return int(node_feat[i, COL_LAYOUT]) % out_rank


def _main_op_fields(
    kind: str,
    main: int,
    node_feat: np.ndarray,
    operands: list[list[int]],
    elems: np.ndarray,
    ebytes: np.ndarray,
) -> dict[str, Any]:
    """The `KernelGeometry` fields that depend on the kind of main op."""
    if kind == "conv":
        x, k = operands[main][:2]
        row = node_feat[main]
        groups = max(int(row[COL_FEATURE_GROUPS]), 1)
        in_dims = dims_of(node_feat, x)
        return dict(
            window=(int(row[COL_WINDOW_SIZE]), int(row[COL_WINDOW_SIZE + 1])),
            stride=max(int(row[COL_WINDOW_STRIDE]), 1),
            cin=max(int(in_dims[int(row[COL_CONV_DIMS + 1])]) // groups, 1),
            batch_dim=int(row[COL_CONV_DIMS + 12]),
            feat_dim=int(row[COL_CONV_DIMS + 13]),
            main_bytes=float(ebytes[x]),
            operand_bytes=float(elems[k] * ebytes[k]),
        )
    if kind == "dot":
        lhs, rhs = operands[main][:2]
        return dict(
            cin=int(dims_of(node_feat, lhs)[-1]),
            main_bytes=float(ebytes[lhs]),
            operand_bytes=float(elems[rhs] * ebytes[rhs]),
            rhs_batched=len(dims_of(node_feat, rhs)) == len(dims_of(node_feat, main)) > 2,
        )
    if kind == "reduce":
        x = operands[main][0]
        in_dims = dims_of(node_feat, x)
        return dict(
            reduce_size=elems[x] / max(elems[main], 1.0),
            main_bytes=float(ebytes[x]),
            in_dims=in_dims,
            in_granule=granules(node_feat, x, len(in_dims)),
        )
    return {}
