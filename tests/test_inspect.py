"""`tpu-tiles inspect`: every figure against numpy on the same files, known answers on a
hand-made root, the JSON round trip, the PNG, bad files and refused outputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tpu_tiles_models import cli, kernel_files
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.inspection.command import check_outputs
from tpu_tiles_models.inspection.render import format_table
from tpu_tiles_models.inspection.report import CONFIG_BINS, FORMAT, TAIL_SIGMAS, inspect_root
from tpu_tiles_models.inspection.stats import QUANTILES, Columns, LogHistogram

SPLITS = ("train", "valid", "test")


def _kernels(root: Path, split: str) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(tile id, arrays) of every npz of a split, read with plain numpy."""
    out = []
    for path in sorted((root / split).glob("*.npz")):
        with np.load(path) as d:
            out.append((path.stem, {k: d[k] for k in d.files}))
    return out


def _quantiles(values) -> dict[str, float]:
    q = np.quantile(np.asarray(values, np.float64), list(QUANTILES.values()))
    return dict(zip(QUANTILES, q))


def _assert_distribution(got: dict, values) -> None:
    values = np.asarray(values, np.float64)
    assert got["count"] == len(values)
    assert got["mean"] == pytest.approx(values.mean(), rel=1e-12)
    assert got["std"] == pytest.approx(values.std(), rel=1e-9, abs=1e-12)
    for name, want in _quantiles(values).items():
        assert got[name] == pytest.approx(want, rel=1e-12), name


def _assert_streamed_quantiles(got: dict, values) -> None:
    """Percentiles read from the log histogram: between the two order statistics numpy
    interpolates between, give or take one bin (0.23%)."""
    x = np.sort(np.asarray(values, np.float64))
    assert got["count"] == len(x)
    assert got["mean"] == pytest.approx(x.mean(), rel=1e-9)
    assert got["std"] == pytest.approx(x.std(), rel=1e-6)
    assert (got["min"], got["max"]) == (x[0], x[-1])
    for name, q in QUANTILES.items():
        rank = q * (len(x) - 1)
        lo, hi = x[int(np.floor(rank))], x[int(np.ceil(rank))]
        assert lo * (1 - 0.0025) <= got[name] <= hi * (1 + 0.0025), name


@pytest.fixture(scope="module")
def report(synth_root: Path) -> dict:
    return inspect_root(synth_root, progress=False)


def test_counts_and_histograms_match_numpy(report, synth_root: Path) -> None:
    assert report["format"] == FORMAT
    assert list(report["splits"]) == list(SPLITS)
    total_configs = 0
    for split in SPLITS:
        kernels = _kernels(synth_root, split)
        s = report["splits"][split]
        assert s["files"] == s["kernels"] == len(kernels) and s["bad_files"] == []
        nodes = [len(k["node_opcode"]) for _, k in kernels]
        edges = [len(k["edge_index"]) for _, k in kernels]
        configs = [len(k["config_runtime"]) for _, k in kernels]
        total_configs += sum(configs)
        for key, values in (("nodes", nodes), ("edges", edges), ("configs", configs)):
            assert s[key]["total"] == sum(values)
            _assert_distribution(s[key], values)
        want, _ = np.histogram(configs, bins=[*CONFIG_BINS, 10**9])
        assert [b["kernels"] for b in s["configs"]["histogram"]] == want.tolist()
        assert [(b["lo"], b["hi"]) for b in s["configs"]["histogram"]][:2] == [
            (1, 1000),
            (1001, 2000),
        ]
        assert s["configs"]["histogram"][-1] == {"lo": 10001, "hi": None, "kernels": 0}
        few = sum(c < 10 for c in configs)
        assert s["configs"]["fewer_than_10"] == {"kernels": few, "share": few / len(kernels)}
    assert report["totals"] == {
        "files": 38,
        "kernels": 38,
        "configs": total_configs,
        "bad_files": 0,
    }


def test_runtime_figures_match_numpy(report, synth_root: Path) -> None:
    for split in ("train", "valid"):
        kernels = [k for _, k in _kernels(synth_root, split)]
        rt = report["splits"][split]["runtimes"]
        runtime = [k["config_runtime"].astype(np.float64) for k in kernels]
        norm = [k["config_runtime_normalizers"].astype(np.float64) for k in kernels]
        _assert_streamed_quantiles(rt["ratio"], np.concatenate(runtime) / np.concatenate(norm))
        _assert_distribution(rt["worst_over_best"], [r.max() / r.min() for r in runtime])
        _assert_distribution(rt["best_ratio"], [(r / n).min() for r, n in zip(runtime, norm)])
        _assert_distribution(rt["normaliser_spread"], [n.max() / n.min() - 1 for n in norm])
        ratio0 = np.array([r[0] / n[0] for r, n in zip(runtime, norm)])
        over = np.array([r[0] / r.min() for r in runtime])
        c0 = rt["config0"]
        is_default = int((np.abs(ratio0 - 1) <= 0.05).sum())
        fastest = int(sum(r[0] == r.min() for r in runtime))
        assert c0["is_default"] == {"kernels": is_default, "share": is_default / len(kernels)}
        assert c0["fastest"] == {"kernels": fastest, "share": fastest / len(kernels)}
        _assert_distribution(c0["ratio"], ratio0)
        _assert_distribution(c0["over_best"], over)
        assert c0["default_top1_error"] == pytest.approx(np.mean(over - 1))
        tiles = [k["config_feat"][:, 14].astype(np.float64) for k in kernels]
        corr = [
            np.corrcoef(t, r)[0, 1]
            for t, r in zip(tiles, runtime)
            if len(r) >= 3 and np.ptp(t) > 0 and np.ptp(r) > 0
        ]
        assert corr  # the synthetic output tiles vary
        _assert_distribution(rt["output_tile"]["corr"], corr)
        falls = sum(c < -0.17 for c in corr)
        assert rt["output_tile"]["runtime_falls"] == {"kernels": falls, "share": falls / len(corr)}
    test = report["splits"]["test"]
    assert test["labelled_kernels"] == 0 and test["runtimes"] is None


def test_duplicates_match_numpy(report, synth_root: Path) -> None:
    found_any = False
    for split in SPLITS:
        repeated, rows, kernels_with, gaps = 0, 0, 0, []
        for _, k in _kernels(synth_root, split):
            cfg, rt = k["config_feat"], k["config_runtime"].astype(np.float64)
            _, first, inverse = np.unique(cfg, axis=0, return_index=True, return_inverse=True)
            first = first[inverse.reshape(-1)]
            dup = np.flatnonzero(first != np.arange(len(cfg)))
            repeated, rows, kernels_with = (
                repeated + len(dup),
                rows + len(cfg),
                kernels_with + (len(dup) > 0),
            )
            if rt.min() > 0:
                gaps.extend(np.abs(rt[dup] - rt[first[dup]]) / rt[first[dup]])
        d = report["splits"][split]["duplicates"]
        assert (d["rows"], d["kernels"]) == (repeated, kernels_with)
        assert d["share"] == pytest.approx(repeated / rows)
        if split == "test":
            assert d["gap"] is None
        elif gaps:
            found_any = True
            _assert_streamed_quantiles(d["gap"], gaps)
    assert found_any  # the tiny set has duplicate rows with runtimes to check


def test_programs_and_overlap_match_the_ids(report, synth_root: Path) -> None:
    programs = {}
    for split in SPLITS:
        ids = [p.stem for p in (synth_root / split).glob("*.npz")]
        p = report["splits"][split]["programs"]
        if split == "test":  # anonymised 32-hex ids
            assert (p["count"], p["anonymised_kernels"], p["kernels"]) == (0, len(ids), {})
            continue
        want: dict[str, int] = {}
        for tile_id in ids:
            want[tile_id.rsplit("_", 1)[0]] = want.get(tile_id.rsplit("_", 1)[0], 0) + 1
        assert p["kernels"] == dict(sorted(want.items())) and p["count"] == len(want)
        _assert_distribution(p["kernels_per_program"], list(want.values()))
        programs[split] = set(want)
    shared = sorted(programs["train"] & programs["valid"])
    assert report["program_overlap"]["train-valid"] == {"count": len(shared), "programs": shared}
    assert report["program_overlap"]["train-test"] == {"count": 0, "programs": []}


def test_feature_columns_match_numpy(report, synth_root: Path) -> None:
    for split in SPLITS:
        kernels = [k for _, k in _kernels(synth_root, split)]
        for key in ("node_feat", "config_feat"):
            x = np.concatenate([k[key] for k in kernels]).astype(np.float64)
            f = report["splits"][split]["features"][key]
            assert (f["rows"], f["columns"]) == x.shape
            np.testing.assert_array_equal(f["min"], x.min(axis=0))
            np.testing.assert_array_equal(f["max"], x.max(axis=0))
            np.testing.assert_allclose(f["mean"], x.mean(axis=0), rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(f["std"], x.std(axis=0), rtol=1e-6, atol=1e-9)
            distinct = np.array([len(np.unique(c)) for c in x.T])
            std = x.std(axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                tail = np.maximum(x.max(0) - x.mean(0), x.mean(0) - x.min(0)) / std
            assert f["constant"] == np.flatnonzero(distinct == 1).tolist()
            assert f["two_valued"] == np.flatnonzero(distinct == 2).tolist()
            heavy = (distinct > 2) & (tail > TAIL_SIGMAS)
            assert f["heavy_tailed"] == np.flatnonzero(heavy).tolist()


def test_streaming_accumulators_against_numpy() -> None:
    rng = np.random.default_rng(0)
    values = rng.lognormal(0.5, 1.2, size=20_000)
    hist = LogHistogram()
    for chunk in np.array_split(values, 37):
        hist.add(chunk)
    _assert_streamed_quantiles(hist.summary(), values)
    assert sum(hist.summary()["histogram"]["counts"]) == len(values)
    x = np.column_stack([rng.integers(0, 2, 500), rng.normal(size=500), np.full(500, 3.0)])
    cols = Columns(3)
    for chunk in np.array_split(x, 7):
        cols.add(chunk)
    s = cols.summary(10.0)
    assert (s["constant"], s["two_valued"], s["heavy_tailed"]) == ([2], [0], [])
    np.testing.assert_allclose(s["std"], x.std(axis=0), atol=1e-12)


# ---------------------------------------------------------------------------------------------
# A hand-made root with known answers
# ---------------------------------------------------------------------------------------------


def _write(
    path: Path, runtimes, normalisers, config_rows, nodes: int = 3, output_sums=None
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    c = len(runtimes)
    config_feat = np.zeros((c, 24), np.float32)
    config_feat[:, 0] = config_rows
    if output_sums is not None:
        config_feat[:, 14] = output_sums
    np.savez(
        path,
        node_feat=np.ones((nodes, 140), np.float32),
        node_opcode=np.arange(1, nodes + 1, dtype=np.uint8),
        edge_index=np.array([[i + 1, i] for i in range(nodes - 1)], np.int64),
        config_feat=config_feat,
        config_runtime=np.array(runtimes, np.int64),
        config_runtime_normalizers=np.array(normalisers, np.int64),
    )


@pytest.fixture
def handmade(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    # config 0 the default (ratio 1), not the fastest (2x the best); rows 0 and 2 the same
    _write(root / "train" / "alpha_a1.npz", [100, 200, 100, 50], [100] * 4, [1, 2, 1, 3])
    # config 0 within 5% of its normaliser and the fastest; row 1 repeats row 0, 5/90 slower
    _write(root / "train" / "alpha_a2.npz", [90, 95, 300], [92] * 3, [1, 1, 2])
    # config 0 twice its normaliser, 2x the best
    _write(root / "train" / "beta_b1.npz", [200, 100], [100, 101], [1, 2])
    _write(root / "valid" / "beta_b2.npz", [10, 20], [10, 10], [1, 2])
    _write(root / "valid" / "gamma_c1.npz", [10, 20], [10, 10], [1, 2])
    _write(root / "test" / ("ab" * 16 + ".npz"), [0, 0, 0], [0, 0, 0], [1, 2, 2])
    return root


def test_runtime_falls_as_the_output_tile_grows(tmp_path: Path) -> None:
    root = tmp_path / "root"
    # output bounds' sum 2, 4, 8: runtime falls (correlation -0.99), rises (+0.99), flat-ish
    _write(root / "train" / "a_1.npz", [400, 200, 100], [400] * 3, [1, 2, 3], output_sums=[2, 4, 8])
    _write(root / "train" / "a_2.npz", [100, 200, 400], [100] * 3, [1, 2, 3], output_sums=[2, 4, 8])
    _write(root / "train" / "a_3.npz", [100, 90, 100], [100] * 3, [1, 2, 3], output_sums=[2, 4, 8])
    # left out: two configs; a constant tile; equal runtimes
    _write(root / "train" / "a_4.npz", [200, 100], [200] * 2, [1, 2], output_sums=[2, 4])
    _write(root / "train" / "a_5.npz", [300, 200, 100], [300] * 3, [1, 2, 3], output_sums=[4] * 3)
    _write(root / "train" / "a_6.npz", [100] * 3, [100] * 3, [1, 2, 3], output_sums=[2, 4, 8])
    r = inspect_root(root, progress=False)["splits"]["train"]["runtimes"]
    assert r["output_tile"]["corr"]["count"] == 3
    assert r["output_tile"]["runtime_falls"] == {"kernels": 1, "share": 1 / 3}
    assert r["output_tile"]["corr"]["min"] == pytest.approx(np.corrcoef([2, 4, 8], [4, 2, 1])[0, 1])


def test_known_answers(handmade: Path) -> None:
    r = inspect_root(handmade, progress=False)
    train = r["splits"]["train"]
    c0 = train["runtimes"]["config0"]
    assert c0["is_default"] == {"kernels": 2, "share": 2 / 3}
    assert c0["fastest"] == {"kernels": 1, "share": 1 / 3}
    assert c0["default_top1_error"] == pytest.approx((1 + 0 + 1) / 3)
    assert train["duplicates"]["rows"] == 2 and train["duplicates"]["kernels"] == 2
    assert train["duplicates"]["share"] == pytest.approx(2 / 9)
    assert train["duplicates"]["gap"]["max"] == pytest.approx(5 / 90)
    assert train["duplicates"]["gap"]["min"] == 0.0
    assert train["runtimes"]["normaliser_spread"]["max"] == pytest.approx(0.01)
    assert train["programs"]["kernels"] == {"alpha": 2, "beta": 1}
    assert r["program_overlap"]["train-valid"] == {"count": 1, "programs": ["beta"]}
    test = r["splits"]["test"]
    assert test["runtimes"] is None and test["duplicates"]["rows"] == 1
    assert test["programs"]["anonymised_kernels"] == 1
    assert r["splits"]["valid"]["configs"]["fewer_than_10"]["share"] == 1.0
    only = inspect_root(handmade, splits=["valid"], progress=False)
    assert list(only["splits"]) == ["valid"] and only["program_overlap"] == {}


# ---------------------------------------------------------------------------------------------
# Command line: outputs, bad files
# ---------------------------------------------------------------------------------------------


def test_cli_table_json_and_png(handmade: Path, tmp_path: Path, capsys) -> None:
    out_json, out_png = tmp_path / "out" / "report.json", tmp_path / "out" / "hist.png"
    argv = ["inspect", str(handmade), "--json", str(out_json), "--png", str(out_png)]
    assert cli.main([*argv, "--no_progress"]) == 0
    out = capsys.readouterr().out
    assert "config 0 is the fastest" in out and "1 (33.3%)" in out
    assert "runtime falls as the output tile grows" in out
    assert "programs in both train-valid: 1 (beta)" in out
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads(out_json.read_text(encoding="utf-8"))
    assert saved == json.loads(json.dumps(inspect_root(handmade, progress=False)))
    assert format_table(saved) in out
    assert sorted(p.name for p in out_json.parent.iterdir()) == ["hist.png", "report.json"]
    # an existing report is refused unless --overwrite
    before = out_json.read_bytes()
    assert cli.main([*argv, "--no_progress"]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert out_json.read_bytes() == before
    assert cli.main([*argv, "--no_progress", "--overwrite"]) == 0


def test_bad_file_is_one_line_and_skip_bad_reads_the_rest(handmade: Path, capsys) -> None:
    bad = handmade / "valid" / "gamma_c1.npz"
    bad.write_bytes(b"not a zip file")
    assert cli.main(["inspect", str(handmade), "--no_progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"tpu-tiles inspect: error: {bad}: not a readable npz file")
    assert err.endswith("re-download it or delete it (or inspect the rest with --skip_bad)")
    assert cli.main(["inspect", str(handmade), "--no_progress", "--skip_bad"]) == 0
    captured = capsys.readouterr()
    assert "skipped 1 bad file(s)" in captured.err
    r = inspect_root(handmade, skip_bad=True, progress=False)
    valid = r["splits"]["valid"]
    assert (valid["files"], valid["kernels"], len(valid["bad_files"])) == (2, 1, 1)
    assert valid["bad_files"][0].startswith(f"{bad}: not a readable npz file")
    # a file that reads but breaks the format: kernel_files' own validation names it
    _write(bad, [1, 2], [1, 1], [1, 2])
    with np.load(bad) as d:
        arrays = {k: d[k] for k in d.files}
    arrays["edge_index"] = np.array([[0, 7]], np.int64)
    np.savez(bad, **arrays)
    with pytest.raises(kernel_files.DataError, match="edge_index refers to node 7"):
        inspect_root(handmade, progress=False)


@pytest.mark.parametrize(
    "flag_path, message",
    [
        (lambda r: r / "train" / "alpha_a1.npz", "an .npz name is a kernel's"),
        (lambda r: r / "valid" / "report.json", "is in the ROOT's valid split"),
        (lambda r: r, "holds the ROOT's train split"),
        (lambda r: r / "train", "is the ROOT's train split"),
    ],
)
def test_outputs_that_touch_the_inputs_are_refused(handmade: Path, capsys, flag_path, message):
    target = flag_path(handmade)
    before = sorted(p.name for p in handmade.rglob("*"))
    digest = (handmade / "train" / "alpha_a1.npz").read_bytes()
    assert cli.main(["inspect", str(handmade), "--json", str(target), "--no_progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in handmade.rglob("*")) == before
    assert (handmade / "train" / "alpha_a1.npz").read_bytes() == digest


def test_same_file_for_both_outputs_and_missing_root(handmade: Path, tmp_path: Path, capsys):
    same = str(tmp_path / "x.out")
    assert cli.main(["inspect", str(handmade), "--json", same, "--png", same]) == 2
    assert f"--png {same} is also --json" in capsys.readouterr().err
    assert cli.main(["inspect", str(tmp_path / "nowhere"), "--no_progress"]) == 2
    assert "data root not found" in capsys.readouterr().err
    assert cli.main(["inspect", str(handmade), "--splits", "valid,nope"]) == 2
    assert "--splits: unknown split 'nope'" in capsys.readouterr().err
    shutil.rmtree(handmade / "test")
    assert cli.main(["inspect", str(handmade), "--splits", "test"]) == 2
    assert "split folder not found" in capsys.readouterr().err


def test_iter_kernels_streams_in_order(synth_root: Path) -> None:
    paths = sorted(str(p) for p in (synth_root / "train").glob("*.npz"))
    got = [
        (p, len(k["config_runtime"]))
        for p, k in kernel_files.iter_kernels(paths, "train", read_ahead=2)
    ]
    with_numpy = [(p, len(np.load(p)["config_runtime"])) for p in paths]
    assert got == with_numpy


def test_report_keys_are_the_documented_ones(report) -> None:
    """The keys `inspect_root` documents, which benchmarks build on."""
    assert set(report) == {
        "format",
        "data_root",
        "settings",
        "totals",
        "splits",
        "program_overlap",
    }
    train = report["splits"]["train"]
    assert set(train) == {
        "files",
        "kernels",
        "bad_files",
        "nodes",
        "edges",
        "configs",
        "labelled_kernels",
        "runtimes",
        "duplicates",
        "programs",
        "features",
    }
    distribution = {"count", "mean", "std", *QUANTILES}
    assert set(train["nodes"]) == distribution | {"total", "histogram"}
    assert set(train["configs"]) == distribution | {"total", "histogram", "fewer_than_10"}
    assert set(train["runtimes"]) == {
        "ratio",
        "worst_over_best",
        "best_ratio",
        "normaliser_spread",
        "config0",
        "output_tile",
    }
    assert set(train["runtimes"]["ratio"]) == distribution | {"histogram"}
    assert set(train["runtimes"]["config0"]) == {
        "is_default",
        "fastest",
        "ratio",
        "over_best",
        "default_top1_error",
    }
    assert set(train["duplicates"]) == {"rows", "share", "kernels", "gap"}
    assert set(train["programs"]) == {
        "count",
        "anonymised_kernels",
        "kernels_per_program",
        "kernels",
    }
    assert set(train["features"]["config_feat"]) == {
        "rows",
        "columns",
        "constant",
        "two_valued",
        "heavy_tailed",
        "min",
        "max",
        "mean",
        "std",
        "tail_sigmas",
    }


def test_ctrl_c_stops_between_kernels_and_writes_nothing(handmade, tmp_path, capsys, monkeypatch):
    from tpu_tiles_models import interrupts

    calls = []

    def pressed_on_the_third() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(interrupts, "check", pressed_on_the_third)
    out = tmp_path / "r.json"
    assert cli.main(["inspect", str(handmade), "--json", str(out), "--no_progress"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert len(calls) == 3 and not out.exists() and not list(tmp_path.glob(".r.json*"))


def test_a_remote_root_reads_like_its_local_copy(handmade: Path) -> None:
    from tpu_tiles_models import files

    url = "ram://test_inspect/root"
    files.copy_tree(handmade, url)
    remote = inspect_root(url, progress=False)
    local = inspect_root(handmade, progress=False)
    assert remote["splits"] == local["splits"] and remote["data_root"] == url
    with pytest.raises(FlagError, match="is in the ROOT's valid split"):
        check_outputs(url, {"--json": f"{url}/valid/r.json"})
