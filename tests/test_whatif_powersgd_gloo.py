"""The What-if page cautions torch's PowerSGD on a gloo recording with several buckets or
find_unused_parameters: real gloo runs of that abort (SIGABRT) or hang (Note [PowerSGD on gloo with
several buckets] in ddpsim/minddp/comm_hook.py), which the simulator, playing NCCL's ordered
collectives, does not show. Its words are the sweep's (layout_sweep.powersgd_on_gloo)."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ddpsim import samples
from ddpsim.app import whatif
from ddpsim.trace import load_trace

APP = str(Path(__file__).resolve().parents[1] / "app.py")
ABORTS = "torch's powerSGD_hook aborts (or hangs) with"


def what_if(name: str, hook: str, cap=None, find_unused=None):
    trace = load_trace(samples.BUNDLED_DIR / f"{name}.json")
    base = whatif.base_for(trace)
    work = whatif.workload(base, trace)
    fu = trace.meta["options"]["find_unused_parameters"] if find_unused is None else find_unused
    cfg = whatif.sim_config(base, cap, "torch", fu, 1, 2, whatif.AS_RECORDED, work=work, trace=trace, comm_hook=hook)
    return whatif.evaluate(work, base, trace, cfg)


def test_powersgd_on_a_gloo_recording_with_several_buckets_and_find_unused_is_cautioned():
    """The walk's case: the MLP in several buckets with find_unused_parameters (its bitmap allreduce)."""
    out = what_if("02_mlp_torch_cap0.25", "powersgd", cap=0.25, find_unused=True)
    n = out.summary["n_buckets"]
    assert n > 1
    said = [c for c in out.cautions if ABORTS in c]
    assert said == [c for c in said if f"with {n} buckets and find_unused_parameters:" in c] and len(said) == 1, out.cautions
    assert "the what-if's figures are what NCCL would run" in said[0]
    assert "cannot do" not in said[0]  # nothing says this model needs find_unused_parameters


@pytest.mark.parametrize("name, hook, cap, fu", [
    ("02_mlp_torch_cap0.25", "powersgd", 100.0, False),  # one bucket, no find_unused: gloo trains it
    ("02_mlp_torch_cap0.25", "fp16", 0.25, True),         # another hook
])
def test_what_gloo_runs_is_not_cautioned(name, hook, cap, fu):
    out = what_if(name, hook, cap=cap, find_unused=fu)
    assert not [c for c in out.cautions if ABORTS in c], out.cautions
    if hook == "powersgd":
        assert out.summary["n_buckets"] == 1


def test_the_page_cautions_powersgd_on_a_gloo_recording_with_find_unused(monkeypatch):
    monkeypatch.delenv(samples.ENV_VAR, raising=False)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.selectbox(key="ddpsim_source").set_value("04_branchy_torch_find_unused").run()
    at.switch_page("ddpsim/app/pages/whatif.py").run()
    assert not at.exception and not [w for w in at.warning if ABORTS in w.value]
    hook = next(s for s in at.selectbox if str(s.key).endswith(":hook"))
    hook.set_value("powersgd").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    said = [w.value for w in at.warning if ABORTS in w.value]
    assert len(said) == 1 and "find_unused_parameters" in said[0], [w.value for w in at.warning]
