"""Building a kernel graph node by node, with its 140 node features filled as the TpuGraphs
featuriser fills them. Shared by every generator family."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpu_tiles_models.formats import NODE_FEAT_DIM
from tpu_tiles_models.synthetic.features import (
    COL_BASE_DILATION,
    COL_BATCH_GROUPS,
    COL_CONV_DIMS,
    COL_DIMENSIONS,
    COL_ELEM_TYPE,
    COL_FEATURE_GROUPS,
    COL_LAYOUT,
    COL_PARAM_NUMBER,
    COL_REVERSAL_FALSE,
    COL_SHAPE,
    COL_WINDOW_DILATION,
    COL_WINDOW_PAD_HIGH,
    COL_WINDOW_PAD_LOW,
    COL_WINDOW_SIZE,
    COL_WINDOW_STRIDE,
    ELEM_TYPES,
    NODE_PRODUCT_COLS,
    OPCODES,
)

# A node feature row for an op with no optional fields.
_BLANK_ROW = np.zeros(NODE_FEAT_DIM, np.float64)
_BLANK_ROW[list(NODE_PRODUCT_COLS)] = 1.0


def put_seq(row: np.ndarray, start: int, values: Sequence[int], width: int) -> None:
    """Writes `values` (truncated to `width`, the block's value columns) at `row[start:]`,
    then their sum and product (1 for an empty list, like the featuriser's)."""
    for i, v in enumerate(values[:width]):
        row[start + i] = v
    row[start + width] = float(sum(values))
    row[start + width + 1] = float(math.prod(values))


def minor_to_major(rank: int, style: int) -> tuple[int, ...]:
    """The minor_to_major permutation of a shape of `rank` dims (empty for a scalar). `style`
    0 is row-major; 1 puts the batch dim second-minor (TPU convolution style) for rank >= 3;
    2 transposes rank-2 shapes."""
    if rank == 0:
        return ()
    if style == 1 and rank >= 3:
        return (rank - 1, 0) + tuple(range(rank - 2, 0, -1))
    if style == 2 and rank == 2:
        return (0, 1)
    return tuple(range(rank - 1, -1, -1))


@dataclass
class Graph:
    """Accumulates nodes (in topological order) and `[consumer, producer]` edges.

    With `layout_rng` set, a parameter of rank >= 2 is stored with its two minor-most layout
    dims swapped with probability `swapped_inputs` (a producer's layout that differs from its
    consumers', as XLA's layout assignment leaves some inputs).
    """

    layout_style: int  # the `minor_to_major` style of every node's layout (3: see `_layout`)
    layout_rng: np.random.Generator | None = None
    swapped_inputs: float = 0.0
    rows: list[np.ndarray] = field(default_factory=list)  # one `[140]` feature row per node
    ops: list[int] = field(default_factory=list)  # opcode ids
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)  # in operand order
    n_params: int = 0  # parameters added so far (the next parameter number)
    _perms: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def add(
        self,
        op: str,
        shape: Sequence[int],
        dtype: str,
        operands: Iterable[int] = (),
        dims: Sequence[int] = (),
    ) -> int:
        """Adds node `op` (a key of `OPCODES`) of element type `dtype` (of `ELEM_TYPES`) on
        its producers `operands`, `dims` its `dimensions` field; returns its index."""
        row = _BLANK_ROW.copy()
        shape = tuple(int(s) for s in shape)
        row[COL_ELEM_TYPE + ELEM_TYPES[dtype][0]] = 1.0
        put_seq(row, COL_SHAPE, shape, 6)
        for i, d in enumerate(dims[:6]):
            row[COL_DIMENSIONS + i] = d
        layout = self._layout(len(shape))
        if op == "parameter" and len(shape) >= 2 and self.layout_rng is not None:
            if self.layout_rng.random() < self.swapped_inputs:
                layout = (layout[1], layout[0], *layout[2:])
        for i, m in enumerate(layout):
            row[COL_LAYOUT + i] = m
        if op == "parameter":
            row[COL_PARAM_NUMBER] = self.n_params
            self.n_params += 1
        idx = len(self.rows)
        self.edges.extend((idx, int(o)) for o in operands)
        self.rows.append(row)
        self.ops.append(OPCODES[op])
        self.shapes.append(shape)
        return idx

    def _layout(self, rank: int) -> tuple[int, ...]:
        """The kernel's `minor_to_major` for a shape of `rank` dims: `minor_to_major(rank,
        layout_style)`, or for style 3 a permutation drawn once per rank from `layout_rng`
        (a layout XLA chose for this program)."""
        if self.layout_style != 3 or self.layout_rng is None or rank < 2:
            return minor_to_major(rank, min(self.layout_style, 2))
        if rank not in self._perms:
            self._perms[rank] = tuple(int(d) for d in self.layout_rng.permutation(rank))
        return self._perms[rank]

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """node_feat `[n, 140]` float32, node_opcode `[n]` uint8, edge_index `[m, 2]` int64."""
        feat = np.stack(self.rows).astype(np.float32)
        ops = np.asarray(self.ops, np.uint8)
        edges = np.asarray(self.edges, np.int64).reshape(-1, 2)
        return feat, ops, edges


def put_conv_fields(row: np.ndarray, window: tuple[int, int], stride: int, groups: int) -> None:
    """Fills the window and NHWC/HWIO convolution-dimension fields of a convolution's row:
    window (kh, kw) padded to keep the spatial size ("same"), `stride` on both spatial dims,
    `groups` feature groups (the input features for a depthwise convolution)."""
    pad = [(k - 1) // 2 for k in window]
    pad_hi = [k - 1 - p for k, p in zip(window, pad)]
    put_seq(row, COL_WINDOW_SIZE, list(window), 6)
    put_seq(row, COL_WINDOW_STRIDE, [stride, stride], 6)
    put_seq(row, COL_WINDOW_PAD_LOW, pad, 6)
    put_seq(row, COL_WINDOW_PAD_HIGH, pad_hi, 6)
    put_seq(row, COL_WINDOW_DILATION, [1, 1], 6)
    put_seq(row, COL_BASE_DILATION, [1, 1], 6)
    row[COL_REVERSAL_FALSE] = 2
    # input b,f,s0,s1,s2,s3 | kernel in_f,out_f,s0..s3 | output b,f
    conv_dims = [0, 3, 1, 2, 0, 0, 2, 3, 0, 1, 0, 0, 0, 3]
    row[COL_CONV_DIMS : COL_CONV_DIMS + 14] = conv_dims
    row[COL_FEATURE_GROUPS] = groups
    row[COL_BATCH_GROUPS] = 1


def pick(rng: np.random.Generator, values: Sequence[Any], weights: Sequence[float] | None = None):
    """One element of `values`, uniformly or with `weights` (normalised here)."""
    if weights is None:
        return values[rng.integers(len(values))]
    p = np.asarray(weights, float)
    return values[rng.choice(len(values), p=p / p.sum())]
