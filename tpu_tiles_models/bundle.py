"""The course hand-in: `models.py`, `model_<h>/` and `run_<h>.jsonz`, made and checked.

`make_bundle` copies exactly those three things into one folder, refusing a model whose run
file is missing or belongs to another model. `check_bundle` then does what a grader does with
the folder: imports the bundle's own `models.py`, reloads the SavedModel, rebuilds the class
named in the run file and copies the variables pairwise (the course procedure), ranks the test
split, and compares the top 5 of every kernel with the `test_predictions` stored at training.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from tpu_tiles_models import (
    files,
    formats,
    interrupts,
    locks,
    registry,
    run_file,
    runs,
    safe,
    scoring,
)
from tpu_tiles_models.errors import UserError, one_line
from tpu_tiles_models.runs import TrainedRun

MODELS_FILE = "models.py"
TOP_K = 5  # the course's prediction script keeps this many indices per kernel
PASS, FAIL, SKIP = "pass", "FAIL", "skip"


class BundleError(UserError, RuntimeError):
    """A bundle that cannot be made or did not pass its check; one line with the reason."""


def _same_content(src: Path, dst: Path) -> bool:
    """Whether `dst` (not a link) is a byte-for-byte copy of file or folder `src`."""
    if dst.is_symlink() or src.is_dir() != dst.is_dir():
        return False
    if not src.is_dir():
        return filecmp.cmp(src, dst, shallow=False)
    names = sorted(p.relative_to(src) for p in src.rglob("*"))
    if names != sorted(p.relative_to(dst) for p in dst.rglob("*")):
        return False
    return all(_same_content(src / n, dst / n) for n in names if not (src / n).is_dir())


def make_bundle(
    model_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    models_path: str | os.PathLike | None = None,
) -> Path:
    """Copies `models.py`, `model_<h>/` and its `run_<h>.jsonz` into `out_dir`; returns it.

    Refuses a model without its matching run file or with non-finite feature statistics, a
    models.py that cannot rebuild it, and an `out_dir` holding another model or anything that
    is not a copy of what it would write (exact copies there are left as they are).

    Raises:
      BundleError: one of those refusals.
      FlagError: a `models_path` that names no models.py.
      ExportError: a model folder or run file missing, damaged or of another model.
    """
    out = Path(files.canonical(out_dir, what="--out"))
    # The models.py to hand in: ours, a given file, or an upstream root's swapped-in one.
    given = os.path.expanduser(os.fspath(models_path)) if models_path else None
    source = registry.models_file(given) if given else registry.dropin_file(MODELS_FILE)
    # An upstream root is loaded as a root, so that its models.py's own imports resolve.
    run = TrainedRun.open(model_dir, models_path=models_path or source)
    model_dir, run_path = run.model_dir, run.run_file
    try:
        run.model_class()
    except (ValueError, ImportError, SyntaxError) as e:
        raise BundleError(f"{source} cannot rebuild this model: {e}") from None
    _require_grader_builds_it(run, source)
    runs.check_variables(model_dir)  # a grader could not load a model without them
    _ = run.stats  # nor use NaN statistics (they would rank every kernel in file order)
    if out == model_dir.parent:
        raise BundleError(f"{out}: --out must be a new folder, not the model's own directory")
    with locks.claim(out, flag="--out", command="bundle"):  # one bundle into --out at a time
        others = [
            p.name
            for p in (*out.glob(formats.MODEL_DIR_GLOB), *out.glob(formats.RUN_FILE_GLOB))
            if p.name not in (model_dir.name, run_path.name)
        ]
        if others:
            raise BundleError(
                f"{out} already holds {', '.join(sorted(others))}; a bundle has one model, pick "
                "an empty --out folder"
            )
        size = sum(p.stat().st_size for p in model_dir.rglob("*") if p.is_file())
        size += source.stat().st_size + run_path.stat().st_size
        safe.claim(
            [
                safe.Output(out, "--out", folder=True, adds_to=True, need_bytes=size),
                safe.Output(out / MODELS_FILE, "--out"),
                safe.Output(out / model_dir.name, "--out", folder=True, artifact=True),
                safe.Output(out / run_path.name, "--out", artifact=True),
            ],
            [*run_file.run_inputs(model_dir), safe.Input(source, "--models file")],
        )
        # The run file last: a run file never points at a model that is not there.
        copies = [(source, out / MODELS_FILE), (model_dir, out / model_dir.name)]
        copies.append((run_path, out / run_path.name))
        for src, dst in copies:
            if os.path.lexists(dst) and not _same_content(src, dst):
                raise BundleError(
                    f"--out {dst} is already there and is not a copy of {src}; bundle never "
                    "writes over a file it did not make: move it away, or pass another --out"
                )
        with safe.Stage() as stage:  # put in place together, the run file last
            stage.make_dirs(out, flag="--out")
            for i, (src, dst) in enumerate(c for c in copies if not os.path.lexists(c[1])):
                if i:
                    interrupts.check()
                if src.is_dir():
                    files.copy_tree(src, stage.path(dst, flag="--out"), flag="--out")
                else:
                    mode = stat.S_IMODE(src.stat().st_mode) & 0o777  # less the umask
                    shutil.copyfile(src, stage.path(dst, flag="--out", mode=mode))
        return out


def _require_grader_builds_it(run: TrainedRun, source: Path) -> None:
    """Fails unless `source`'s class, given the run file's `model_kwargs_json` alone (as the
    course script builds it), gets the keywords the run was trained with (a class default
    may have changed since)."""
    name = run.args["model"]
    grader = registry.resolved_kwargs(name, run.stored_kwargs, run.module)
    trained = registry.resolved_kwargs(name, run.model_kwargs, run.module)
    moved = sorted(k for k in set(grader) | set(trained) if grader.get(k) != trained.get(k))
    if moved:
        was = ", ".join(f"{k}={json.dumps(trained.get(k))}" for k in moved)
        now = ", ".join(f"{k}={json.dumps(grader.get(k))}" for k in moved)
        raise BundleError(
            f"{run.run_file}: trained as {name} with {was}, but {source} builds {now} from its "
            f"model_kwargs_json {run.args['model_kwargs_json']}, so a grader would rebuild "
            "another model; retrain it, or hand in the models.py it was trained with (--models)"
        )


# -- checking a bundle ------------------------------------------------------------------------


@dataclass
class CheckRow:
    """One check: its name, `pass` / `FAIL` / `skip`, and what was found."""

    name: str
    status: str
    detail: str


@dataclass
class CheckReport:
    """The outcome of `check_bundle`; `passed` when no check failed."""

    bundle_dir: Path
    rows: list[CheckRow] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.status != FAIL for r in self.rows)

    def add(self, name: str, status: str, detail: str) -> None:
        self.rows.append(CheckRow(name, status, detail))

    def failures(self) -> list[CheckRow]:
        return [r for r in self.rows if r.status == FAIL]

    def table(self) -> str:
        """The pass/fail table, then the verdict."""
        width = max(len(r.name) for r in self.rows) if self.rows else 0
        lines = [f"bundle {self.bundle_dir}"]
        lines += [f"  {r.status:<4}  {r.name:<{width}}  {r.detail}" for r in self.rows]
        verdict = "PASSED" if self.passed else f"FAILED ({len(self.failures())} check(s))"
        return "\n".join(lines + [verdict])

    def raise_for_failure(self) -> None:
        """Raises BundleError naming the failed checks (the CLI's non-zero exit)."""
        if not self.passed:
            reasons = "; ".join(f"{r.name}: {r.detail}" for r in self.failures())
            raise BundleError(f"{self.bundle_dir} failed its check: {reasons}")


def _find_files(bundle: Path, report: CheckReport) -> Path | None:
    """Checks that exactly models.py, one model_<h>/ and one run_*.jsonz are there."""
    if not bundle.is_dir():
        report.add("files present", FAIL, f"{bundle} is not a directory")
        return None
    models = sorted(p for p in bundle.glob(formats.MODEL_DIR_GLOB) if p.is_dir())
    run_files = sorted(p.name for p in bundle.glob(formats.RUN_FILE_GLOB))
    problems = [
        f"{link} is a symbolic link to {target}, outside the folder: a grader who gets the "
        "folder gets a dangling link; put a copy there (tpu-tiles bundle makes one)"
        for link, target in _links_outside(bundle)
    ]
    if not (bundle / MODELS_FILE).is_file():
        problems.append(f"no {MODELS_FILE}")
    if len(models) != 1:
        problems.append(f"{len(models)} model_<hash>/ directories (need exactly 1)")
    elif not (models[0] / "variables" / "variables.index").is_file():
        problems.append(f"{models[0].name}/ has no variables/variables.index (its weights)")
    else:
        try:
            runs.require_saved_model(models[0])
        except run_file.ExportError as e:
            problems.append(one_line(e))
    if len(run_files) != 1:
        problems.append(f"{len(run_files)} run_*.jsonz files (need exactly 1)")
    if problems:
        report.add("files present", FAIL, "; ".join(problems))
        return None
    report.add("files present", PASS, f"{MODELS_FILE}, {models[0].name}/, {run_files[0]}")
    return models[0]


def _links_outside(bundle: Path) -> list[tuple[str, str]]:
    """(name in `bundle`, where it leads) of each symbolic link in (canonical) `bundle` that
    leads outside it."""
    found = []
    for top, folders, names in os.walk(bundle):  # links to folders are listed, not entered
        for name in sorted(folders + names):
            path = Path(top, name)
            target = Path(files.canonical(path))
            if path.is_symlink() and bundle not in target.parents:
                found.append((path.relative_to(bundle).as_posix(), str(target)))
    return found


def _attempt(report: CheckReport, name: str, fn: Callable, ok: Callable[..., str]):
    """Runs `fn`; records `ok(result)` as a pass, or the exception's message as a failure."""
    try:
        result = fn()
    except Exception as e:  # a grader sees any failure here, so we report rather than raise
        report.add(name, FAIL, one_line(e))
        return None
    report.add(name, PASS, ok(result))
    return result


def kernel_match(stored: list[int], scores: np.ndarray, *, keep_default: bool = False) -> str:
    """`exact`, `tie` or `differ`: stored top-5 of one kernel against fresh scores (only the
    real indices of a kernel with fewer configs). `tie`: the stored list is as fast under the
    fresh scores, reordered among scores equal to float precision. `keep_default`: the run
    kept config 0 in its top 5 (`scoring.upstream_top`)."""
    k = min(TOP_K, len(scores))
    ours = scoring.upstream_top(scores, TOP_K, keep_default=keep_default)[:k]
    theirs = [int(i) for i in stored[:k]]
    if ours == theirs:
        return "exact"
    if len(theirs) < k or len(set(theirs)) < k or not all(0 <= i < len(scores) for i in theirs):
        return "differ"
    candidates = np.arange(len(scores))
    if keep_default:  # config 0 is in both lists; the other picks are the best of the rest
        if 0 not in theirs:
            return "differ"
        theirs, candidates = [i for i in theirs if i != 0], candidates[1:]
    best = np.sort(scores[candidates], kind="stable")[: len(theirs)]
    return "tie" if np.allclose(scores[theirs], best, rtol=1e-5, atol=1e-6) else "differ"


def _compare(
    stored: dict[str, list[int]], scored: list[scoring.Scored], keep_default: bool
) -> tuple[bool, str]:
    """(all match, detail) for the test kernels against the run file's predictions."""
    outcome = {
        s.tile_id: kernel_match(stored[s.tile_id], s.scores, keep_default=keep_default)
        for s in scored
        if s.tile_id in stored
    }
    missing = [s.tile_id for s in scored if s.tile_id not in stored]
    matched = sum(v != "differ" for v in outcome.values())
    ties = sum(v == "tie" for v in outcome.values())
    detail = f"{matched}/{len(scored)} test kernels"
    detail += f" ({ties} within float ties)" if ties else ""
    differ = [t for t, v in outcome.items() if v == "differ"]
    if differ:
        detail += f"; top-5 differs on {differ[0]}"
        detail += f" and {len(differ) - 1} more" if len(differ) > 1 else ""
    if missing:
        detail += (
            f"; {len(missing)} not in the run file (trained on other test data?), e.g. {missing[0]}"
        )
    return matched == len(scored) and len(scored) > 0, detail


def check_bundle(
    bundle_dir: str | os.PathLike,
    data_root: str | os.PathLike,
    *,
    cache_dir: str | None = None,
    progress: bool = True,
) -> CheckReport:
    """Verifies a bundle the way a grader would (the module docstring's steps). A failed step
    is a row of the report (`CheckReport.raise_for_failure` raises `BundleError`).

    Raises:
      DataError: a wrong `data_root`: the check could not run.
    """
    bundle = Path(files.canonical(bundle_dir, what="the hand-in folder"))
    root = os.path.expanduser(os.fspath(data_root))
    cache = os.path.expanduser(cache_dir) if cache_dir else None
    report = CheckReport(bundle)
    model_dir = _find_files(bundle, report)
    if model_dir is None:
        return report
    run: TrainedRun | None = _attempt(
        report,
        "hash matches",
        lambda: TrainedRun.open(model_dir, models_path=bundle / MODELS_FILE, models_flag=None),
        lambda r: (
            f"args hash to {formats.run_hash(r.model_dir.name)} = model dir and run file names"
        ),
    )
    if run is None:
        return report
    found = f"{run.args['model']} in {MODELS_FILE}, kwargs {run.args['model_kwargs_json']}"
    if _attempt(report, "class found", run.model_class, lambda _: found) is None:
        return report
    saved = _attempt(
        report,
        "saved model loads",
        lambda: run.saved_model,
        lambda s: f"{len(s.trainable_variables)} trainable variables",
    )
    if saved is None:
        return report
    dataset = run.dataset(root, split="test", cache_dir=cache, progress=progress)
    where = "stats from run file" if run.stats is not None else "stats refitted from train"
    model = _attempt(
        report,
        "variables copy",
        lambda: run.build(dataset.test, dataset.stats, as_stored=True),  # as a grader does
        lambda m: f"{len(m.trainable_variables)} variables, count and shapes equal ({where})",
    )
    if model is None:
        return report
    stored = run.info.get("test_predictions")
    if not stored:
        why = "run file has no test_predictions (trained with --test_mode metrics)"
        report.add("predictions match", SKIP, why)
        return report
    who = run.model_dir.name
    try:  # a model that scores NaN would match the file-order top 5 it stored at training
        scored = scoring.score_split(
            model, dataset.test, dataset.stats, progress=progress, desc="test", who=who
        )
    except scoring.NonFiniteScores as e:
        report.add("predictions match", FAIL, one_line(e))
        return report
    keep = run.keeps_default_in(model)  # the model's rule, which its stored ranking followed
    ok, detail = _compare(stored, scored, keep)
    if keep:
        detail += "; config 0 kept in the top 5, as the run's validation chose"
    report.add("predictions match", PASS if ok else FAIL, detail)
    return report
