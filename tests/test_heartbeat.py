"""Heartbeats: what a rank writes, what the launcher reads, and whom it blames."""
import pytest

from ddpsim import heartbeat
from ddpsim.heartbeat import STAGES, Beat, blame

TRAINING = STAGES.index("training")


def test_written_beats_read_back(tmp_path, monkeypatch):
    path = tmp_path / "rank0.heartbeat"
    heartbeat.create(path)
    assert heartbeat.read(path, 0).doing() == "while starting python"
    monkeypatch.setenv(heartbeat.ENV, str(path))
    monkeypatch.setattr(heartbeat, "_mm", None)
    heartbeat.open_writer()
    heartbeat.beat(stage="training")
    heartbeat.beat(iteration=3, phase="backward")
    heartbeat.beat(bucket=0)
    heartbeat.beat(bucket=1)
    b = heartbeat.read(path, 0)
    assert (b.iteration, b.launched, b.bucket) == (3, 2, 1) and b.seq == 4
    assert b.doing() == "in backward of iteration 3"
    assert b.collective() == "allreduce of bucket 1 (iteration 3)"
    monkeypatch.setattr(heartbeat, "_mm", None)


def test_the_rank_behind_is_named_with_the_collective_it_did_not_join():
    waiting = Beat(0, seq=9, stage=TRAINING, iteration=3, phase=1, launched=2, bucket=1)
    stuck = Beat(1, seq=7, stage=TRAINING, iteration=3, phase=0)
    rank, line = blame([waiting, stuck])
    assert rank == 1
    assert line == ("stopped in forward of iteration 3: did not join allreduce of bucket 1 (iteration 3), "
                    "which rank 0 is waiting in")


def test_a_rank_stopped_before_the_others_forward_names_where_they_wait():
    """Stopped in iteration 0's optimizer: the others wait in iteration 1's forward (the bucket rebuild's
    broadcast), where no bucket was launched yet."""
    waiting = Beat(0, seq=9, stage=TRAINING, iteration=1, phase=0)
    stuck = Beat(1, seq=7, stage=TRAINING, iteration=0, phase=2)
    assert blame([waiting, stuck], {1}) == (
        1, "stopped in optimizer of iteration 0 (its process is stopped, e.g. by SIGSTOP): rank 0 went on and "
           "waits in forward of iteration 1, in a collective it did not join (DDP's forward has collectives "
           "too: the bucket rebuild, the buffer broadcast)")


@pytest.mark.parametrize("stopped, expected", [({1}, 1), ({0}, 0)])
def test_a_tie_names_the_stopped_process(stopped, expected):
    a = Beat(0, seq=5, stage=TRAINING, iteration=1, phase=0)
    b = Beat(1, seq=5, stage=TRAINING, iteration=1, phase=0)
    rank, line = blame([a, b], stopped)
    assert rank == expected and "its process is stopped" in line and "wait in the same step" in line


def test_a_tie_in_backward_is_inside_the_allreduce_both_launched():
    """Both ranks launched bucket 2; the stopped one is inside it (Note [Stopped inside a collective])."""
    waiting = Beat(0, seq=9, stage=TRAINING, iteration=3, phase=1, launched=3, bucket=2)
    stuck = Beat(1, seq=8, stage=TRAINING, iteration=3, phase=1, launched=3, bucket=2)
    assert blame([waiting, stuck], {1}) == (
        1, "stopped in backward of iteration 3 (its process is stopped, e.g. by SIGSTOP): inside "
           "allreduce of bucket 2 (iteration 3), the last collective it launched, which rank(s) 0 wait in")


def test_start_up_hang_names_the_rank_that_never_joined():
    joined = Beat(0, seq=1, stage=STAGES.index("joining the process group"))
    starting = Beat(1)
    assert blame([joined, starting]) == (
        1, "stopped while starting python: did not join the process group's rendezvous, which rank 0 is waiting in")


def test_the_starting_line_names_the_rank_furthest_behind_until_all_train():
    """The Record page's line before an iteration is recorded (a 2-rank run sat at 'Recording: 0/6
    iterations' for 44 s while the ranks imported torch and joined the process group)."""
    assert heartbeat.starting_line([Beat(0), Beat(1)]) == heartbeat.STARTING  # no heartbeat yet
    building = Beat(0, seq=2, stage=STAGES.index("building the model"))
    assert heartbeat.starting_line([building, Beat(1)]) == ("Starting the ranks (1 of 2 started): rank 1 has not "
                                                             "started yet...")
    joining = Beat(1, seq=1, stage=STAGES.index("joining the process group"))
    assert heartbeat.starting_line([building, joining]) == ("Starting the ranks (2 of 2 started): rank 1 is joining "
                                                             "the process group...")
    training = [Beat(r, seq=5, stage=TRAINING, iteration=0) for r in range(2)]
    assert heartbeat.starting_line(training) is None  # their first iteration is being recorded
