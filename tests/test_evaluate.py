"""`tpu-tiles evaluate`: per-benchmark and overall top-k errors of reloaded models."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import write_run

from tpu_tiles_models import data, evaluate, export, margin, metrics, run_file, scoring

TINY_ID = "tiny_bench_0000"  # benchmark "tiny_bench": one valid kernel with < 5 configs
MODELS = ("ResidualSAGE", "MLP")


@pytest.fixture(scope="module")
def eval_root(synth_root, tmp_path_factory) -> Path:
    """The synthetic tree plus one valid kernel with 3 configs: a train kernel's first three
    (kernels that small are rare, about 1.5% of the real train split, so none may be drawn)."""
    root = tmp_path_factory.mktemp("eval") / "data"
    shutil.copytree(synth_root, root)
    first = sorted((root / "train").glob("*.npz"))[0]
    with np.load(first) as kernel:
        arrays = {key: kernel[key] for key in kernel.files}
    for key in ("config_feat", "config_runtime", "config_runtime_normalizers"):
        arrays[key] = arrays[key][:3]
    np.savez(root / "valid" / f"{TINY_ID}.npz", **arrays)
    return root


@pytest.fixture(scope="module")
def two_runs(residual_run, mlp_run) -> list[export.TrainResult]:
    """The two shared tiny runs, in the order `evaluate --dirs` gets them."""
    return [residual_run, mlp_run]


@pytest.fixture(scope="module")
def result(two_runs, eval_root) -> dict:
    dirs = ",".join(str(r.model_dir) for r in two_runs)
    return evaluate.evaluate_dirs(dirs, eval_root, progress=False)


def _direct_scores(r: export.TrainResult, root: Path) -> list[scoring.Scored]:
    """The in-memory trained model scored on the valid split with its stored statistics."""
    run = json.loads(gzip.decompress(r.run_file.read_bytes()))
    stats = data.FeatureStats.from_json(run[run_file.EXTRAS_KEY]["feature_stats"])
    ds = data.load_dataset(root, splits=("valid",), stats=stats, progress=False)
    return scoring.score_split(r.model, ds.valid, stats, progress=False)


def test_overall_and_benchmarks_match_direct_recomputation(two_runs, eval_root, result):
    assert [m["model"] for m in result["models"]] == list(MODELS)
    for r, m in zip(two_runs, result["models"]):
        scored = _direct_scores(r, eval_root)
        want = metrics.top_k_errors((s.runtimes, s.scores) for s in scored)
        overall = m["rows"][evaluate.OVERALL]
        assert overall["kernels"] == len(scored) == 9
        for k in metrics.TOP_KS:
            assert overall[f"top{k}"] == pytest.approx(want[k], rel=1e-6, abs=1e-9)
        assert overall["score"] == pytest.approx(1 - want[5], rel=1e-6, abs=1e-9)
        pairs = [(s.runtimes, s.scores) for s in scored]
        assert overall["opa"] == pytest.approx(metrics.mean_pair_accuracy(pairs), abs=1e-9)
        assert 0.0 <= overall["opa"] <= 1.0
        benchmarks = {s.tile_id.rsplit("_", 1)[0] for s in scored}
        assert set(m["rows"]) == benchmarks | {evaluate.OVERALL}
        assert sum(row["kernels"] for b, row in m["rows"].items() if b in benchmarks) == 9
        one = sorted(benchmarks)[0]
        group = [(s.runtimes, s.scores) for s in scored if s.tile_id.rsplit("_", 1)[0] == one]
        assert m["rows"][one]["top1"] == pytest.approx(metrics.top_k_errors(group)[1], abs=1e-9)


def test_kernel_with_fewer_than_5_configs(eval_root, result):
    runtimes = np.load(eval_root / "valid" / f"{TINY_ID}.npz")["config_runtime"]
    assert len(runtimes) < 5
    for m in result["models"]:
        row = m["rows"]["tiny_bench"]
        # Top-5 and top-10 see all its configs, so they always contain the fastest one.
        assert row["kernels"] == 1
        assert row["top5"] == row["top10"] == 0.0
        assert row["score"] == 1.0
        assert row["top1"] >= 0.0


def test_table_json_and_png(result, tmp_path):
    table = evaluate.format_table(result)
    lines = table.splitlines()
    overall = next(line for line in lines if line.startswith("overall"))
    for m in result["models"]:
        assert m["label"] in table
        assert f"{m['rows']['overall']['score']:.4f}" in overall
    assert any(line.startswith("tiny_bench ") for line in lines)

    path = evaluate.write_outputs(result, json_path=tmp_path / "sub" / "eval.json")[0]
    assert json.loads(path.read_text()) == json.loads(json.dumps(result))
    png = evaluate.write_outputs(result, png_path=tmp_path / "eval.png")[0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.png", "sub"]  # no temp left


def test_refit_statistics_when_the_run_file_has_none(two_runs, eval_root, result, tmp_path):
    """A run file from upstream's trainer has no stored stats: they are refitted from train.
    (The MLP: its reload and scoring trace in a third of ResidualSAGE's time.)"""
    r = two_runs[1]
    run = json.loads(gzip.decompress(r.run_file.read_bytes()))
    del run[run_file.EXTRAS_KEY]
    model_dir = tmp_path / f"model_{run_file.run_info_hash(run)}"  # upstream's name: its args alone
    shutil.copytree(r.model_dir, model_dir)
    write_run(tmp_path, run)
    refit = evaluate.evaluate_dirs([model_dir], eval_root, progress=False)
    got, want = refit["models"][0]["rows"], result["models"][1]["rows"]
    assert got.keys() == want.keys()
    for name in want:
        for column in ("top1", "top5", "top10", "score"):
            assert got[name][column] == pytest.approx(want[name][column], abs=1e-9)


def test_expand_dirs(tmp_path):
    for name in ("model_b", "model_a"):
        (tmp_path / "out" / name).mkdir(parents=True)
    (tmp_path / "out" / "run_a.jsonz").write_bytes(b"")
    got = evaluate.expand_dirs(f"{tmp_path / 'out'}, {tmp_path / 'x'}")
    assert [p.name for p in got] == ["model_a", "model_b", "x"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(evaluate.EvaluateError, match="no model_<hash> directories"):
        evaluate.expand_dirs([tmp_path / "empty"])
    with pytest.raises(evaluate.EvaluateError, match="no model directories"):
        evaluate.expand_dirs(" , ")


def test_missing_run_file_names_the_fix(two_runs, eval_root, tmp_path):
    lonely = tmp_path / two_runs[0].model_dir.name
    shutil.copytree(two_runs[0].model_dir, lonely)
    with pytest.raises(run_file.ExportError, match="needs its run file beside it"):
        evaluate.evaluate_dirs([lonely], eval_root, progress=False)


def test_baselines_and_config_0_kept(two_runs, eval_root, result):
    """The random and default-first baselines, and each model with config 0 in its top 5."""
    scored = _direct_scores(two_runs[0], eval_root)
    runtimes = [s.runtimes for s in scored]
    for baseline in metrics.BASELINES:
        want = metrics.baseline_top_k_errors(runtimes, baseline)
        row = result["baselines"][baseline][evaluate.OVERALL]
        assert row["kernels"] == 9
        assert row["top1"] == pytest.approx(want[1], abs=1e-9)
        assert row["score"] == pytest.approx(1 - want[5], abs=1e-9)
    default_top1 = np.mean([r[0] / r.min() - 1 for r in runtimes])  # config 0 is the top 1
    assert result["baselines"]["default"][evaluate.OVERALL]["top1"] == pytest.approx(default_top1)
    for r, m in zip(two_runs, result["models"]):
        scored = _direct_scores(r, eval_root)
        kept = metrics.top_k_errors((s.runtimes, margin.keep_default(s.scores)) for s in scored)
        row, plain = m["kept_rows"][evaluate.OVERALL], m["rows"][evaluate.OVERALL]
        assert row["top5"] == pytest.approx(kept[5], abs=1e-9)
        assert row["top1"] == pytest.approx(plain["top1"], abs=1e-9)  # its top 1 stays
        run = json.loads(gzip.decompress(r.run_file.read_bytes()))[run_file.EXTRAS_KEY]
        assert m["run_keep_default"] is run[run_file.KEEP_DEFAULT_KEY]["chosen"]
    labels = [label for label, _ in evaluate.rankings(result)]
    assert labels == [
        "random",
        "default",
        "[1] ResidualSAGE",
        "[1] ResidualSAGE+default",
        "[2] MLP",
        "[2] MLP+default",
    ]
    table = evaluate.format_table(result).splitlines()
    ranked = table[next(i for i, line in enumerate(table) if "every ranking" in line) :]
    for label, row in evaluate.rankings(result):
        line = next(line for line in ranked if line.startswith(label + " "))
        assert f"{row['top5']:.4f}" in line


def test_top1_over_the_default_rows(two_runs, eval_root, result, tmp_path):
    """Every row's top-1 error over the `default` row's of the same kernels, in the JSON and
    in the table of every ranking; the demo's table shows the same figure."""
    default = result["baselines"]["default"]
    assert default[evaluate.OVERALL][evaluate.RATIO] == pytest.approx(1.0)
    rows = [*result["baselines"].values()]
    rows += [m[k] for m in result["models"] for k in ("rows", "kept_rows")]
    for by_benchmark in rows:
        for name, row in by_benchmark.items():
            base = default[name]["top1"]
            if base > 0:
                assert row[evaluate.RATIO] == pytest.approx(row["top1"] / base, rel=1e-12)
            else:
                assert row[evaluate.RATIO] is None
    path = evaluate.write_outputs(result, json_path=tmp_path / "eval.json")[0]
    stored = json.loads(path.read_text())
    assert stored["models"][0]["rows"][evaluate.OVERALL][evaluate.RATIO] == pytest.approx(
        result["models"][0]["rows"][evaluate.OVERALL][evaluate.RATIO]
    )
    table = evaluate.format_table(result).splitlines()
    at = next(i for i, line in enumerate(table) if "every ranking" in line)
    assert table[at + 1].split()[-1] == "top1/def"
    for label, row in evaluate.rankings(result):
        line = next(line for line in table[at:] if line.startswith(label + " "))
        assert f" {row[evaluate.RATIO]:.2f}x" in line
