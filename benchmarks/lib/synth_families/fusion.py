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
- Configs (`fusion_space`): output bounds in granules of the output's layout; convolutions
  also tile their window and input features, matmuls their contraction (kernel bounds);
  reductions that end the kernel may split the reduced dim (input bounds). Which of them a
  kernel's log holds, and its default, normalisers and noise: `autotuner`.
"""

from __future__ import annotations

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
from tpu_tiles_models.synthetic.geometry import (
    dims_of,
    element_bytes,
    granules,
    operand_lists,
    root_outputs,
)

_OP = OPCODES

# The simulated core.
MXU_BF16 = 70e3  # flop/ns
MXU_F32 = 23e3
VPU = 3.0e3  # element-ops/ns
HBM = 600.0  # bytes/ns
VMEM = 16 * 2**20  # bytes
TILE_NS = 80.0  # per tile (grid step)
PASS_NS = 90.0  # per extra contraction or reduction pass
SPLIT_NS = 1500.0  # per extra sub-kernel when the fusion does not fit VMEM
LAUNCH_NS = 2000.0
OVERLAP_LOSS = 0.2  # share of the shorter of compute/memory not hidden within a phase
DMA_RUN = 2048.0  # contiguous bytes for full bandwidth
DMA_EXP = 0.4  # bandwidth share grows as (run / DMA_RUN) ** DMA_EXP ...
DMA_FLOOR = 0.25  # ... from this share for the shortest runs
SUBLANES = 8  # matmul rows stream through the MXU in groups of 8; columns and depth pad to 128

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
    return np.clip((run / DMA_RUN) ** DMA_EXP, DMA_FLOOR, 1.0)


@dataclass
class Knobs:
    """The non-output parts of a config, each `[c]`: a convolution's input-feature chunk
    (elements) and window tile (`win_h`, `win_w` taps), a matmul's contraction chunk
    (elements), and the split count of a reduction that ends the kernel."""

    ci_chunk: np.ndarray
    win_h: np.ndarray
    win_w: np.ndarray
    k_chunk: np.ndarray
    split: np.ndarray


def conv_node(v: FusionView) -> int:
    """The convolution whose input features and window the config tiles (not depthwise), or
    -1."""
    cand = np.flatnonzero(v.opc == _OP["convolution"])
    return int(cand[0]) if len(cand) and v.windows[int(cand[0])][2] == 1 else -1


def dot_node(v: FusionView) -> int:
    """The matmul whose contraction the config chunks (when there is no such convolution),
    or -1."""
    cand = np.flatnonzero(v.opc == _OP["dot"])
    return int(cand[0]) if len(cand) and conv_node(v) < 0 else -1


def reduce_split_dim(v: FusionView) -> tuple[int, int, int]:
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
        stream: `[c]` bytes of one buffer of the streamed inputs and outputs (a second one
            lets the next tile's transfers overlap this tile's compute).
        resident: `[c]` bytes that stay in VMEM for the tile (accumulators).
        inter: `[c]` bytes of live intermediates.
    """

    comp: np.ndarray
    mem: np.ndarray
    stream: np.ndarray
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
    tot.stream += _elements(t, v.granule[i]) * b * frac


def _op(tot: _Totals, v: FusionView, i: int, tiles: list[np.ndarray], knobs: Knobs) -> None:
    """Adds computing node `i`: its work in its phase and its live tile."""
    t = tiles[i]
    tot.comp[v.phase[i]] += _compute(v, i, t, tiles, knobs)
    tot.inter += _elements(t, v.granule[i]) * float(v.ebytes[i]) * v.live[i]
    if int(v.opc[i]) in (_OP["dot"], _OP["convolution"]):
        rows = np.prod(t[:, :-1], axis=1)
        tot.resident += _pad(rows, SUBLANES) * _pad(t[:, -1], 128) * 4.0  # f32 accumulator


def _write(tot: _Totals, v: FusionView, o: int, t: np.ndarray) -> None:
    """Adds output `o` with tile `t`: its write in the last phase, double-buffered."""
    b = float(v.ebytes[o])
    eff = _dma_eff(t, v.shapes[o], v.granule[o], b)
    tot.mem[-1] += _elements(t) * b / (HBM * eff)
    tot.stream += _elements(t, v.granule[o]) * b


def tile_costs(v: FusionView, ext: np.ndarray, knobs: Knobs) -> dict[str, np.ndarray]:
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
    zeros = [np.zeros(c) for _ in range(3)]
    tot = _Totals(np.zeros((n_phases, c)), np.zeros((n_phases, c)), *zeros)
    chunked = _chunked_inputs(v, knobs)
    for i, t in enumerate(tiles):
        op = int(v.opc[i])
        if op == _OP["parameter"]:
            _read(tot, v, i, t, chunked.get(i, np.ones(c)))
        elif op not in _FREE:
            _op(tot, v, i, tiles, knobs)
    for o in v.outputs:
        _write(tot, v, o, tiles[o])
    return _runtime(tot, v, ext, passes(v, knobs))


def passes(v: FusionView, knobs: Knobs) -> np.ndarray:
    """`[c]` passes per tile: over input-feature chunks and window tiles of the convolution,
    contraction chunks of the matmul, or chunks of a split reduction."""
    conv, dot, red = conv_node(v), dot_node(v), reduce_split_dim(v)[0]
    if conv >= 0:
        cin = v.shapes[v.operands[conv][0]][-1]
        win = v.windows[conv][0]
        return (
            np.ceil(cin / knobs.ci_chunk)
            * np.ceil(win[0] / knobs.win_h)
            * np.ceil(win[1] / knobs.win_w)
        )
    if dot >= 0:
        return np.ceil(v.shapes[v.operands[dot][0]][-1] / knobs.k_chunk)
    if red >= 0:
        return knobs.split
    return np.ones(len(knobs.split))


def _chunked_inputs(v: FusionView, knobs: Knobs) -> dict[int, np.ndarray]:
    """Parameters of which only a chunk is resident at once, with that share `[c]`."""
    out: dict[int, np.ndarray] = {}
    conv, dot, red = conv_node(v), dot_node(v), reduce_split_dim(v)[0]
    if conv >= 0:
        cin = max(int(v.shapes[v.operands[conv][0]][-1]), 1)
        win = v.windows[conv][0]
        share = np.minimum(knobs.ci_chunk / cin, 1.0)
        taps = np.minimum(knobs.win_h / win[0], 1.0) * np.minimum(knobs.win_w / win[1], 1.0)
        out.update({i: share for i in _inputs_of(v, conv, 0)})
        out.update({i: share * taps for i in _inputs_of(v, conv, 1)})
    if dot >= 0:
        k = max(int(v.shapes[v.operands[dot][0]][-1]), 1)
        share = np.minimum(knobs.k_chunk / k, 1.0)
        out.update({i: share for i in _inputs_of(v, dot, 0) | _inputs_of(v, dot, 1)})
    if red >= 0:
        out.update({i: 1.0 / knobs.split for i in _inputs_of(v, red, 0)})
    return out


def _runtime(tot: _Totals, v: FusionView, ext: np.ndarray, passes: np.ndarray) -> dict:
    """Phases add up; each overlaps compute with memory imperfectly; a working set (two
    buffers of everything streamed, so one tile's transfers overlap the previous tile's
    compute) beyond VMEM splits the fusion (a fixed cost per split, and spilled
    intermediates): such a tile does not compile."""
    ws = 2.0 * tot.stream + tot.resident + tot.inter
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


def _inputs_of(v: FusionView, node: int, pos: int) -> set[int]:
    """Parameters that reach operand `pos` of `node` through free or element-wise ops."""
    ops = v.operands[node]
    seen, stack = set(), [ops[pos]] if len(ops) > pos else []
    while stack:
        w = stack.pop()
        if w in seen:
            continue
        seen.add(w)
        if int(v.opc[w]) != _OP["parameter"] and int(v.opc[w]) not in _ANCHORS:
            stack.extend(v.operands[w])
    return {w for w in seen if int(v.opc[w]) == _OP["parameter"]}


def _compute(
    v: FusionView, i: int, t: np.ndarray, tiles: list[np.ndarray], knobs: Knobs
) -> np.ndarray:
    """ns of compute per tile for node `i` with tile `t` `[c, rank]`."""
    op = int(v.opc[i])
    padded = _elements(t, v.granule[i])
    mxu = MXU_BF16 if v.ebytes[i] <= 2 else MXU_F32
    if op == _OP["dot"]:
        k = float(v.shapes[v.operands[i][0]][-1])
        rows = np.prod(t[:, :-1], axis=1)
        depth = _pad(np.full(len(t), k), 128)
        if i == dot_node(v):  # contraction chunks, each padded to the MXU
            chunk = np.minimum(knobs.k_chunk, k)
            depth = _pad(chunk, 128) * np.ceil(k / chunk)
        return 2.0 * _pad(rows, SUBLANES) * _pad(t[:, -1], 128) * depth / mxu
    if op == _OP["convolution"]:
        win, _, groups = v.windows[i]
        taps = np.full(len(t), float(np.prod(win[: len(v.shapes[i]) - 2])))
        if groups > 1:
            return 2.0 * padded * taps / VPU
        cin = float(v.shapes[v.operands[i][0]][-1])
        chunk, n_pass = np.full(len(t), cin), np.ones(len(t))
        if i == conv_node(v):  # window tiles and input-feature chunks, each a pass
            chunk = np.minimum(knobs.ci_chunk, cin)
            rest = taps / (win[0] * win[1])  # a 3-D window's third dim stays whole
            n_pass = passes(v, knobs)
            taps = knobs.win_h * knobs.win_w * rest
        rows = np.prod(t[:, :-1], axis=1)
        depth = _pad(taps * chunk, 128) * n_pass
        return 2.0 * _pad(rows, SUBLANES) * _pad(t[:, -1], 128) * depth / mxu
    if op == _OP["reduce"]:
        src = v.operands[i][0]
        return _elements(tiles[src], v.granule[src]) / VPU
    if op == _OP["reduce-window"]:
        win, _, _ = v.windows[i]
        return padded * float(np.prod(win)) / VPU
    return _VPU_WEIGHT.get(op, 1.0) * padded / VPU


def read_knobs(v: FusionView, cfg: np.ndarray) -> tuple[np.ndarray, Knobs]:
    """Output extents `[c, R]` (elements) and the other knobs, read back from `[c, 24]`
    config features."""
    rank, c = len(v.out_shape), len(cfg)
    units = -(-v.out_shape // v.out_granule)
    ext = np.clip(cfg[:, CFG_OUTPUT : CFG_OUTPUT + rank], 1, units) * v.out_granule
    kernel = np.maximum(cfg[:, CFG_KERNEL : CFG_KERNEL + 3], 1.0)
    ones = np.ones(c)
    knobs = Knobs(ci_chunk=ones * 1e9, win_h=ones, win_w=ones, k_chunk=ones * 1e9, split=ones)
    if conv_node(v) >= 0:  # kernel bounds: window tile h, w, input features in 8s, outputs
        knobs.win_h, knobs.win_w, knobs.ci_chunk = kernel[:, 0], kernel[:, 1], kernel[:, 2] * 8
    elif dot_node(v) >= 0:  # kernel bounds: contraction chunk in 128s, outputs
        knobs.k_chunk = kernel[:, 0] * 128.0
    red, src, j = reduce_split_dim(v)
    if red >= 0:
        full = -(-int(v.shapes[src][j]) // int(v.granule[src][j]))
        chunk = np.maximum(cfg[:, CFG_INPUT + j], 1.0)
        knobs.split = np.where(cfg[:, CFG_INPUT + 7] > 0, np.ceil(full / chunk), 1.0)
    return ext, knobs


def view_runtime(v: FusionView, config_feat: np.ndarray) -> np.ndarray:
    """Noise-free `[c]` runtimes (ns) of config rows `[c, 24]`."""
    return view_costs(v, config_feat)["runtime"]


def view_costs(v: FusionView, config_feat: np.ndarray) -> dict[str, np.ndarray]:
    """`{"runtime": [c], "ws": [c]}` of config rows `[c, 24]` (see `tile_costs`)."""
    cfg = np.asarray(config_feat, np.float64).reshape(-1, CONFIG_FEAT_DIM)
    return tile_costs(v, *read_knobs(v, cfg))


def runtime(
    node_feat: np.ndarray, node_opcode: np.ndarray, edge_index: np.ndarray, config_feat: np.ndarray
) -> np.ndarray:
    """Noise-free `[c]` runtimes (ns) of a kernel's configs, from its npz arrays only."""
    return view_runtime(read_view(node_feat, node_opcode, edge_index), config_feat)
