"""A recorded model whose parameters take part only sometimes (the zoo's branchy) needs
find_unused_parameters=True: torch fails without it. The What-if page predicted 64.8 ms (-2.9%) for
sample 04 with find_unused_parameters turned off, its sweep recommended find_unused_parameters False
(bucket_cap_mb=5, random ordering, 62.9 ms), and ``simulate --no-find-unused-parameters`` printed a
time: a run torch cannot do ("Expected to have finished reduction in the prior iteration")."""
import json
import shutil

from ddpsim.analysis.unused import graph_changes, marked_unused, needs_find_unused, refusal
from ddpsim.cli import main
from ddpsim.samples import sample_path
from ddpsim.trace import load_trace
from test_app_user_path import on_page, widget

BRANCHY = "04_branchy_torch_find_unused"  # branch.* used only when (iteration + rank) is even
FIXTURE = "tests/fixtures/tiny_trace.json"


def tiny(tmp_path, unused: bool):
    raw = json.loads(open(FIXTURE).read())
    if unused:  # rank 1's iteration 1: fc1.bias marked ready by find_unused_parameters, not computed
        it = next(i for i in raw["ranks"][1]["iterations"] if i["iteration"] == 1)
        next(g for g in it["grad_ready"] if g["param"] == 1)["unused"] = True
    (tmp_path / "t.json").write_text(json.dumps(raw))
    return load_trace(tmp_path / "t.json")


def test_a_parameter_marked_unused_once_needs_find_unused(tmp_path):
    assert marked_unused(tiny(tmp_path, False)) is None
    trace = tiny(tmp_path, True)
    assert marked_unused(trace) == ("fc1.bias", 1, 1)
    said = needs_find_unused(trace)
    assert said.startswith("fc1.bias got no gradient on rank 1 in iteration 1") and "\n" not in said
    assert refusal(trace, True) is None and refusal(trace, False) == ("find_unused_parameters=False", said)


def test_static_graph_refuses_a_graph_that_changes_whatever_find_unused_says(tmp_path):
    """torch's static_graph learns the used parameters in the first iteration and fails where they change
    ("Your training graph has changed in this iteration"), with or without find_unused_parameters:
    ``simulate --trace 04 --static-graph`` printed 64.540 ms and ``sweep --trace 04 --static-graph`` a best."""
    changed = tiny(tmp_path, True)
    assert graph_changes(changed) == ("fc1.bias", 1, 0, 1, True)  # used in iteration 0, unused in 1
    for fu in (False, True):
        option, why = refusal(changed, fu, static_graph=True)
        assert option == "static_graph=True" and why.startswith(
            "fc1.bias is used on rank 1 in iteration 0 of the recording and unused in iteration 1, so torch fails "
            "(\"Expected to have finished reduction in the prior iteration ... this is not compatible with "
            "static_graph set to True\")"), why
    assert needs_find_unused(changed, static_graph=True) is None  # find_unused would not help: refusal says why
    assert refusal(tiny(tmp_path, False), False, static_graph=True) is None  # the same parameters every iteration
    path = shutil.copy(sample_path(BRANCHY), tmp_path / "b.json")
    for command in (["simulate"], ["sweep", "--bucket-cap-mb", "5"]):
        assert main([*command, "--trace", str(path), "--static-graph", "--find-unused-parameters"]) == 2


def test_a_minddp_recording_leaves_unused_parameters_out_and_is_refused_too():
    """minddp's recorder writes no ready event for an unused parameter (torch's probe marks it): sample 08's
    sweep recommended find_unused_parameters=False (57.4 ms), a run torch fails."""
    trace = load_trace(sample_path("08_branchy_minddp_find_unused"))
    assert not any(g.unused for r in trace.ranks for it in r.iterations for g in it.grad_ready)
    assert marked_unused(trace) == ("branch.0.weight", 0, 1)
    assert needs_find_unused(trace).startswith("branch.0.weight got no gradient on rank 0 in iteration 1")


def test_among_rows_as_fast_the_sweep_names_torchs_ordering(capsys):
    """On sample 04, 5 MiB in random ordering and 10 MiB in torch's simulate alike (one bucket each); the
    sweep named the random one, an ordering DDP does not offer."""
    assert main(["sweep", "--trace", str(sample_path(BRANCHY))]) == 0
    best = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert best["order"] == "torch" and best["find_unused_parameters"] is True


def test_the_whatif_refuses_find_unused_off_and_its_sweep_keeps_it_on():
    at = on_page(BRANCHY, "whatif.py")
    verdict = at.success[0].value
    assert "find_unused_parameters **True**" in verdict, verdict
    # "iteration 0's layout, in reverse definition order, stays" only where the best keeps torch's ordering
    assert ("ordering **torch**" in verdict) == ("never rebuilds its buckets" in verdict), verdict
    notes = [c.value for c in at.caption if c.value.startswith("Not in the sweep")]
    assert any("find_unused_parameters=False: branch.0.weight got no gradient" in n for n in notes), notes
    widget(at, "toggle", ":fu").set_value(False).run()
    assert not at.exception and not at.metric  # no prediction of a run torch cannot do
    assert [e.value for e in at.error] == [
        "The simulator cannot run this configuration: find_unused_parameters=False: branch.0.weight got no "
        "gradient on rank 0 in iteration 1 of the recording, so torch fails at the next forward (\"Expected "
        "to have finished reduction in the prior iteration\") unless find_unused_parameters=True"]


def test_simulate_refuses_no_find_unused_on_such_a_recording(tmp_path, capsys):
    path = shutil.copy(sample_path(BRANCHY), tmp_path / "b.json")
    assert main(["simulate", "--trace", str(path), "--bucket-cap-mb", "5"]) == 0  # as recorded: it runs
    capsys.readouterr()
    assert main(["simulate", "--trace", str(path), "--no-find-unused-parameters"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert err.startswith("ddpsim simulate: error: --no-find-unused-parameters: branch.0.weight got no gradient")


def test_sweep_refuses_no_find_unused_on_such_a_recording(tmp_path, capsys):
    """``sweep --trace 04 --no-find-unused-parameters`` marked bucket_cap_mb=5 best (64.8 ms)."""
    path = shutil.copy(sample_path(BRANCHY), tmp_path / "b.json")
    assert main(["sweep", "--trace", str(path), "--bucket-cap-mb", "1,5", "--no-find-unused-parameters"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ddpsim sweep: error: --no-find-unused-parameters: branch.0.weight got no gradient"), err
