"""`tpu-tiles synth --scale full` and parallel generation: the sizes `--scale` resolves to,
its refusals, and files that do not depend on how many processes wrote them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tpu_tiles_models import cli, interrupts, pipelines, synthetic
from tpu_tiles_models.errors import FlagError
from tpu_tiles_models.synthetic import command, writer

ROOFLINE = synthetic.get_family("roofline")
pytestmark = pytest.mark.filterwarnings("ignore::tpu_tiles_models.synthetic.ValidationSplitWarning")


def _args(*argv: str) -> synthetic.SynthArgs:
    return synthetic.SynthArgs.from_namespace(
        cli.build_parser().parse_args(["synth", "out", *argv])
    )


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.npz"))}


def test_full_scale_is_the_real_split_sizes() -> None:
    assert command.resolve_scale(_args("--scale", "full")) == dict(
        train=5709, valid=676, test=844, max_configs=None
    )
    assert command.resolve_scale(_args("--scale", "full", "--family", "fusion", "--seed", "3")) == (
        dict(train=5709, valid=676, test=844, max_configs=None)
    )


def test_custom_scale_takes_the_flags() -> None:
    assert command.resolve_scale(_args()) == dict(train=300, valid=60, test=60, max_configs=None)
    sizes = command.resolve_scale(_args("--train", "5", "--test", "0", "--max_configs", "9"))
    assert sizes == dict(train=5, valid=60, test=0, max_configs=9)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--train", "300"], "--train"),  # refused even when it equals the default
        (["--valid", "10", "--max_configs", "100"], "--valid, --max_configs"),
        (["--test", "1"], "--test"),
    ],
)
def test_full_scale_refuses_the_flags_it_sets(flags: list[str], named: str) -> None:
    with pytest.raises(FlagError) as err:
        command.resolve_scale(_args("--scale", "full", *flags))
    assert str(err.value) == (
        f"--scale full sets the split sizes and config cap itself; drop {named} or use "
        "--scale custom"
    )


def test_run_passes_the_full_sizes_and_workers(monkeypatch, capsys) -> None:
    seen = {}

    def fake_generate(out, **kwargs):
        seen.update(kwargs, out=out)
        return dict(
            kwargs, kernels=7229, configs=1, out_dir=out, family="fusion", seed=0,
            usable_valid=600, replaced=0, test=844,
        )  # fmt: skip

    monkeypatch.setattr(command, "generate", fake_generate)
    ids = "sample_submission.csv"
    command.run(_args("--scale", "full", "--family", "fusion", "--test_ids_from", ids))
    assert (seen["train"], seen["valid"], seen["test"], seen["max_configs"]) == (
        5709,
        676,
        844,
        None,
    )
    assert (seen["num_workers"], seen["test_ids_from"], seen["family"]) == (None, ids, "fusion")
    assert "train 5709, valid 676 (600 with >= 10 configs), test 844" in capsys.readouterr()[0]
    command.run(_args("--train", "4", "--num_workers", "3", "--no_progress"))
    assert (seen["train"], seen["num_workers"], seen["progress"]) == (4, 3, False)


def test_default_workers_switch_at_the_threshold(monkeypatch) -> None:
    monkeypatch.setattr(pipelines, "cores", lambda: 6)
    assert writer.default_workers(writer.PARALLEL_MIN_KERNELS - 1) == 1
    assert writer.default_workers(writer.PARALLEL_MIN_KERNELS) == 6
    assert writer.default_workers(sum(writer.REAL_SPLIT_SIZES.values())) == 6


def test_num_workers_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FlagError, match=r"^--num_workers must be at least 1, got 0$"):
        synthetic.generate(tmp_path / "d", train=1, num_workers=0, progress=False)
    assert not (tmp_path / "d").exists()


def test_parallel_and_serial_write_the_same_files(tmp_path: Path) -> None:
    kwargs = dict(train=5, valid=3, test=2, seed=4, max_configs=30, progress=False)
    serial = synthetic.generate(tmp_path / "serial", num_workers=1, **kwargs)
    parallel = synthetic.generate(tmp_path / "parallel", num_workers=2, **kwargs)
    assert (serial["workers"], parallel["workers"]) == (1, 2)
    assert serial["configs"] == parallel["configs"] > 10
    written = _files(tmp_path / "serial")
    assert len(written) == 10 and written == _files(tmp_path / "parallel")
    assert not list((tmp_path / "parallel").rglob(".*"))  # every staged kernel put in place


def test_a_kernel_is_a_function_of_seed_split_and_index(tmp_path: Path) -> None:
    # Kernel 3 of train is the same whether 4 or 9 train kernels are made, and its bytes do
    # not depend on when it was written (fixed zip timestamps).
    small = synthetic.generate(
        tmp_path / "a", train=4, valid=0, test=0, max_configs=20, progress=False
    )
    big = synthetic.generate(
        tmp_path / "b", train=9, valid=0, test=0, max_configs=20, progress=False
    )
    assert (small["train"], big["train"]) == (4, 9)
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert set(a) < set(b) and all(a[name] == b[name] for name in a)


def test_a_worker_skips_its_kernels_after_ctrl_c(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    job = writer._Job(str(tmp_path), "t", 0, ROOFLINE, max_configs=8, min_configs=2)
    assert job.write(("train", 0, "a", (0.3, 0.2, 0.15, 0.35))) > 0
    job.stop.touch()
    assert job.write(("train", 1, "b", (0.3, 0.2, 0.15, 0.35))) == 0
    assert [p.name for p in (tmp_path / "train").iterdir()] == [".a.npz.t.tmp"]


def test_shielded_returns_raises_and_restores_the_handler(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    with interrupts.deferred():
        handler = signal.getsignal(signal.SIGINT)
        assert writer._shielded(lambda: 42, stop) == 42
        with pytest.raises(ZeroDivisionError):
            writer._shielded(lambda: 1 / 0, stop)
        interrupts.note(signal.SIGINT)  # a Ctrl-C noted before the pipeline
        ran = []
        with pytest.raises(KeyboardInterrupt):
            writer._shielded(lambda: ran.append(1), stop)
        assert ran == [] and signal.getsignal(signal.SIGINT) is handler
    assert not stop.exists()


# A worker's child (a sweep point's training) that stops on Ctrl-C: it starts with SIGINT
# ignored (inherited while a pipeline runs), so it installs its own handler, as they do.
_CHILD = (
    "import pathlib, signal, sys, time\n"
    "def stop(*_):\n"
    "    pathlib.Path(sys.argv[1]).write_text('stopped')\n"
    "    sys.exit(130)\n"
    "signal.signal(signal.SIGINT, stop)\n"
    "pathlib.Path(sys.argv[1] + '.ready').touch()\n"
    "time.sleep(60)\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_to_the_driver_alone_stops_the_pipeline_like_ctrl_c(signum, tmp_path: Path) -> None:
    """SIGTERM or SIGHUP sent to this process only (`kill`, `docker stop`, not a terminal's
    Ctrl-C to the whole group) reaches the processes below it as Ctrl-C: a worker's child
    stops cleanly, the stop marker is written, and the exit status will be 128 + signum."""
    stop, marker = tmp_path / "stop", tmp_path / "child"

    def pipeline() -> int:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(marker)])
        while not Path(f"{marker}.ready").exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signum)  # as `kill` would, to this process alone
        return child.wait(timeout=30)

    with interrupts.deferred():
        handler = signal.getsignal(signum)
        with pytest.raises(KeyboardInterrupt):
            writer._shielded(pipeline, stop)
        assert signal.getsignal(signum) is handler
    assert marker.read_text() == "stopped" and stop.exists()
    assert interrupts.exit_status() == 128 + signum
