"""The `fusion` family: chains of fused op groups (`fusion_graphs`) timed by walking the
whole fused graph, node by node, for each tile.

How a tile changes runtime here, unlike `roofline` and `alt` (which cost one main op and its
side inputs):

- **Tiles propagate backwards** from the output through every node (broadcasts, reductions,
  transposes, reshapes, windows, contractions), so each node has its own tile.
- **Padding waste with cliffs**: every node's tile is padded to its own layout's hardware
  granules (128 lanes, 8 sublanes), matmul tiles to the 128-wide MXU, and partial edge
  tiles cost a full tile; a tile one granule too wide can double the work.
- **Phases**: the fused graph is cut at its anchors (contractions, reductions, windows,
  transposes, lookups); each phase is either compute- or memory-bound, and phases add up.
- **Memory efficiency**: reads run at full bandwidth only when a tile's contiguous rows are
  long (narrow minor-dim tiles of small element types are slow).
- **Scratchpad**: live intermediates, double-buffered inputs and accumulators must fit
  16 MiB. A tile that does not fit does not compile, so the autotuner never times it and the
  data hold none (the cost model would price one as a split fusion that spills).
- Configs: output bounds in granules of the output's layout; convolutions also tile their
  input features (kernel bounds); reductions that end the kernel may split the reduced dim
  (input bounds). Counts per kernel are heavy-tailed (2 to over 6,000); about 2.5% of rows
  are re-measured duplicates; measurement noise is 0.4%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tpu_tiles_models.formats import CONFIG_FEAT_DIM
from tpu_tiles_models.synthetic.features import (
    CFG_INPUT,
    CFG_KERNEL,
    CFG_OUTPUT,
    COL_DIMENSIONS,
    COL_FEATURE_GROUPS,
    COL_WINDOW_SIZE,
    COL_WINDOW_STRIDE,
    OPCODES,
)
from tpu_tiles_models.synthetic.fusion_graphs import build
from tpu_tiles_models.synthetic.geometry import (
    dims_of,
    element_bytes,
    granules,
    operand_lists,
    root_outputs,
)
from tpu_tiles_models.synthetic.tiling import autotuner_keep, bounds_block, compilable

_OP = OPCODES
MAX_CONFIGS_DEFAULT = 8000
NOISE = 0.004  # measurement noise (lognormal sigma): re-measured duplicates differ ~0.4%

# The simulated core.
MXU_BF16 = 70e3  # flop/ns
MXU_F32 = 23e3
VPU = 3.0e3  # element-ops/ns
HBM = 600.0  # bytes/ns
VMEM = 16 * 2**20  # bytes
TILE_NS = 280.0  # per tile (grid step)
PASS_NS = 90.0  # per extra contraction or reduction pass
SPLIT_NS = 1500.0  # per extra sub-kernel when the fusion does not fit VMEM
LAUNCH_NS = 2000.0
OVERLAP_LOSS = 0.2  # share of the shorter of compute/memory not hidden within a phase
DMA_RUN = 2048.0  # contiguous bytes for full bandwidth

_FREE = {_OP[o] for o in ("parameter", "constant", "reshape", "bitcast", "tuple")}
_ANCHORS = {
    _OP[o] for o in ("dot", "convolution", "reduce", "reduce-window", "transpose", "dynamic-slice")
}
_VPU_WEIGHT = {
    **{_OP[o]: 4.0 for o in ("exponential", "log", "tanh", "logistic")},
    **{_OP[o]: 3.0 for o in ("rsqrt", "sqrt")},
    _OP["divide"]: 2.0,
    _OP["clamp"]: 2.0,
    _OP["transpose"]: 2.0,
    _OP["pad"]: 0.7,
    _OP["slice"]: 0.5,
    _OP["dynamic-slice"]: 0.5,
    _OP["broadcast"]: 0.3,
    _OP["iota"]: 0.5,
}


@dataclass
class FusionView:
    """A `fusion` kernel read back from its npz arrays (what its cost depends on).

    Attributes:
        opc: `[n]` opcodes.
        shapes: every node's dims.
        ebytes: `[n]` bytes per element.
        granule: per node, `[rank]` tile units (128 on the minor dim, 8 on the next).
        attr: per node, its `dimensions` field cut to the entries that are set.
        operands: producers per node, in operand order.
        outputs: the kernel's outputs (the first is the tiled one).
        phase: `[n]` phase of each node (parameters: of their first consumer).
        live: `[n]` share of a node's tile that stays resident (long-lived values: 1).
        windows: per convolution or reduce-window node, its window sizes `[6]`, strides
            `[6]` and feature group count.
    """

    opc: np.ndarray
    shapes: list[np.ndarray]
    ebytes: np.ndarray
    granule: list[np.ndarray]
    attr: list[list[int]]
    operands: list[list[int]]
    outputs: list[int]
    phase: np.ndarray
    live: np.ndarray
    windows: dict[int, tuple[np.ndarray, np.ndarray, int]]

    @property
    def out_shape(self) -> np.ndarray:
        return self.shapes[self.outputs[0]]

    @property
    def out_granule(self) -> np.ndarray:
        return self.granule[self.outputs[0]]


def _attr(
    node_feat: np.ndarray, i: int, opc: int, operands: list[list[int]], shapes: list[np.ndarray]
) -> list[int]:
    """The entries of node `i`'s `dimensions` field that the op defines."""
    row = node_feat[i, COL_DIMENSIONS : COL_DIMENSIONS + 6].astype(np.int64)
    if opc == _OP["broadcast"] and operands[i]:
        return row[: len(shapes[operands[i][0]])].tolist()
    if opc == _OP["reduce"] and operands[i]:
        return row[: len(shapes[operands[i][0]]) - len(shapes[i])].tolist()
    if opc == _OP["transpose"]:
        return row[: len(shapes[i])].tolist()
    return []


def read_view(node_feat: np.ndarray, node_opcode: np.ndarray, edge_index: np.ndarray) -> FusionView:
    """Reads a kernel's arrays into a `FusionView`.

    Args:
      node_feat: `[n, 140]` node features.
      node_opcode: `[n]` opcodes.
      edge_index: `[m, 2]` `(consumer, producer)` edges.
    """
    opc = np.asarray(node_opcode).astype(np.int64)
    n = len(opc)
    operands = operand_lists(n, np.asarray(edge_index))
    shapes = [dims_of(node_feat, i) for i in range(n)]
    granule = [granules(node_feat, i, len(shapes[i])) for i in range(n)]
    attr = [_attr(node_feat, i, int(opc[i]), operands, shapes) for i in range(n)]
    phase = np.cumsum(np.isin(opc, list(_ANCHORS)))
    consumers: list[list[int]] = [[] for _ in range(n)]
    for u in range(n):
        for v in operands[u]:
            consumers[v].append(u)
    live = np.full(n, 0.35)
    for v in range(n):
        if consumers[v]:
            phase[v] = phase[v] if opc[v] not in _FREE else phase[min(consumers[v])]
            live[v] = 1.0 if max(consumers[v]) - v > 3 else 0.35
    windows = {}
    for i in np.flatnonzero(np.isin(opc, [_OP["convolution"], _OP["reduce-window"]])):
        row = node_feat[i]
        win = row[COL_WINDOW_SIZE : COL_WINDOW_SIZE + 6].astype(np.int64)
        stride = row[COL_WINDOW_STRIDE : COL_WINDOW_STRIDE + 6].astype(np.int64)
        windows[int(i)] = (win, np.maximum(stride, 1), max(int(row[COL_FEATURE_GROUPS]), 1))
    return FusionView(
        opc=opc,
        shapes=shapes,
        ebytes=np.maximum(element_bytes(node_feat), 1.0),
        granule=granule,
        attr=attr,
        operands=operands,
        outputs=root_outputs(node_feat, opc, operands),
        phase=phase,
        live=live,
        windows=windows,
    )


def _whole(shape: np.ndarray, c: int) -> np.ndarray:
    return np.broadcast_to(shape.astype(np.float64), (c, len(shape)))


def _mapped(t_u: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Tile `[c, len(src)]` of a node of shape `src` that holds the same elements as tile
    `t_u` of a differently shaped node (reshape, bitcast, another output): as many elements,
    filled from the minor dim outwards."""
    left = np.prod(t_u, axis=1)
    req = np.ones((len(t_u), len(src)))
    for j in range(len(src) - 1, -1, -1):
        req[:, j] = np.minimum(src[j], left)
        left = np.ceil(left / req[:, j])
    return req


def _operand_tile(v: FusionView, u: int, pos: int, t_u: np.ndarray) -> np.ndarray:
    """The tile operand `pos` of node `u` needs when `u` computes tile `t_u` `[c, rank_u]`."""
    op, src, dst = int(v.opc[u]), v.shapes[v.operands[u][pos]], v.shapes[u]
    c = len(t_u)
    if len(src) == 0:
        return np.zeros((c, 0))
    if op == _OP["broadcast"]:
        dims = v.attr[u]
        return np.stack([t_u[:, d] for d in dims], axis=1) if dims else np.zeros((c, 0))
    if op == _OP["transpose"]:
        req = np.empty((c, len(src)))
        for j, d in enumerate(v.attr[u]):
            req[:, d] = t_u[:, j]
        return req
    if op == _OP["reduce"]:
        red = set(v.attr[u])
        req, k = _whole(src, c).copy(), 0
        for j in range(len(src)):
            if j not in red:
                req[:, j] = t_u[:, k]
                k += 1
        return req
    if op in (_OP["convolution"], _OP["reduce-window"]):
        return _window_operand(v, u, pos, t_u)
    if op == _OP["dot"]:
        req = _whole(src, c).copy()
        if pos == 0:  # lhs [B.., M, K]: K whole
            req[:, :-1] = t_u[:, :-1]
        else:  # rhs [B.., K, N]
            req[:, -1] = t_u[:, -1]
            if len(src) == len(dst):
                req[:, :-2] = t_u[:, :-2]
        return req
    if len(src) == len(dst) and op not in (_OP["reshape"], _OP["bitcast"]):
        return np.minimum(t_u, src)
    return _mapped(t_u, src)


def _window_operand(v: FusionView, u: int, pos: int, t_u: np.ndarray) -> np.ndarray:
    """Convolution / reduce-window operands: input rows with their halo, filters whole."""
    src = v.shapes[v.operands[u][pos]]
    win, stride, groups = v.windows[u]
    c, rank = len(t_u), len(v.shapes[u])
    if int(v.opc[u]) == _OP["reduce-window"]:
        req = (t_u - 1) * stride[:rank] + win[:rank]
        return np.minimum(req, src)
    if pos == 1:  # filter [window.., cin/groups, cout]: cout follows the output features
        req = _whole(src, c).copy()
        req[:, -1] = t_u[:, -1]
        return req
    req = _whole(src, c).copy()  # input [N, spatial.., C]
    req[:, 0] = t_u[:, 0]
    for j in range(1, rank - 1):
        req[:, j] = np.minimum((t_u[:, j] - 1) * stride[j - 1] + win[j - 1], src[j])
    if groups > 1:  # depthwise: input features follow the output features
        req[:, -1] = t_u[:, -1]
    return req


def _tiles(v: FusionView, ext: np.ndarray) -> list[np.ndarray]:
    """Every node's tile `[c, rank]` for output tiles `ext` `[c, R]`, propagated backwards."""
    n, c = len(v.opc), len(ext)
    req: list[np.ndarray | None] = [None] * n
    first = v.outputs[0]
    req[first] = np.minimum(ext, v.shapes[first])
    for o in v.outputs[1:]:
        other = _mapped(req[first], v.shapes[o])
        req[o] = other if req[o] is None else np.maximum(req[o], other)
    for u in range(n - 1, -1, -1):
        if req[u] is None:
            req[u] = _whole(v.shapes[u], c)
        if int(v.opc[u]) == _OP["tuple"]:
            continue
        for pos, w in enumerate(v.operands[u]):
            need = _operand_tile(v, u, pos, req[u])
            req[w] = need if req[w] is None else np.maximum(req[w], need)
    return req  # type: ignore[return-value]


def _pad(t: np.ndarray, g: np.ndarray) -> np.ndarray:
    return np.ceil(t / g) * g


def _dma_eff(t: np.ndarray, shape: np.ndarray, granule: np.ndarray, nbytes: float) -> np.ndarray:
    """Bandwidth share of reading a tile `t` `[c, rank]`: long contiguous runs read fast."""
    if len(shape) == 0:
        return np.ones(len(t))
    minor = int(np.argmax(granule))
    run = t[:, minor] * nbytes
    if len(shape) >= 2:
        second = int(np.argsort(granule)[-2])
        run = np.where(t[:, minor] >= shape[minor], run * t[:, second], run)
    return np.clip((run / DMA_RUN) ** 0.4, 0.12, 1.0)


@dataclass
class _Knobs:
    """The non-output parts of a config: input-feature chunk (convolution, elements) and
    reduced-dim split count (a reduction that ends the kernel), each `[c]`."""

    ci_chunk: np.ndarray
    split: np.ndarray


def _conv_node(v: FusionView) -> int:
    """The convolution whose input features the config chunks (not depthwise), or -1."""
    cand = np.flatnonzero(v.opc == _OP["convolution"])
    return int(cand[0]) if len(cand) and v.windows[int(cand[0])][2] == 1 else -1


def _reduce_split_dim(v: FusionView) -> tuple[int, int, int]:
    """(reduction node, its input node, the outermost reduced dim) of a reduction the tiled
    output comes straight from, or (-1, -1, -1)."""
    red = _reduce_root(v)
    if red < 0 or not v.attr[red]:
        return -1, -1, -1
    return red, v.operands[red][0], min(v.attr[red])


def _reduce_root(v: FusionView) -> int:
    """The reduction the tiled output comes straight from, or -1."""
    node = v.outputs[0]
    while int(v.opc[node]) in _FREE - {_OP["parameter"], _OP["constant"]} and v.operands[node]:
        node = v.operands[node][0]
    return node if int(v.opc[node]) == _OP["reduce"] else -1


@dataclass
class _Totals:
    """Per-tile sums over a kernel's nodes, for `c` configs and `p` phases.

    Attributes:
        comp: `[p, c]` compute ns per phase.
        mem: `[p, c]` memory ns per phase.
        resident: `[c]` bytes that stay in VMEM for the tile (buffered inputs, outputs,
            accumulators).
        inter: `[c]` bytes of live intermediates.
    """

    comp: np.ndarray
    mem: np.ndarray
    resident: np.ndarray
    inter: np.ndarray


def _elements(t: np.ndarray, granule: np.ndarray | None = None) -> np.ndarray:
    """`[c]` elements of tiles `t` `[c, rank]`, padded to `granule` when given (1 for a scalar)."""
    if t.shape[1] == 0:
        return np.ones(len(t))
    return np.prod(t if granule is None else _pad(t, granule), axis=1)


def _read(tot: _Totals, v: FusionView, i: int, t: np.ndarray, frac: np.ndarray) -> None:
    """Adds parameter `i` with tile `t`: its read, and a double-buffered `frac` of it."""
    b = float(v.ebytes[i])
    eff = _dma_eff(t, v.shapes[i], v.granule[i], b)
    tot.mem[v.phase[i]] += _elements(t) * b / (HBM * eff)
    tot.resident += 2.0 * _elements(t, v.granule[i]) * b * frac


def _op(tot: _Totals, v: FusionView, i: int, tiles: list[np.ndarray], knobs: _Knobs) -> None:
    """Adds computing node `i`: its work in its phase and its live tile."""
    t = tiles[i]
    tot.comp[v.phase[i]] += _compute(v, i, t, tiles, knobs)
    tot.inter += _elements(t, v.granule[i]) * float(v.ebytes[i]) * v.live[i]
    if int(v.opc[i]) in (_OP["dot"], _OP["convolution"]):
        rows = np.prod(t[:, :-1], axis=1)
        tot.resident += _pad(rows, 128) * _pad(t[:, -1], 128) * 4.0  # f32 accumulator


def _write(tot: _Totals, v: FusionView, o: int, t: np.ndarray) -> None:
    """Adds output `o` with tile `t`: its write in the last phase, double-buffered."""
    b = float(v.ebytes[o])
    eff = _dma_eff(t, v.shapes[o], v.granule[o], b)
    tot.mem[-1] += _elements(t) * b / (HBM * eff)
    tot.resident += 2.0 * _elements(t) * b


def tile_costs(v: FusionView, ext: np.ndarray, knobs: _Knobs) -> dict[str, np.ndarray]:
    """Per-config runtime (ns) and working set (bytes) of a kernel.

    Args:
      v: the kernel.
      ext: `[c, R]` output tile extents in elements.
      knobs: the configs' input-feature chunks and reduction splits.

    Returns:
      `{"runtime": [c], "ws": [c]}`.
    """
    c, n_phases = len(ext), int(v.phase.max()) + 1
    tiles = _tiles(v, ext)
    tot = _Totals(np.zeros((n_phases, c)), np.zeros((n_phases, c)), np.zeros(c), np.zeros(c))
    conv, red = _conv_node(v), _reduce_split_dim(v)[0]
    conv_inputs = _inputs_of(v, conv) if conv >= 0 else set()
    red_inputs = _inputs_of(v, red) if red >= 0 else set()
    for i, t in enumerate(tiles):
        op = int(v.opc[i])
        if op == _OP["parameter"]:
            frac = np.ones(c)  # of the input resident at once: a chunk of what is read
            if i in conv_inputs:
                frac = np.minimum(knobs.ci_chunk / max(v.shapes[i][-1], 1), 1.0)
            if i in red_inputs:
                frac = 1.0 / knobs.split
            _read(tot, v, i, t, frac)
        elif op not in _FREE:
            _op(tot, v, i, tiles, knobs)
    for o in v.outputs:
        _write(tot, v, o, tiles[o])
    passes = np.ones(c)
    if conv >= 0:
        passes = np.ceil(v.shapes[v.operands[conv][0]][-1] / knobs.ci_chunk)
    if red >= 0:
        passes = knobs.split
    return _runtime(tot, v, ext, passes)


def _runtime(tot: _Totals, v: FusionView, ext: np.ndarray, passes: np.ndarray) -> dict:
    """Phases add up; each overlaps compute with memory imperfectly; a working set beyond
    VMEM splits the fusion (a fixed cost per split, and spilled intermediates)."""
    ws = tot.resident + tot.inter
    splits = np.maximum(np.ceil(ws / VMEM), 1.0)
    mem = tot.mem.copy()
    mem[-1] += 2.0 * tot.inter * (1.0 - 1.0 / splits) / HBM
    comp = tot.comp
    per_tile = np.sum(np.maximum(comp, mem) + OVERLAP_LOSS * np.minimum(comp, mem), axis=0)
    per_tile += TILE_NS + PASS_NS * (passes - 1.0) + SPLIT_NS * (splits - 1.0)
    out = v.out_shape
    n_tiles = np.prod(np.ceil(out / np.minimum(ext, _pad(out, v.out_granule))), axis=1)
    fill = mem[0]  # the first tile's reads overlap with nothing
    return {"runtime": n_tiles * per_tile + fill + LAUNCH_NS, "ws": ws}


def _inputs_of(v: FusionView, node: int) -> set[int]:
    """Parameters that reach `node`'s first operand through free or element-wise ops."""
    seen, stack = set(), [v.operands[node][0]] if v.operands[node] else []
    while stack:
        w = stack.pop()
        if w in seen:
            continue
        seen.add(w)
        if int(v.opc[w]) != _OP["parameter"] and int(v.opc[w]) not in _ANCHORS:
            stack.extend(v.operands[w])
    return {w for w in seen if int(v.opc[w]) == _OP["parameter"]}


def _compute(
    v: FusionView, i: int, t: np.ndarray, tiles: list[np.ndarray], knobs: _Knobs
) -> np.ndarray:
    """ns of compute per tile for node `i` with tile `t` `[c, rank]`."""
    op = int(v.opc[i])
    padded = _elements(t, v.granule[i])
    mxu = MXU_BF16 if v.ebytes[i] <= 2 else MXU_F32
    if op == _OP["dot"]:
        k = float(v.shapes[v.operands[i][0]][-1])
        rows = np.prod(t[:, :-1], axis=1)
        return 2.0 * _pad(rows, 128) * _pad(t[:, -1], 128) * _pad(k, 128) / mxu
    if op == _OP["convolution"]:
        win, _, groups = v.windows[i]
        taps = float(np.prod(win[: len(v.shapes[i]) - 2]))
        if groups > 1:
            return 2.0 * padded * taps / VPU
        cin = float(v.shapes[v.operands[i][0]][-1])
        chunk = np.minimum(knobs.ci_chunk, cin)
        n_pass = np.ceil(cin / chunk)
        rows = np.prod(t[:, :-1], axis=1)
        depth = _pad(taps * chunk, 128) * n_pass
        return 2.0 * _pad(rows, 128) * _pad(t[:, -1], 128) * depth / mxu
    if op == _OP["reduce"]:
        src = v.operands[i][0]
        return _elements(tiles[src], v.granule[src]) / VPU
    if op == _OP["reduce-window"]:
        win, _, _ = v.windows[i]
        return padded * float(np.prod(win)) / VPU
    return _VPU_WEIGHT.get(op, 1.0) * padded / VPU


# --------------------------------------------------------------------------------------
# Configs.
# --------------------------------------------------------------------------------------
MAX_BOUND = 256  # granules per dim of an output tile
MAX_TILE = 2048  # granules per output tile (product of the bounds)


def bound_options(units: int) -> np.ndarray:
    """Bounds tried on a dim of `units` granules: powers of two, even splits ceil(units / k)
    for k <= 8, and a few odd sizes (each may leave a partial edge tile), at most
    `MAX_BOUND`."""
    units = max(int(units), 1)
    opts = [2 ** np.arange(int(np.log2(units)) + 1), -(-units // np.arange(1, 9))]
    opts.append(np.array([3, 5, 6, 7, 12, 24, 48]))
    values = np.unique(np.concatenate(opts))
    return values[(values <= units) & (values <= MAX_BOUND)]


def _choices(v: FusionView) -> list[np.ndarray]:
    """Option lists: one per output dim, then the conv input-feature chunk (units of 8) or the
    reduction split count when the kernel has one."""
    units = -(-v.out_shape // v.out_granule)
    choices = [bound_options(int(u)) for u in units]
    conv = _conv_node(v)
    red, src, j = _reduce_split_dim(v)
    if conv >= 0:
        choices.append(bound_options(-(-int(v.shapes[v.operands[conv][0]][-1]) // 8)))
    elif red >= 0:
        n_units = -(-int(v.shapes[src][j]) // int(v.granule[src][j]))
        choices.append(2 ** np.arange(int(np.log2(n_units)) + 1))
    return choices


def config_rows(v: FusionView, space: np.ndarray) -> np.ndarray:
    """Option columns `[c, R (+1)]` -> `[c, 24]` config features."""
    rank = len(v.out_shape)
    out_b = space[:, :rank].astype(np.float64)
    cfg = np.zeros((len(space), CONFIG_FEAT_DIM))
    cfg[:, CFG_OUTPUT : CFG_OUTPUT + 8] = bounds_block(out_b)
    conv = _conv_node(v)
    if conv >= 0:
        win = v.windows[conv][0]
        ci = space[:, rank] if space.shape[1] > rank else np.ones(len(space))
        same = len(v.out_shape) == len(v.shapes[conv]) and v.out_shape[-1] == v.shapes[conv][-1]
        feat = out_b[:, -1] if same else np.ones(len(space))
        kb = np.stack([np.full(len(space), win[0]), np.full(len(space), win[1]), ci, feat], 1)
        cfg[:, CFG_KERNEL : CFG_KERNEL + 8] = bounds_block(kb.astype(np.float64))
    elif space.shape[1] > rank:  # input bounds only when the reduction is split
        split = space[:, rank].astype(np.float64)
        in_b = _reduce_input_bounds(v, out_b, split)
        cfg[:, CFG_INPUT : CFG_INPUT + 8] = bounds_block(in_b) * (split > 1)[:, None]
    return cfg


def _reduce_input_bounds(v: FusionView, out_b: np.ndarray, split: np.ndarray) -> np.ndarray:
    """`[c, in_rank]` input tile of a split reduction, in its granules: kept dims follow the
    output bounds (when the output is the reduction's own shape), the outermost reduced dim
    is cut into `split` chunks, other reduced dims are whole."""
    red, src, j = _reduce_split_dim(v)
    units = -(-v.shapes[src] // v.granule[src])
    in_b = np.tile(units, (len(split), 1)).astype(np.float64)
    kept = [d for d in range(len(units)) if d not in v.attr[red]]
    if len(kept) == out_b.shape[1] and np.array_equal(v.shapes[red], v.out_shape):
        in_b[:, kept] = np.minimum(out_b * v.out_granule / v.granule[src][kept], units[kept])
        in_b[:, kept] = np.maximum(np.ceil(in_b[:, kept]), 1)
    in_b[:, j] = np.ceil(units[j] / split)
    return in_b


def _knobs(v: FusionView, cfg: np.ndarray) -> tuple[np.ndarray, _Knobs]:
    """Output extents `[c, R]` and the other knobs, read back from config features."""
    rank = len(v.out_shape)
    units = -(-v.out_shape // v.out_granule)
    b = np.clip(cfg[:, CFG_OUTPUT : CFG_OUTPUT + rank], 1, units)
    ext = b * v.out_granule
    ci = np.maximum(cfg[:, CFG_KERNEL + 2], 1.0) * 8.0
    split = np.ones(len(cfg))
    red, src, j = _reduce_split_dim(v)
    if red >= 0:
        full = -(-int(v.shapes[src][j]) // int(v.granule[src][j]))
        chunk = np.maximum(cfg[:, CFG_INPUT + j], 1.0)
        split = np.where(cfg[:, CFG_INPUT + 7] > 0, np.ceil(full / chunk), 1.0)
    return ext, _Knobs(ci, split)


def view_runtime(v: FusionView, config_feat: np.ndarray) -> np.ndarray:
    """Noise-free `[c]` runtimes (ns) of config rows `[c, 24]`."""
    cfg = np.asarray(config_feat, np.float64).reshape(-1, CONFIG_FEAT_DIM)
    ext, knobs = _knobs(v, cfg)
    return tile_costs(v, ext, knobs)["runtime"]


def runtime(
    node_feat: np.ndarray, node_opcode: np.ndarray, edge_index: np.ndarray, config_feat: np.ndarray
) -> np.ndarray:
    """Noise-free `[c]` runtimes (ns) of a kernel's configs, from its npz arrays only."""
    return view_runtime(read_view(node_feat, node_opcode, edge_index), config_feat)


def _pool(v: FusionView, size: int, rng: np.random.Generator) -> np.ndarray:
    """Up to `size` distinct random configs of the option grid whose output tile has at most
    `MAX_TILE` granules: `[c, 24]`."""
    choices = _choices(v)
    sizes = tuple(len(ch) for ch in choices)
    total = math.prod(sizes)
    if total <= 4 * size:
        flat = rng.permutation(total)
    else:
        flat = rng.choice(total, size=4 * size, replace=False)
    space = np.stack([ch[i] for ch, i in zip(choices, np.unravel_index(flat, sizes))], axis=1)
    rank = len(v.out_shape)
    space = space[np.prod(space[:, :rank], axis=1) <= MAX_TILE][:size]
    return config_rows(v, space)


def _halving_chain(v: FusionView, budget: float) -> list[list[float]]:
    """Option columns of one default candidate and its halvings: about `budget` output
    elements filled minor dims first (the input-feature chunk up to 128 channels, no
    reduction split), then halved on the largest bound, step by step, down to all ones."""
    choices = _choices(v)
    rank = len(v.out_shape)
    b = np.ones(rank)
    for d in sorted(range(rank), key=lambda d: (-v.out_granule[d], -d)):  # minor dims first
        opts = choices[d]
        fit = opts[(opts * v.out_granule[d] <= budget) & (opts * b.prod() <= MAX_TILE)]
        b[d] = fit.max() if len(fit) else 1
        budget = max(budget / (b[d] * v.out_granule[d]), 1.0)
    extra = []
    if len(choices) > rank:
        opts = choices[rank]
        extra = [float(opts[opts <= 16].max())] if _conv_node(v) >= 0 else [1.0]
    chain = [list(b) + extra]
    while b.max() > 1:
        d = int(np.argmax(b))
        b[d] = -(-b[d] // 2)
        chain.append(list(b) + extra)
    return chain


def default_config(v: FusionView) -> np.ndarray:
    """The compiler's default tile: the fastest of a few size-driven candidates (8K to 2M
    output elements, each as is and halved until its working set fits half the scratchpad),
    so it is sound but blind to padding cliffs and phase balance. `[24]` features."""
    chains = [_halving_chain(v, 2.0**e) for e in (13, 15, 17, 19, 21)]
    rows = config_rows(v, np.array([r for chain in chains for r in chain]))
    ext, knobs = _knobs(v, rows)
    costs = tile_costs(v, ext, knobs)
    picks, start = [], 0
    for chain in chains:
        fits = np.flatnonzero(costs["ws"][start : start + len(chain)] <= VMEM / 2)
        picks += [start, start + (int(fits[0]) if len(fits) else len(chain) - 1)]
        start += len(chain)
    return rows[min(picks, key=lambda i: costs["runtime"][i])]


# --------------------------------------------------------------------------------------
# One kernel.
# --------------------------------------------------------------------------------------
# Median configs wanted per anchor kind (lognormal around it; small option grids give fewer).
_MEDIAN_CONFIGS = {
    "conv": 900.0,
    "dot": 250.0,
    "reduce": 60.0,
    "pool": 120.0,
    "cumsum": 30.0,
    "gather": 40.0,
    "loop": 45.0,
    "optimizer": 20.0,
}


def make_kernel(
    rng: np.random.Generator,
    *,
    kind_weights: Sequence[float] = (0.3, 0.2, 0.15, 0.35),
    max_configs: int | None = None,
    min_configs: int = 2,
    labelled: bool = True,
) -> dict[str, np.ndarray]:
    """Builds one `fusion` kernel's npz arrays.

    Args:
      rng: the kernel's own generator.
      kind_weights: relative odds of conv, dot, reduce and element-wise anchors.
      max_configs: cap on configs (default `MAX_CONFIGS_DEFAULT`).
      min_configs: floor on configs (re-measured duplicates fill up small option grids).
      labelled: False writes zero runtimes (the test split).

    Returns:
      The six npz arrays.
    """
    g, kind = build(rng, kind_weights)
    node_feat, node_opcode, edge_index = g.arrays()
    view = read_view(node_feat, node_opcode, edge_index)
    want = _MEDIAN_CONFIGS[kind] * np.exp(1.2 * rng.standard_normal())
    want = int(np.clip(np.round(want), 2, 20000))
    want = max(min(want, max_configs or MAX_CONFIGS_DEFAULT), min_configs)
    pool = _pool(view, max(3 * want, min(4096, 24 * want)), rng)
    costs = tile_costs(view, *_knobs(view, pool))
    fits = compilable(costs["ws"], VMEM)
    pool, cost = pool[fits], costs["runtime"][fits]
    spread = float(np.clip(10.0 * np.exp(0.9 * rng.standard_normal()), 2.0, 300.0))
    keep = autotuner_keep(cost, want, min_configs, spread, 0.025, rng)
    cfg, cost = pool[keep], cost[keep]
    default = view_runtime(view, default_config(view)[None, :])[0]
    c = len(cfg)
    measured = cost * np.exp(NOISE * rng.standard_normal(c))
    normalizer = default * np.exp(NOISE * rng.standard_normal(c))
    return {
        "node_feat": node_feat,
        "node_opcode": node_opcode,
        "edge_index": edge_index,
        "config_feat": cfg.astype(np.float32),
        "config_runtime": np.maximum(np.round(measured), 1).astype(np.int64) * int(labelled),
        "config_runtime_normalizers": np.maximum(np.round(normalizer), 1).astype(np.int64),
    }
