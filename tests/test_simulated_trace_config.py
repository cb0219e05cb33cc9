"""A SIMULATED trace's ``meta.config`` and ``meta.workload`` fields are of the kinds SimConfig and the GPU
model declare (``gpu_model.check_field``), else ``simulate``/``scaling``/``sweep --trace`` refuse it in one
line naming the field. A reviewer found tracebacks (``comm_hook: 5``: 'int' object has no attribute
'partition'; ``hook_rates: []``, ``latency_us: "x"``, ``hardware: 0``, ``stragglers: {"0": [1]}``), silent
wrong results (``shared_core: "no"``: 203.071 ms for 132.399; ``comm_hook: ""`` as no hook;
``effective_tflops: 1e7`` over --tflops's cap) and errors naming nothing (``stragglers: {"abc": 2}``:
"invalid literal for int()")."""
from __future__ import annotations

import json

import pytest

from ddpsim import samples
from ddpsim.__main__ import main as cli
from ddpsim.learn import gpu_model
from ddpsim.sim import SimConfig
from ddpsim.trace import load_trace

S20 = samples.BUNDLED_DIR / "20_sim_resnet50_v100-eth25_w64_default.json"
SIMULATED = sorted(samples.BUNDLED_DIR.glob("2*.json"))

BAD = [  # (meta's section, field, value, what the refusal says it must be)
    ("config", "shared_core", "no", "true or false or null"),  # a bool: a real one
    ("config", "join", 1, "true or false"),
    ("config", "comm_hook", 5, "a non-empty string or null"),  # a name: a real, non-empty string
    ("config", "comm_hook", "", "a non-empty string or null"),
    ("config", "comm_hook", [], "a non-empty string or null"),
    ("config", "hardware", 0, "a non-empty string or null"),
    ("config", "latency_us", "x", "a finite number or null"),  # a number
    ("config", "seed", 0.5, "an integer"),
    ("config", "hook_rates", [], "an object of strings (as keys) to finite numbers"),  # a dict, its keys, its values
    ("config", "stragglers", {"0": [1]}, "an object of integers (as keys) to finite numbers"),
    ("config", "stragglers", {"abc": 2}, "an object of integers (as keys) to finite numbers"),
    ("config", "stragglers", {"0": "x"}, "an object of integers (as keys) to finite numbers"),
    ("config", "order", [1, "a"], "a non-empty string or a list of integers"),  # a list's items
    ("workload", "effective_tflops", 1e7, "between 1e-06 and 1e+06 (as --tflops takes)"),  # --tflops's range
    ("workload", "effective_tflops", 1e308, "between 1e-06 and 1e+06 (as --tflops takes)"),
    ("workload", "arch", "", "a non-empty string"),
]


def edited(tmp_path, section: str, field: str, value) -> str:
    """Sample 20 with ``meta.SECTION.FIELD`` set to ``value``."""
    trace = json.loads(S20.read_text())
    trace["meta"][section][field] = value
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(trace))
    return str(path)


def refusal(capsys, *argv) -> str:
    assert cli(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(("section", "field", "value", "kind"), BAD, ids=lambda v: json.dumps(v))
def test_a_field_of_another_kind_is_refused_in_one_line_naming_it(section, field, value, kind, capsys, tmp_path):
    err = refusal(capsys, "simulate", "--trace", edited(tmp_path, section, field, value), "--iters", "2")
    assert err.startswith(f"ddpsim simulate: error: the simulated trace's meta.{section}.{field} must be {kind}, not ")


@pytest.mark.parametrize("argv", [["scaling"], ["sweep", "--bucket-cap-mb", "5,25"]], ids=lambda a: a[0])
def test_scaling_and_sweep_refuse_it_too(argv, capsys, tmp_path):
    err = refusal(capsys, *argv, "--trace", edited(tmp_path, "config", "comm_hook", 5))
    assert err == (f"ddpsim {argv[0]}: error: the simulated trace's meta.config.comm_hook must be a non-empty "
                   "string or null, not 5")


def test_an_unknown_arch_or_hardware_names_the_field(capsys, tmp_path):
    err = refusal(capsys, "simulate", "--trace", edited(tmp_path, "workload", "arch", "foo"))
    assert err.startswith("ddpsim simulate: error: the simulated trace's meta.workload: unknown arch 'foo'")
    err = refusal(capsys, "simulate", "--trace", edited(tmp_path, "workload", "hardware", "v100-foo"))
    assert err.startswith("ddpsim simulate: error: the simulated trace's meta.workload.hardware: unknown hardware")


@pytest.mark.parametrize(("field", "value"), [("latency_us", "x"), ("comm_hook", 5), ("hook_rates", []),
                                              ("hardware", 0), ("stragglers", {0: "x"}), ("shared_core", "no")])
def test_simconfig_refuses_another_kind_with_a_value_error(field, value):
    with pytest.raises(ValueError, match=f"^{field} must be "):
        SimConfig(**{field: value}).validate()


@pytest.mark.parametrize("path", SIMULATED, ids=lambda p: p.name[:2])
def test_the_bundled_simulated_samples_still_load_and_simulate(path, capsys):
    trace = load_trace(path)
    assert gpu_model.of_trace(trace) is not None
    assert cli(["simulate", "--trace", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["iteration_time_s"] == trace.meta["summary"]["iteration_time_s"]
