"""Flags given with a SIMULATED trace of a GPU model change its options as a recording's replay takes
them, errors caused by an option carried from the trace name it as its flag, and the What-if page
starts its hook and NCCL algorithm on the trace's (every other option: tests/test_whatif_simulated_trace.py). A reviewer
found ``simulate --trace c20.json --bucket-cap-mb 5`` (made with ``--bucket-cap-mb-list 1 5 25``) at
5 buckets, 123.891 ms, the list's run (``--arch ... --bucket-cap-mb 5``: 13 buckets, 123.629 ms), and
the page running a ``--comm-hook fp16 --algo tree`` trace without them, cautioned as
"algo tree, comm_hook fp16"."""
from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from apputil import with_uploads
from ddpsim import samples
from ddpsim.__main__ import main as cli
from ddpsim.app import command, whatif
from ddpsim.app import whatif_widgets as widgets
from ddpsim.trace import load_trace, save_trace

ARCH = ["--arch", "resnet50", "--hardware", "v100-eth25", "--world-size", "4"]
RECORDING = str(samples.BUNDLED_DIR / "01_mlp_torch_default.json")


def summary(capsys, *argv) -> dict:
    """The JSON summary ``ddpsim simulate argv`` prints last."""
    assert cli(["simulate", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def made(capsys, tmp_path, *options) -> str:
    """A SIMULATED trace of ``ARCH`` with ``options``; its path."""
    out = str(tmp_path / f"made{len(list(tmp_path.iterdir()))}.json")
    summary(capsys, *ARCH, *options, "--out", out)
    return out


def refused(capsys, *argv) -> str:
    assert cli(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_another_cap_replaces_a_simulated_traces_cap_list(capsys, tmp_path):
    listed = made(capsys, tmp_path, "--bucket-cap-mb-list", "1", "5", "25")
    five = summary(capsys, "--trace", listed, "--bucket-cap-mb", "5")
    assert five == summary(capsys, *ARCH, "--bucket-cap-mb", "5") and five["n_buckets"] == 13
    assert summary(capsys, "--trace", listed)["n_buckets"] == 5  # the list, as it ran
    first = summary(capsys, "--trace", listed, "--first-bucket-cap-mb", "5")
    assert first == summary(capsys, *ARCH, "--first-bucket-cap-mb", "5")
    firsted = made(capsys, tmp_path, "--first-bucket-cap-mb", "5")
    assert summary(capsys, "--trace", firsted, "--bucket-cap-mb-list", "1", "5", "25") == \
        summary(capsys, *ARCH, "--bucket-cap-mb-list", "1", "5", "25")
    rows = tmp_path / "rows.json"
    assert cli(["sweep", "--trace", listed, "--bucket-cap-mb", "5,default", "--out", str(rows)]) == 0
    assert "no best" not in capsys.readouterr().out
    assert {r["bucket_cap_mb"]: r["n_buckets"] for r in json.loads(rows.read_text())} == {5.0: 13, None: 5}


def test_refusals_name_the_option_carried_from_the_trace(capsys, tmp_path):
    naive = made(capsys, tmp_path, "--naive")
    err = refused(capsys, "simulate", "--trace", naive, "--overlap")
    assert "choose one (--naive carried from" in err and "--no-naive drops it" in err
    assert summary(capsys, "--trace", naive, "--overlap", "--no-naive") == summary(capsys, *ARCH, "--overlap")
    slow = made(capsys, tmp_path, "--straggler", "2:1.5")
    for cmd, how in (("simulate", "a --straggler given replaces it"), ("sweep", "this command has no flag for it")):
        err = refused(capsys, cmd, "--trace", slow, "--world-size", "2")
        assert err.endswith(f"straggler rank 2 is not in 0..1 (--straggler 2:1.5 carried from {slow}'s options: {how})")
    assert summary(capsys, "--trace", slow, "--straggler", "3:1.2") == summary(capsys, *ARCH, "--straggler", "3:1.2")
    err = refused(capsys, "simulate", "--trace", slow, "--world-size", "2", "--jitter", "-1")
    assert "carried" not in err  # a refusal of the flags given alone


def test_sweep_names_the_simulate_command_for_an_option_it_has_no_flag_for(capsys, tmp_path):
    """sweep has no --uneven: its refusal of a Join trace at more ranks named one (the user followed it into
    'unrecognized arguments: --uneven 0'); it now names the simulate command that writes a trace without it."""
    joined = made(capsys, tmp_path, "--uneven", "1", "--join")
    err = refused(capsys, "sweep", "--trace", joined, "--world-size", "4,8")
    assert err.endswith(f"(--uneven 1 carried from {joined}'s options: this command has no flag for it; "
                        f"`ddpsim simulate --trace {joined} --uneven 0 --out OTHER.json` writes a trace without it)")
    even = str(tmp_path / "even.json")
    assert cli(["simulate", "--trace", joined, "--uneven", "0", "--out", even]) == 0
    capsys.readouterr()
    assert cli(["sweep", "--trace", even, "--world-size", "4,8", "--bucket-cap-mb", "25"]) == 0


def test_a_recordings_refusal_comes_first_and_no_calibrate_is_a_recordings(capsys, tmp_path):
    err = refused(capsys, "simulate", "--trace", RECORDING, "--batch", "0")
    assert "--batch applies to --arch or a SIMULATED trace" in err and "not to a recording" in err
    gpu = made(capsys, tmp_path)
    for cmd in ("simulate", "sweep"):
        for source in (["--trace", gpu], ["--arch", "resnet50"]):
            assert "--no-calibrate applies to a recording" in refused(capsys, cmd, *source, "--no-calibrate")


def page(path: str):
    """(Base, unchanged choices, the Outcome) of the What-if page opening ``path``, nothing changed."""
    trace = load_trace(path)
    base = whatif.base_for(trace, path)
    work = whatif.workload(base, trace)
    c = whatif.choices(base)
    hook = widgets.simulated_hook(widgets.recorded_hook(base), base)  # the selector at its start
    cfg = whatif.sim_config(base, c["bucket_cap_mb"], c["order"], c["find_unused_parameters"], c["no_sync_every"],
                            c["world_size"], c["network"], work=work, trace=trace, algo=c["algo"], comm_hook=hook,
                            last_bucket_small=c["last_bucket_small"])
    return base, c, hook, whatif.evaluate(work, base, trace, cfg)


@pytest.mark.parametrize("options", [["--comm-hook", "fp16", "--algo", "tree"],
                                     ["--comm-hook", "powersgd", "--powersgd-start-iter", "2", "--powersgd-rank", "2"]],
                         ids=lambda o: " ".join(o))
def test_the_page_starts_on_the_traces_hook_and_algorithm(options, capsys, tmp_path):
    path = made(capsys, tmp_path, *options)
    base, c, hook, out = page(path)
    ran = load_trace(path).meta["summary"]
    assert out.summary["iteration_time_s"] == ran["iteration_time_s"]
    assert out.summary["exposed_comm_s"] == ran["exposed_comm_s"]
    assert not out.cautions, out.cautions
    assert widgets.recorded_hook(base) == options[1] and c["algo"] == ("tree" if "tree" in options else None)
    cmd = command.simulate_command(base, path, c["bucket_cap_mb"], c["order"], False, 1, 4, base.network, hook,
                                   algo=c["algo"])
    assert summary(capsys, *shlex.split(cmd)[4:])["iteration_time_s"] == ran["iteration_time_s"]


def test_an_unknown_gpu_is_one_error_on_the_page(capsys, tmp_path):
    trace = load_trace(made(capsys, tmp_path))
    trace = dataclasses.replace(trace, meta={**trace.meta, "workload": {**trace.meta["workload"], "hardware": "b300-eth25"}})
    save_trace(trace, tmp_path / "b300.json")
    assert "b300" in refused(capsys, "simulate", "--trace", str(tmp_path / "b300.json"))
    at = with_uploads({"b300": trace}, "whatif.py", "b300")
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.error) == 1 and "b300" in at.error[0].value


def test_the_pages_controls_open_on_the_traces_hook_and_algorithm(capsys, tmp_path):
    trace = load_trace(made(capsys, tmp_path, "--comm-hook", "fp16", "--algo", "tree"))
    at = with_uploads({"fp16 tree": trace}, "whatif.py", "fp16 tree")
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert next(s for s in at.selectbox if s.label == "Communication hook").value == "fp16"
    assert next(s for s in at.selectbox if s.label == "NCCL algorithm").value == "tree"
    assert not at.warning, [w.value for w in at.warning]
    assert "the same as the configuration unchanged" in "\n".join(m.value for m in at.markdown)
    assert f"{trace.meta['summary']['iteration_time_s'] * 1e3:.1f}" in "\n".join(str(m.value) for m in at.metric)
