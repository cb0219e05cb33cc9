"""Profiles as users take them: sizes from NCCL's metadata, the shapes, or the user's model, and
one-line refusals where none is known (ddpsim/trace/profile_sizes.py, ddpsim/models/shapes.py).

The fixtures are the bundled H100 profiles with fields taken out as torch.profiler's settings
leave them out (``ddpsim.experiments.profile_variants``); torch's own rebuilt bucket sizes, in
each profile's ``*.truth.json``, are the oracle.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpsim.analysis import summarize
from ddpsim.experiments import profile_variants as pv
from ddpsim.models.shapes import ModelParams, model_params
from ddpsim.samples import H100_DIR
from ddpsim.trace import TraceFormatError, save_trace
from ddpsim.trace.profile_import import import_profiles
from ddpsim.trace.profile_sizes import UnknownSizesError, match_model

ROOT = Path(__file__).resolve().parents[1]
R18, R18_MODEL = "resnet18_gloo_ws2", "ddpsim.models.resnet:resnet18"


def run(*args):
    return subprocess.run([sys.executable, "-m", "ddpsim", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def truth(stem):
    return json.loads((H100_DIR / f"{stem}_rank0.truth.json").read_text())


# what each variant must give: (sizes equal torch's, simulate runs) per profile; None = not run
EXPECT = {
    "as captured": {"resnet18_gloo_ws2": (True, True), "resnet50_nccl_ws1": (True, True),
                    "vit_b_16_nccl_ws1": (True, True)},
    # no record_shapes: NCCL's metadata still sizes its allreduces, gloo has none; no parameter sizes
    "no shapes": {"resnet18_gloo_ws2": (False, False), "resnet50_nccl_ws1": (True, False),
                  "vit_b_16_nccl_ws1": (True, False)},
    "no NCCL metadata": {s: (True, True) for s in pv.RUNS},
    "neither": {s: (False, False) for s in pv.RUNS},
    "neither + --model": {"resnet18_gloo_ws2": (True, True), "resnet50_nccl_ws1": (True, True)},
    "partial first step": {s: (True, True) for s in pv.RUNS},
    "one rank of two": {"resnet18_gloo_ws2": (True, True)},
}


@pytest.mark.parametrize("variant", pv.VARIANTS)
def test_each_variant_imports_and_simulates_or_refuses(variant, tmp_path):
    for stem, (equal, simulates) in EXPECT[variant].items():
        row = pv.check(stem, variant, tmp_path)
        assert row["import"].startswith("ok"), row
        assert row["equal"] is equal, row
        assert all(b > 0 for b in row["buckets"]) is equal or variant == "no shapes", row
        for result in (row["replay"], row["what_if"]):
            assert result.startswith("refused") is not simulates, row
            if not simulates:
                assert "sizes are unknown" in result, row


def test_partial_first_step_is_skipped_with_a_note(tmp_path):
    trace = import_profiles(pv.write_variant("resnet50_nccl_ws1", "partial first step", tmp_path))
    assert [it.iteration for it in trace.ranks[0].iterations] == [5, 6]
    assert any("ProfilerStep#4 has no DDP forward" in n for n in trace.meta["import_notes"])


def test_meta_backward_gives_torchs_ready_order():
    """Note [The gradient-ready order from a meta backward], against torch's rebuilt order on the H100."""
    for stem, spec in (("resnet18_gloo_ws2", R18_MODEL), ("resnet50_nccl_ws1", "ddpsim.models.resnet:resnet50")):
        t, m = truth(stem), model_params(spec)
        order = [int(x) for x in t["ddp_logging_data"]["rebuilt_per_bucket_param_indices"].replace(",", " ").split()]
        assert m.ready_order == order and not m.notes
        assert [(p["name"], p["shape"]) for p in m.params] == [(p["name"], p["shape"]) for p in t["params"]]


def test_model_path_on_the_shape_stripped_resnet18_gives_torchs_buckets(tmp_path):
    paths = pv.write_variant(R18, "neither", tmp_path)
    out = tmp_path / "r18.json"
    result = run("import", *paths, "--out", out, "--model", R18_MODEL)
    assert result.returncode == 0, result.stderr
    assert "sizes: parameters from model, allreduces from members" in result.stdout
    from ddpsim.trace import load_trace

    trace = load_trace(out)
    want = [int(x) for x in truth(R18)["ddp_logging_data"]["rebuilt_bucket_sizes"].split(",")]
    for rank in trace.ranks:
        assert [b.bytes for b in rank.layouts[-1].buckets] == want == [2_052_000, 28_852_224, 15_853_824]
        for it in rank.iterations:
            assert [b.bytes for b in it.buckets] == want
    assert trace.params[61].name == "fc.bias" and trace.params[0].name == "conv1.weight"
    sim = run("simulate", "--trace", out, "--iters", "3")
    assert sim.returncode == 0 and "3 buckets" in sim.stdout, sim.stderr


def test_a_model_that_is_not_the_profiles_is_one_line(tmp_path):
    paths = pv.write_variant(R18, "neither", tmp_path)
    result = run("import", *paths, "--out", tmp_path / "x.json", "--model", "ddpsim.models.resnet:resnet50")
    assert result.returncode == 2 and not (tmp_path / "x.json").exists()
    assert result.stderr.strip().count("\n") == 0
    assert "the profile has 62 gradients per step but ddpsim.models.resnet:resnet50 has 161" in result.stderr


def test_a_shape_difference_names_the_first_one():
    model = ModelParams("toy.py:factory", [{"index": 0, "name": "w", "shape": [4, 3], "dtype": "float32", "bytes": 48},
                                           {"index": 1, "name": "b", "shape": [4], "dtype": "float32", "bytes": 16}],
                        ready_order=[1, 0])
    assert match_model(model, [([4], "float32"), ([4, 3], "float32")]) == [1, 0]
    assert match_model(model, [(None, "float32"), (None, "float32")]) == [1, 0]  # no shapes: nothing to check
    with pytest.raises(TraceFormatError, match=r"gradient 2 in the profile's ready order has shape \[3, 4\] "
                                               r"but toy.py:factory's \(w\) has \[4, 3\]"):
        match_model(model, [([4], "float32"), ([3, 4], "float32")])


def test_a_model_file_that_fails_on_meta_is_one_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def factory():\n    raise RuntimeError('needs a GPU')\n")
    result = run("import", *pv.write_variant(R18, "neither", tmp_path), "--out", tmp_path / "x.json",
                 "--model", f"{bad}:factory")
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "could not build" in result.stderr and "RuntimeError: needs a GPU" in result.stderr


def test_unknown_sizes_load_summarize_and_refuse_in_one_line(tmp_path):
    trace = import_profiles(pv.write_variant(R18, "neither", tmp_path))
    assert trace.meta["sizes"] == {"params": "unknown", "buckets": "unknown"}
    assert summarize(trace)["iteration_time_s"] > 0  # it shows and summarizes
    out = tmp_path / "stripped.json"
    save_trace(trace, out)
    for args in (["simulate", "--trace", out],
                 ["simulate", "--trace", out, "--hardware", "h100-nvlink", "--world-size", "8", "--bucket-cap-mb", "5"],
                 ["simulate", "--trace", out, "--world-size", "4"],
                 ["sweep", "--trace", out]):
        result = run(*args)
        assert result.returncode == 2, result.stdout
        line = result.stderr.strip()
        assert line.count("\n") == 0 and "sizes are unknown" in line, line
        assert "record_shapes=True" in line and "--model path.py:factory" in line, line
    from ddpsim.learn.extract import workload_from_trace

    with pytest.raises(UnknownSizesError):  # before any network is fitted
        workload_from_trace(trace)


@pytest.mark.slow
def test_app_shows_unknown_sizes_and_the_whatif_page_refuses(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from ddpsim import samples

    save_trace(import_profiles(pv.write_variant(R18, "neither", tmp_path)), tmp_path / "stripped.json")
    monkeypatch.setenv(samples.ENV_VAR, str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.selectbox(key="ddpsim_source").set_value("stripped").run()
    for page in ("timeline", "buckets"):
        at.switch_page(f"ddpsim/app/pages/{page}.py").run()
        assert not at.exception and not at.error, page
        assert any("Sizes unknown" in w.value for w in at.warning), page
    at.switch_page("ddpsim/app/pages/whatif.py").run()
    assert not at.exception
    assert [e.value for e in at.error] and "sizes are unknown" in at.error[0].value
    assert "--model path.py:factory" in at.error[0].value
