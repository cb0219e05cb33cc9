"""The What-if page replays a SIMULATED trace with every option it ran with, as ``simulate --trace`` does.

A user who ran ``simulate ... --straggler 2:1.5 --out s.json`` and opened s.json on the What-if page saw
the run without its straggler (and without its jitter, uneven inputs under Join, naive DDP, --tflops or
bucket_cap_mb_list), named in a caution. The page now simulates ``GpuModel.sim_config`` of the controls
moved, as the command line takes its flags: its figures are the command line's, every what-if starts from
the trace's options, and a what-if a carried option cannot run with is one line naming that option.
The traces are written by the real ``simulate --out``; the page is the real app under AppTest.
"""
from __future__ import annotations

import contextlib
import io
import json
import shlex

import pytest

from apputil import with_uploads
from ddpsim.__main__ import main as cli
from ddpsim.app import units, whatif
from ddpsim.app import whatif_widgets as widgets
from ddpsim.trace import load_trace

ARCH = ["--arch", "resnet50", "--hardware", "v100-eth25", "--world-size", "4"]
MADE = {  # file -> the options it was simulated with (after ARCH)
    "straggler.json": ["--straggler", "2:1.5"],
    "jitter.json": ["--jitter", "0.2"],
    "joined.json": ["--world-size", "2", "--uneven", "1", "--join", "--iters", "6"],
    "naive.json": ["--naive"],
    "tflops.json": ["--tflops", "20"],
    "caps.json": ["--bucket-cap-mb-list", "1", "5", "25"],
    "order.json": ["--order", ",".join(map(str, range(161))), "--seed", "2"],
}


def simulate(*argv) -> tuple[int, list[str], str]:
    """(exit status, stdout's lines, stderr) of the real ``ddpsim simulate argv``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli(["simulate", *argv])
    return rc, out.getvalue().strip().splitlines(), err.getvalue().strip()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The folder of the traces ``MADE``, each written by ``simulate --out``, and what each run printed."""
    folder = tmp_path_factory.mktemp("simulated")
    printed = {}
    for name, options in MADE.items():
        rc, lines, err = simulate(*ARCH, *options, "--out", str(folder / name))
        assert rc == 0, err
        printed[name] = lines[1:]  # the first line names the file
    return folder, printed


def opened(folder, name: str):
    """The real app's What-if page with ``name`` uploaded under that name and open."""
    at = with_uploads({name: load_trace(folder / name)}, "whatif.py", name)
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown(at) -> dict:
    return {m.label: m.value for m in at.metric}


def as_shown(summary: dict) -> dict:
    """A ``simulate`` JSON summary as the page's metrics show it (``ui.metric_row``)."""
    t, e = summary["iteration_time_s"], summary["exposed_comm_s"]
    return {"Iteration time": units.metric_unit(t)[0].format(t * 1e3),
            "Exposed communication": units.metric_unit(t, e)[0].format(e * 1e3),
            "Comm. overlapped with compute": f"{summary['overlap_fraction']:.0%}"}


def pages_command(at) -> list[str]:
    """The page's "The same on the command line", as argv after ``python -m ddpsim simulate``."""
    cmd = next(c.value for c in at.code if c.value.startswith("python -m ddpsim simulate"))
    return shlex.split(cmd)[4:]


@pytest.mark.parametrize("name", list(MADE))
def test_the_unchanged_page_is_simulate_trace(name, made, monkeypatch):
    folder, printed = made
    monkeypatch.chdir(folder)  # the page's command names the trace as the sidebar downloads it: NAME
    rc, again, err = simulate("--trace", name)
    assert rc == 0 and again[1:] == printed[name], err  # the CLI replays the run that wrote it
    ran = json.loads(printed[name][-1])
    at = opened(folder, name)
    assert not at.error and not at.warning, [x.value for x in [*at.error, *at.warning]]  # no caution left
    assert shown(at) == as_shown(ran)
    assert "the same as the configuration unchanged" in "\n".join(m.value for m in at.markdown)
    argv = pages_command(at)
    assert argv == ["--trace", name, "--world-size", str(load_trace(name).world_size)], argv
    rc, lines, err = simulate(*argv)
    assert rc == 0 and json.loads(lines[-1]) == ran, err
    carried = next(c.value for c in at.caption if c.value.startswith(f"Simulated as {name} ran"))
    assert all(flag in carried for flag in MADE[name] if flag.startswith("--") and flag not in ("--world-size", "--iters"))
    # the page's own figure, exactly: its Outcome, not only the digits its metrics show
    trace = load_trace(name)
    base = whatif.base_for(trace, name)
    work = whatif.workload(base, trace)
    summary = whatif.evaluate(work, base, trace, whatif.unchanged_config(base, work, trace)).summary
    assert {k: summary[k] for k in ran} == ran


@pytest.mark.parametrize("name,move,flags", [
    ("straggler.json", ("World size (ranks)", 8), ["--world-size", "8"]),
    ("jitter.json", ("World size (ranks)", 16), ["--world-size", "16"]),
    ("joined.json", ("World size (ranks)", 4), ["--world-size", "4"]),
    ("naive.json", ("World size (ranks)", 8), ["--world-size", "8"]),  # an ordering: nothing to naive DDP
    ("tflops.json", ("World size (ranks)", 8), ["--world-size", "8"]),
    ("caps.json", ("Bucket cap (MiB)", 5.0), ["--world-size", "4", "--bucket-cap-mb", "5"]),
    ("order.json", ("Bucket ordering", "torch"), ["--world-size", "4", "--order", "torch"]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_what_if_starts_from_the_traces_options(name, move, flags, made, monkeypatch):
    folder, printed = made
    monkeypatch.chdir(folder)
    at = opened(folder, name)
    label, value = move
    widget = next(w for w in [*at.select_slider, *at.selectbox] if w.label == label)
    at = widget.set_value(value).run()
    assert not at.exception and not at.error, [x.value for x in [*at.exception, *at.error]]
    argv = pages_command(at)
    assert argv == ["--trace", name, *flags], argv
    rc, lines, err = simulate(*argv)
    assert rc == 0, err
    cli_summary = json.loads(lines[-1])
    assert shown(at) == as_shown(cli_summary)
    assert cli_summary != json.loads(printed[name][-1])  # the move changed the run
    rc, alone, _ = simulate(*ARCH[:4], *flags)  # the GPU model with the move alone, none of the trace's options
    replaced = name in ("caps.json", "order.json")  # a cap replaces the trace's cap list, an ordering its ordering
    assert rc == 0 and (json.loads(alone[-1])["iteration_time_s"] == cli_summary["iteration_time_s"]) == replaced


@pytest.mark.parametrize("name,world,said", [
    ("straggler.json", 2, "straggler rank 2 is not in 0..1 (--straggler 2:1.5 carried from straggler.json's "
                          "options: this page has no control for it)"),
    ("joined.json", 8, "uneven 1 leaves rank 7 without micro-steps (--uneven 1 carried from joined.json's options: "
                       "this page has no control for it; `ddpsim simulate --trace joined.json --uneven 0 --out "
                       "OTHER.json` writes a trace without it)"),
])
def test_a_what_if_a_carried_option_cannot_run_is_one_line(name, world, said, made, monkeypatch):
    folder, _ = made
    monkeypatch.chdir(folder)
    at = opened(folder, name)
    at = next(s for s in at.select_slider if s.label == "World size (ranks)").set_value(world).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [e.value for e in at.error] == [f"The simulator cannot run this configuration: {said}"]
    rc, _, err = simulate("--trace", name, "--world-size", str(world))  # the command line refuses it alike
    assert rc == 2 and said.split(" (")[0] in err and "carried from" in err


def test_the_cap_list_is_said_and_the_hook_returns_to_ddps_own(made, monkeypatch):
    folder, _ = made
    monkeypatch.chdir(folder)
    at = opened(folder, "caps.json")
    assert any("ran with bucket_cap_mb_list 1, 5, 25 MiB" in c.value for c in at.caption)
    base = whatif.base_for(load_trace("caps.json"), "caps.json")
    assert widgets.order_label(whatif.AS_RAN, whatif.base_for(load_trace("order.json"), "order.json")) == \
        f"{whatif.AS_RAN} (0,1,2,...,160)"
    assert whatif.order_options(base) == list(whatif.ORDERS)  # an ordering by name needs no extra choice
