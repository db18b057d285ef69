"""The benchmark suite's generator families beyond the package's `roofline`, registered into
`tpu_tiles_models.synthetic` when this package is imported.

The suite asks whether a model overfits one generator, so it trains on several that differ in
how kernels are built and how a tile changes runtime (docs/synthetic.md):

- `alt` (`alt`): the same HLO fusions as `roofline`, on a wider core with partial overlap, an
  operand cache and a smooth capacity penalty;
- `fusion` (`fusion`, its graphs `fusion_graphs`, its search space `fusion_space`): chains of
  fused op groups, every node tiled and padded, compute and memory phases;
- `inference` (`inference`): the same fusions in an inference graph's mix, on a v4i-like core;
- `archetype` (`archetype`): the same fusions, (8, 128) padding, halos, spills, random logs;
- `drawn` (`drawn`): archetype's, on a core and a log drawn per data seed.

Users get `roofline` alone; a benchmark script puts benchmarks/lib on `sys.path`, imports this
package and then names these families like the package's own:
`synthetic.generate(..., family="fusion")`, or `python benchmarks/synth.py OUT --family fusion`
for `tpu-tiles synth` with them.
"""

from __future__ import annotations

import os
from pathlib import Path

from tpu_tiles_models.synthetic.families import Family, register

from . import alt, archetype, drawn, fusion, fusion_space, inference

# `generate`'s worker processes (Apache Beam's) unpickle these families' functions by module
# name, so they must find this package as this process did: through PYTHONPATH, which they
# inherit. Its folder, benchmarks/lib, holds this package alone: every process started below a
# benchmark (a sweep's training child too) inherits it, and a benchmark script's name there
# would shadow a module of that name (benchmarks/bottleneck.py once hid pandas' `bottleneck`
# and broke TensorFlow's import in a training child).
_FOLDER = str(Path(__file__).resolve().parent.parent)
_PATH = os.environ.get("PYTHONPATH", "")
if _FOLDER not in _PATH.split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_FOLDER, _PATH]))

FAMILIES = (
    Family(
        "alt",
        "the same fusions; partial overlap, operand cache, smooth capacity penalty",
        alt.COST.make_kernel,
        alt.COST.runtime,
    ),
    Family(
        "fusion",
        "chains of fused op groups; every node tiled and padded, compute/memory phases",
        fusion_space.make_kernel,
        fusion.runtime,
    ),
    Family(
        "inference",
        "the same fusions, inference mix; v4i-like core: 4 MXUs, CMEM, overlap from headroom",
        inference.make_kernel,
        inference.COST.runtime,
    ),
    Family(
        "archetype",
        "the same fusions; (8, 128) padding, halo re-reads, spills; 12-400 random tiles, "
        "config 0 ordinary",
        archetype.make_kernel,
        archetype.runtime,
    ),
    Family(
        "drawn",
        "archetype's kernels and cost model on a core and a log drawn per data seed",
        drawn.make_kernel,
        drawn.runtime,
    ),
)
for _family in FAMILIES:
    register(_family)
