"""One-off (issue 60 item 6): the single pick of seed ensembles of the protocol's finished runs.

For each arm, family (and shuffled copy) and draw whose training seeds all finished in a
`protocol.py` work folder, `tpu-tiles ensemble`'s `build_ensemble` combines the seeds' runs
(each member's scores z-scored per kernel, then averaged; config 0's rule fitted on the
validation split, as for any run), and the ensemble ranks the held-out split by its rule. The
table pairs each ensemble with its members' mean, kernel by kernel, with the protocol's
bootstrap over draws and kernels; where config 0 is the compiler's default it gives both
single picks' held-out top-1 over config 0's. Nothing is trained: only finished runs are
read. It takes `protocol.py`'s flags (the same `--work`, families, arms, draws and seeds).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import protocol  # noqa: E402  (benchmarks/ is not a package)


def ensemble_errors(members: list[Path], root: Path, out: Path, cache: Path) -> dict:
    """The held-out per-kernel errors of the ensemble of `members`, by its own rule."""
    from tpu_tiles_models import scoring
    from tpu_tiles_models.ensemble import build_ensemble
    from tpu_tiles_models.runs import TrainedRun

    built = build_ensemble(
        members, out, data_root=root, cache_dir=str(cache), overwrite=True, progress=False
    )
    run = TrainedRun.open(built.model_dir)
    model, dataset = run.load(protocol.heldout_root(root), split="test", progress=False)
    scored = scoring.score_split(model, dataset.test, dataset.stats, progress=False)
    ruled = protocol.kernel_errors(scored, keep_default=bool(run.keeps_default_in(model)))
    return dict(
        run=Path(built.model_dir).name,
        tile_ids=[s.tile_id for s in scored],
        rule_keeps_default=bool(run.keeps_default_in(model)),
        **ruled,
    )


def rescore(a, scores: dict, roots: dict, work: Path) -> dict[tuple[str, str, int], dict]:
    """`{(arm, family, draw): ensemble errors}`, each made once (kept under `work/ensembles`)."""
    seeds = protocol.seeds_of(a.seeds)
    found = {}
    for arm, family, draw in sorted({k[:3] for k in scores}):
        runs = [scores.get((arm, family, draw, s)) for s in seeds]
        if None in runs:
            continue
        path = work / "ensembles" / "scores" / f"{arm}__{family}__d{draw}.json"
        if not path.exists():
            print(f"ensemble of {arm} on {family}, draw {draw}", flush=True)
            members = [work / "runs" / r["run"] for r in runs]
            result = ensemble_errors(
                members, roots[(family, draw)], work / "ensembles" / "runs", work / "cache"
            )
            if result["tile_ids"] != runs[0]["tile_ids"]:
                raise RuntimeError(f"{path}: held-out kernels differ from the members'")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".tmp").write_text(json.dumps(result))
            os.replace(path.with_suffix(".tmp"), path)
        found[(arm, family, draw)] = json.loads(path.read_text())
    return found


def single_pick(scores: dict, ensembles: dict, roots: dict, arm: str, family: str) -> str:
    """Where config 0 is the compiler's default: the members' and the ensemble's held-out
    top-1 over config 0's, and the share of config 0's gap to the noise-free floor
    (`protocol.floor_errors`) the ensemble closes; each the mean over kernels and draws."""
    if family not in protocol.DEFAULT_FIRST:
        return "- | -"
    draws = sorted(d for (x, f, d) in ensembles if (x, f) == (arm, family))
    members, ensemble, compiler, floor = [], [], [], []
    for d in draws:
        runs = [r for k, r in scores.items() if k[:3] == (arm, family, d)]
        floors = protocol.floor_errors(family, d, protocol.heldout_root(roots[(family, d)]))
        members.append(np.mean([r["top1"] for r in runs]))
        ensemble.append(np.mean(ensembles[(arm, family, d)]["top1"]))
        compiler.append(np.mean(runs[0]["top1_default"]))
        floor.append(np.mean([floors[t] for t in runs[0]["tile_ids"]]))
    m, e, c, fl = (float(np.mean(x)) for x in (members, ensemble, compiler, floor))
    return f"{m / c:.2f}, {e / c:.2f} | {(c - e) / (c - fl):+.0%}"


def table(scores: dict, ensembles: dict, roots: dict) -> list[str]:
    """Per arm and family: the members' mean and the ensemble, top-1 and top-5, paired."""
    lines = [
        "| arm | family | draws | top-1: members -> ensemble | difference (90%) | top-5: "
        "members -> ensemble | difference (90%) | top-1 / config 0's: members, ensemble "
        "| gap to the floor closed by the ensemble |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, family in sorted({k[:2] for k in ensembles}):
        draws = sorted(d for (x, f, d) in ensembles if (x, f) == (arm, family))
        cells = []
        for column in ("top1", "top5"):
            members = protocol.errors_of(scores, arm, family, column)
            mine = {d: {0: np.asarray(ensembles[(arm, family, d)][column])} for d in draws}
            mean = {d: {0: np.mean(list(members[d].values()), axis=0)} for d in draws}
            c = protocol.compare(arm, family, column, mine, mean)
            cells += [
                f"{c.reference_mean:.4f} -> {c.reference_mean + c.difference:.4f}",
                f"{c.difference:+.4f} ({c.low:+.4f} to {c.high:+.4f})",
            ]
        cells.append(single_pick(scores, ensembles, roots, arm, family))
        lines.append(f"| {arm} | {family} | {len(draws)} | " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = protocol.parse_args([*argv, "--tabulate"])
    work = Path(a.work)
    roots = protocol.make_draws(a, work)
    arms, draws = set(a.arms.split(",")), set(protocol.seeds_of(a.data_seeds))
    families = {f + c for f in a.families.split(",") for c in ("", protocol.SHUFFLED)}
    scores = {
        k: v
        for k, v in protocol.load_scores(work).items()
        if k[0] in arms and k[1] in families and k[2] in draws
    }
    ensembles = rescore(a, scores, roots, work)
    command = "python benchmarks/protocol_ensembles.py " + " ".join(
        x if not x.startswith(str(work)) else Path(x).name for x in argv
    )
    text = "\n".join(
        [
            f"`{command}`",
            "",
            f"Each arm's runs of training seeds {a.seeds} on one draw combined into one "
            "ensemble (z-scores averaged, config 0's rule fitted on validation), against the "
            "mean of those same runs, per held-out kernel, paired (90% interval, bootstrap "
            "over draws and kernels). Each figure is a run's or ensemble's own ranking (its "
            "rule); top-1 / config 0's where config 0 is the compiler's default.",
            "",
            *table(scores, ensembles, roots),
        ]
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{a.name}.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
