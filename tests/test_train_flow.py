"""Training's flow reads in one direction: the run's places and hash are worked out once
(`run_file.RunPaths.of`), its models.py is loaded once, the final validation and test ranking are
computed by scoring (`scoring.final_scores`), and `export.finish` only writes."""

from __future__ import annotations

import pytest
from conftest import TINY_MLP, tiny_args

from tpu_tiles_models import export, registry, run_file, scoring, train


def test_one_pass_from_options_to_artifacts(synth_root, tmp_path, monkeypatch):
    calls = {"paths": 0, "models": 0, "finish": 0}
    of, load, finish = run_file.RunPaths.of.__func__, registry.load_models_module, export.finish

    def counting_of(cls, args):
        calls["paths"] += 1
        return of(cls, args)

    def counting_load(*args, **kwargs):
        calls["models"] += 1
        return load(*args, **kwargs)

    def writing_only(*args, **kwargs):
        calls["finish"] += 1
        with monkeypatch.context() as inside:  # no scoring while writing
            inside.setattr(scoring, "score_split", lambda *a, **k: pytest.fail("finish scored"))
            return finish(*args, **kwargs)

    monkeypatch.setattr(run_file.RunPaths, "of", classmethod(counting_of))
    monkeypatch.setattr(registry, "load_models_module", counting_load)
    monkeypatch.setattr(export, "finish", writing_only)
    args = tiny_args(synth_root, tmp_path / "out", model="MLP", model_kwargs_json=TINY_MLP)
    result = train.train(args)
    assert calls == {"paths": 1, "models": 1, "finish": 1}
    assert result.run_file.name == f"run_{result.args.hash()}.jsonz"
    assert result.results_csv is not None and result.results_csv.is_file()
