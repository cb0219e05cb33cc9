"""What a CPU user's walk through the app found: each figure says what it is, a page with one run says
what it needs, PowerSGD's set-up step is not its steady state, and the straggler sentence says why ranks
that share cores wait little."""
import dataclasses

from ddpsim import samples
from ddpsim.analysis import spread, steady_cycles
from ddpsim.app import whatif, whatif_words
from ddpsim.sim import SimConfig, simulate, synthetic
from ddpsim.trace import load_trace

from apputil import compare_page, with_uploads

MLP = "01_mlp_torch_default"


def _bundled(name: str):
    return load_trace(samples.BUNDLED_DIR / f"{name}.json")


def test_every_what_if_metric_says_what_it_is():
    """The What-if page's "Exposed communication" had no help where its two neighbours had one."""
    at = with_uploads({"recorded: run": _bundled(MLP)}, "whatif.py", "recorded: run")
    assert not at.exception
    helps = {m.label: m.help for m in at.metric}
    assert set(helps) == {"Iteration time", "Exposed communication", "Comm. overlapped with compute"}
    assert all(helps.values()), helps
    assert "last gradient" in helps["Exposed communication"] and "rank that waits most" in helps["Exposed communication"]


def test_compare_with_one_run_asks_for_a_second_and_shows_no_ladder():
    """One run picked showed "Pick runs of at least two rungs ...", a ladder hint that means nothing for one run."""
    at = compare_page({"recorded: run": _bundled(MLP)})
    assert not at.exception
    assert [r["run"] for r in at.dataframe[0].value.to_dict("records")] == ["recorded: run"]
    said = " ".join(i.value for i in at.info)
    assert "pick a second run" in said and "rungs" not in said
    assert not [e for e in at.expander if "ladder" in e.label]
    both = compare_page({"recorded: run": _bundled(MLP), "recorded: other": _bundled("02_mlp_torch_cap0.25")})
    assert [e for e in both.expander if "ladder" in e.label]  # two runs: the ladder is offered again


def test_powersgd_set_up_step_is_left_out_of_the_steady_state_where_later_steps_exist():
    """torch's powerSGD_hook sets itself up in its first compressing step (its error-feedback memories, Q drawn
    at random), a one-off like iteration 0; in one gloo recording (convnet, 3 ranks, start_powerSGD_iter=2) that
    step's communication took 1.8-1.9 s against at most 0.25 s later (another, 2 ranks on a loaded machine:
    83 and 38 ms against 10-201 ms later). Simulated, the steady state starts one step later; a run whose only
    compressing step is the first keeps it (test_sim_comm_hooks)."""
    w = synthetic("resnet50", "v100-eth25")
    trace, summary = simulate(w, SimConfig(world_size=4, iters=6, comm_hook="powersgd", powersgd_start_iter=2))
    assert steady_cycles(trace) == [[3], [4], [5]] and summary["steady_iterations"] == [3, 4, 5]
    assert spread(trace)["iteration_time_s"]["n"] == 3
    short, _ = simulate(w, SimConfig(world_size=4, iters=3, comm_hook="powersgd", powersgd_start_iter=2))
    assert steady_cycles(short) == [[2]]


def test_ranks_sharing_cores_are_why_the_slowest_rank_costs_little():
    """A 3-rank run on 2 cores read "the slowest of 3 ranks computes about 38.6% longer ... which costs 0.00 ms
    ..., less where communication, not compute, sets the pace": its simulation ran 0.73 ms faster with the
    drawn noise than without, for the ranks on one core take turns (their compute added up sets the pace)."""
    trace = _bundled(MLP)
    base = whatif.base_for(trace)
    work = whatif.workload(base, trace)
    shared = dataclasses.replace(work, link=dataclasses.replace(work.link, cpus=1))
    for w, clause in ((shared, "(2 ranks on 1 here)"), (work, None)):
        c = whatif.choices(base)
        cfg = whatif.sim_config(base, c["bucket_cap_mb"], c["order"], c["find_unused_parameters"], c["no_sync_every"],
                                c["world_size"], c["network"], work=w, trace=trace, algo=c["algo"])
        text = whatif_words.describe_stragglers(whatif.evaluate(w, base, trace, cfg))
        assert text.startswith("Waiting for stragglers")
        if clause:
            assert f"where ranks share CPU cores {clause}: the ranks on one core take turns" in text, text
        else:
            assert "CPU cores" not in text, text
