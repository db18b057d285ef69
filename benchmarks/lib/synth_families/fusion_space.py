"""The tile search space of a `fusion` kernel, and the whole kernel: its graph
(`fusion_graphs`), its option grid and config features, timed by `fusion`'s cost model
through the shared autotuner (`autotuner.tune`).

Knobs: the output bounds in granules of the output's layout (every divisor, power of two and
even split of a dim, and a few odd sizes, at most `MAX_BOUND` per dim and `MAX_TILE` per
tile); a convolution also tiles its window and chunks its input features (kernel bounds:
window tile h, w, input features in 8s, output features); a matmul chunks its contraction
(kernel bounds: chunk in 128s, output features); a reduction that ends the kernel may split
its reduced dim (input bounds).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tpu_tiles_models.formats import CONFIG_FEAT_DIM
from tpu_tiles_models.synthetic import autotuner
from tpu_tiles_models.synthetic.features import CFG_INPUT, CFG_KERNEL, CFG_OUTPUT
from tpu_tiles_models.synthetic.kernels import KIND_WEIGHTS
from tpu_tiles_models.synthetic.tiling import (
    MAX_CHUNKS,
    MAX_TILE,
    at_most,
    bound_options,
    bounds_block,
    chunk_options,
    tried,
    window_options,
)

from .fusion import (
    VMEM,
    FusionView,
    conv_node,
    dot_node,
    read_view,
    reduce_split_dim,
    view_costs,
)
from .fusion_graphs import build

MAX_BOUND = 256  # granules per dim of an output tile


def choices(v: FusionView) -> list[np.ndarray]:
    """Option lists: one per output dim, then the convolution's window tile (h, w) and
    input-feature chunk (8s), or the matmul's contraction chunk (128s), or the reduction's
    split count."""
    units = -(-v.out_shape // v.out_granule)
    out = [bound_options(int(u), MAX_BOUND) for u in units]
    conv, dot = conv_node(v), dot_node(v)
    red, src, j = reduce_split_dim(v)
    if conv >= 0:
        win = v.windows[conv][0]
        out += [window_options(int(win[0])), window_options(int(win[1]))]
        out.append(chunk_options(int(v.shapes[v.operands[conv][0]][-1]), 8, MAX_CHUNKS))
    elif dot >= 0:
        out.append(chunk_options(int(v.shapes[v.operands[dot][0]][-1]), 128, 2 * MAX_CHUNKS))
    elif red >= 0:
        n_units = -(-int(v.shapes[src][j]) // int(v.granule[src][j]))
        out.append(2 ** np.arange(int(np.log2(n_units)) + 1))
    return out


def config_rows(v: FusionView, space: np.ndarray) -> np.ndarray:
    """Option columns `[c, knobs]` -> `[c, 24]` config features."""
    rank, c = len(v.out_shape), len(space)
    out_b = space[:, :rank].astype(np.float64)
    cfg = np.zeros((c, CONFIG_FEAT_DIM))
    cfg[:, CFG_OUTPUT : CFG_OUTPUT + 8] = bounds_block(out_b)
    conv, dot = conv_node(v), dot_node(v)
    if conv >= 0 or dot >= 0:
        anchor = conv if conv >= 0 else dot
        same = len(v.out_shape) == len(v.shapes[anchor]) and v.out_shape[-1] == v.shapes[anchor][-1]
        feat = out_b[:, -1] if same else np.ones(c)  # the output-feature tile
        extra = space[:, rank : rank + 3] if conv >= 0 else space[:, rank : rank + 1]
        cfg[:, CFG_KERNEL : CFG_KERNEL + 8] = bounds_block(np.column_stack([extra, feat]))
    elif space.shape[1] > rank:  # input bounds only when the reduction is split
        split = space[:, rank].astype(np.float64)
        in_b = _reduce_input_bounds(v, out_b, split)
        cfg[:, CFG_INPUT : CFG_INPUT + 8] = bounds_block(in_b) * (split > 1)[:, None]
    return cfg


def _reduce_input_bounds(v: FusionView, out_b: np.ndarray, split: np.ndarray) -> np.ndarray:
    """`[c, in_rank]` input tile of a split reduction, in its granules: kept dims follow the
    output bounds (when the output is the reduction's own shape), the outermost reduced dim
    is cut into `split` chunks, other reduced dims are whole."""
    red, src, j = reduce_split_dim(v)
    units = -(-v.shapes[src] // v.granule[src])
    in_b = np.tile(units, (len(split), 1)).astype(np.float64)
    kept = [d for d in range(len(units)) if d not in v.attr[red]]
    if len(kept) == out_b.shape[1] and np.array_equal(v.shapes[red], v.out_shape):
        in_b[:, kept] = np.minimum(out_b * v.out_granule / v.granule[src][kept], units[kept])
        in_b[:, kept] = np.maximum(np.ceil(in_b[:, kept]), 1)
    in_b[:, j] = np.ceil(units[j] / split)
    return in_b


def compiler_start(v: FusionView, opts: list[np.ndarray]) -> np.ndarray:
    """Where the compiler's search starts: a tile of 64K output elements (more for outputs of
    over 16M), filled minor dims first (a matmul's output features before them); the whole
    window, input-feature chunks of up to 128 channels, contraction chunks of up to 512, no
    reduction split. `[knobs]` option values."""
    rank = len(v.out_shape)
    b = np.ones(rank)
    budget = max(65536.0, float(np.prod(v.out_shape, dtype=float)) / 256)
    order = sorted(range(rank), key=lambda d: (-v.out_granule[d], -d))  # minor dims first
    if conv_node(v) >= 0 or dot_node(v) >= 0:  # a matmul's output features before them
        order = [rank - 1] + [d for d in order if d != rank - 1]
    for d in order:
        fit = opts[d][(opts[d] * v.out_granule[d] <= budget) & (opts[d] * b.prod() <= MAX_TILE)]
        b[d] = fit.max() if len(fit) else 1
        budget = max(budget / (b[d] * v.out_granule[d]), 1.0)
    extra: list[float] = []
    if conv_node(v) >= 0:
        extra = [opts[rank][-1], opts[rank + 1][-1], at_most(opts[rank + 2], 16)]
    elif dot_node(v) >= 0:
        extra = [at_most(opts[rank], 4)]
    elif len(opts) > rank:
        extra = [1.0]
    return np.array([*b, *extra])


def space_of(v: FusionView) -> autotuner.Space:
    """The kernel's search space for the autotuner."""
    opts = choices(v)
    units = -(-v.out_shape // v.out_granule)

    def cost(cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        costs = view_costs(v, cfg)
        return costs["runtime"], costs["ws"]

    return autotuner.Space(
        opts,
        lambda points: config_rows(v, points),
        cost,
        VMEM,
        compiler_start(v, opts),
        lambda points: tried(points, units),
    )


def make_kernel(
    rng: np.random.Generator,
    *,
    kind_weights: Sequence[float] | None = None,
    max_configs: int | None = None,
    min_configs: int = 2,
    labelled: bool = True,
) -> dict[str, np.ndarray]:
    """Builds one `fusion` kernel's npz arrays.

    Args:
      rng: the kernel's own generator.
      kind_weights: relative odds of conv, dot, reduce and element-wise anchors
        (`kernels.KIND_WEIGHTS` when None).
      max_configs: cap on configs (`autotuner.MAX_CONFIGS` when None).
      min_configs: floor on configs (re-measured copies fill up small search spaces).
      labelled: False writes zero runtimes (the test split).

    Returns:
      The six npz arrays.
    """

    def draw() -> tuple[dict[str, np.ndarray], autotuner.Space]:
        g, _ = build(rng, KIND_WEIGHTS if kind_weights is None else kind_weights)
        node_feat, node_opcode, edge_index = g.arrays()
        graph = {"node_feat": node_feat, "node_opcode": node_opcode, "edge_index": edge_index}
        return graph, space_of(read_view(node_feat, node_opcode, edge_index))

    return autotuner.draw_kernel(
        draw, rng, max_configs=max_configs, min_configs=min_configs, labelled=labelled
    )
