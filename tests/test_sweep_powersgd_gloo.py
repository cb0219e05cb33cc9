"""The What-if sweep's verdict on PowerSGD over gloo: torch's powerSGD_hook aborts there with several buckets or
find_unused_parameters (Note [PowerSGD on gloo with several buckets], ddpsim/minddp/comm_hook.py), while the
simulator plays PowerSGD as NCCL runs it. A best row torch would abort on says so; one it runs does not."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

from ddpsim import samples
from ddpsim.app import sweep_verdict, whatif
from ddpsim.trace import load_trace

APP = str(Path(__file__).resolve().parents[1] / "app.py")
NOTE = "Note [PowerSGD on gloo with several buckets]"


def row(cap, ms, n_buckets, fu=False, best=False):
    return {"bucket_cap_mb": cap, "order": "torch", "find_unused_parameters": fu, "last_bucket_small": False,
            "iteration_time_s": ms / 1e3, "exposed_comm_s": 0.001, "n_buckets": n_buckets, "best": best}


def verdict(rows, backend="gloo", hook="powersgd"):
    return sweep_verdict.describe_sweep(rows, {"iteration_time_s": 0.040}, 3, None, backend, hook)


def test_a_best_with_several_buckets_or_find_unused_is_cautioned_on_gloo():
    """A 3-rank MLP recorded with PowerSGD on gloo in one 100 MiB bucket: the sweep's best was bucket_cap_mb=25
    (4 buckets) with find_unused_parameters, a run torch aborts on gloo; the verdict recommended it plainly."""
    rows = [row(100.0, 40.0, 1), row(25.0, 30.0, 4, fu=True, best=True), row(25.0, 31.0, 4)]
    text = verdict(rows)
    assert NOTE in text and "aborts" in text and "4 buckets and find_unused_parameters" in text, text
    assert "what NCCL would run" in text
    one_fu = verdict([row(100.0, 40.0, 1), row(100.0, 30.0, 1, fu=True, best=True)])
    assert NOTE in one_fu and "with find_unused_parameters:" in one_fu, one_fu
    assert "cannot do" not in one_fu and "cannot do" in verdict([row(100.0, 40.0, 1, fu=True), row(5.0, 30.0, 3, fu=True,
                                                                                                  best=True)])
    several = verdict([row(100.0, 40.0, 1), row(5.0, 30.0, 3, best=True)])
    assert NOTE in several and "with 3 buckets:" in several, several


def test_a_best_torch_runs_on_gloo_or_another_backend_or_hook_has_no_caution():
    one = [row(25.0, 40.0, 4), row(100.0, 30.0, 1, best=True)]  # one bucket, no find_unused: torch trains
    assert NOTE not in verdict(one)
    several = [row(100.0, 40.0, 1), row(25.0, 30.0, 4, fu=True, best=True)]
    assert NOTE not in verdict(several, backend="nccl")
    assert NOTE not in verdict(several, hook=None) and NOTE not in verdict(several, hook="fp16")
    assert NOTE not in sweep_verdict.describe_sweep(several, {"iteration_time_s": 0.040}, 3)


def test_the_backend_is_the_recordings_and_nccl_on_a_gpu_recordings_other_network():
    gloo = load_trace(samples.BUNDLED_DIR / "01_mlp_torch_default.json")
    assert whatif.backend(whatif.base_for(gloo), gloo) == "gloo"
    assert whatif.backend(whatif.base_for(gloo), gloo, "eth25") == "gloo"  # a CPU run: a flat link, still gloo
    h100 = load_trace(samples.BUNDLED_DIR / "10_h100_resnet18_gloo_2ranks.json")
    assert whatif.backend(whatif.base_for(h100), h100) == "gloo"
    assert whatif.backend(whatif.base_for(h100), h100, "eth25") == "nccl"  # NCCL between its GPU's nodes
    gpu = load_trace(samples.BUNDLED_DIR / "20_sim_resnet50_v100-eth25_w64_default.json")
    assert whatif.backend(whatif.base_for(gpu), gpu) is None


def test_page_powersgd_on_a_gloo_recording_cautions_the_sweeps_best(monkeypatch):
    """Sample 04 (branchy on gloo, a parameter marked unused) with PowerSGD chosen: the sweep keeps
    find_unused_parameters on, which torch's PowerSGD aborts on over gloo, so its best carries the caution."""
    monkeypatch.delenv(samples.ENV_VAR, raising=False)
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.selectbox(key="ddpsim_source").set_value("04_branchy_torch_find_unused").run()
    at.switch_page("ddpsim/app/pages/whatif.py").run()
    next(s for s in at.selectbox if s.label == "Communication hook").set_value("powersgd").run()
    if (run := [b for b in at.button if b.label.startswith("Run the sweep")]):
        run[0].click().run()
    assert not at.exception and not at.error, [e.message for e in at.exception]
    text = next(x.value for x in at.success if "Best simulated" in x.value)
    assert NOTE in text and "what NCCL would run" in text and "this model cannot do" in text, text
