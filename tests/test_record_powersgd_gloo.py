"""torch's PowerSGD hook on gloo with several buckets or find_unused_parameters: the ranks launch its
allreduces in different orders (Note [PowerSGD on gloo with several buckets] in ddpsim/minddp/comm_hook.py).
``record --comm-hook powersgd --powersgd-start-iter 2`` on 3 gloo ranks ended with "rank 1 failed: died
from signal SIGABRT; last output: what(): [enforce fail at ...pair.cc:456] ... 1032 vs 512. Received data
size doesn't match expected size. Is there a distributed collective mismatch in your code?": a learner
reads that their code is wrong, and nothing says what to change. The failure is timing's (it aborted,
or hung), so this builds the launcher's line from a rank's real exit: SIGABRT, with gloo's last line
in its log."""
import signal

from ddpsim.record.config import RecordConfig
from ddpsim.record.failure import failure

GLOO = ("  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] "
        "op.preamble.length <= op.nbytes. 1032 vs 512. Received data size doesn't match expected size. Is "
        "there a distributed collective mismatch in your code?")


def line(tmp_path, last=GLOO, **hook) -> str:
    cfg = RecordConfig(model="mlp", world_size=3, backend="gloo", **hook)
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "rank1.log").write_text(f"terminate called after throwing an instance of 'gloo::EnforceNotMet'\n{last}\n")
    shards = [tmp_path / f"s{r}.jsonl" for r in range(3)]
    return str(failure(cfg, tmp_path / "run.json", shards, logs, {1: -signal.SIGABRT}, [], set()))


def test_a_powersgd_failure_on_gloo_says_what_to_change(tmp_path):
    said = line(tmp_path, comm_hook="powersgd", powersgd_start_iter=2)
    assert said.startswith("rank 1 failed: died from signal SIGABRT; last output:") and "\n" not in said
    assert "; PowerSGD on gloo: torch's powerSGD_hook launches its P and Q allreduces from gloo's callback" in said
    assert "record it with one bucket (--bucket-cap-mb 100) and without --find-unused-parameters, or on NCCL" in said


def test_other_hooks_fail_as_before(tmp_path):
    said = line(tmp_path, comm_hook="fp16")
    assert said.startswith("rank 1 failed: died from signal SIGABRT") and "PowerSGD" not in said


def test_another_failure_of_a_powersgd_run_on_gloo_gets_no_powersgd_advice(tmp_path):
    """An unused parameter's error under PowerSGD was followed by "; PowerSGD on gloo: ... record it with
    one bucket and without --find-unused-parameters", contradicting the advice before it."""
    said = line(tmp_path, last="RuntimeError: Expected to have finished reduction in the prior iteration before "
                "starting a new one.", comm_hook="powersgd", powersgd_start_iter=2)
    assert "got no gradient" in said and "PowerSGD" not in said and ".;" not in said, said


def test_a_static_graph_failure_says_static_graph_not_find_unused():
    """branchy recorded with --static-graph --find-unused-parameters failed on both ranks (torch 2.13, 2 gloo
    ranks) and the line said to turn on find_unused_parameters, which was on."""
    from ddpsim.record.explain import explain
    rank0 = ("Expected to have finished reduction in the prior iteration before starting a new one. This error "
             "indicates that your training graph has changed in this iteration, e.g., one parameter is used in first "
             "iteration, but then got unused in the second iteration. this is not compatible with static_graph set "
             "to True.")
    rank1 = ("Your training graph has changed in this iteration, e.g., one parameter is unused in first iteration, "
             "but then got used in the second iteration. this is not compatible with static_graph set to True.")
    for error in (rank0, rank1):
        said = explain(0, error, [])
        assert "static_graph=True does not allow" in said and "record without --static-graph" in said
        assert "turn on find_unused_parameters" not in said


def test_a_hang_of_uneven_inputs_without_join_gets_no_powersgd_advice(tmp_path):
    from ddpsim.record.explain import powersgd_on_gloo
    uneven = RecordConfig(model="mlp", world_size=2, backend="gloo", comm_hook="powersgd", uneven=1)
    assert powersgd_on_gloo(uneven, {}, hang=True) == ""
    one_bucket = RecordConfig(model="mlp", world_size=2, backend="gloo", comm_hook="powersgd", bucket_cap_mb=100)
    assert powersgd_on_gloo(one_bucket, {}, hang=True) == ""
    several = RecordConfig(model="mlp", world_size=2, backend="gloo", comm_hook="powersgd")
    assert powersgd_on_gloo(several, {}, hang=True).startswith("; PowerSGD on gloo")
