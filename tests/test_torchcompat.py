"""ddpsim.torchcompat: torch's private APIs in one place, each with a fallback that is tested.

The fallbacks are exercised on real torch DDP objects whose private attributes were removed,
as an older or newer torch would lack them.
"""
import re
import subprocess
import sys

import pytest
import torch
from torch import nn

from conftest import ROOT
from distutil import run_ranks
from ddpsim import torchcompat


def test_version_parsing_and_warning():
    assert torchcompat.torch_version("2.11.0+cu130") == (2, 11)
    assert torchcompat.torch_version("2.4.1") == (2, 4)
    assert torchcompat.torch_version("2.14.0.dev20270101") == (2, 14)
    assert "inside the range but not a release" in torchcompat.version_warning("2.12.0")
    assert torchcompat.version_warning("2.11.0+cu130") is None and torchcompat.version_warning("2.6.0") is None
    assert torchcompat.version_warning("2.4.1") is None and torchcompat.version_warning("2.8.0") is None
    assert torchcompat.version_warning("2.13.0+cpu") is None
    assert torchcompat.version_warning("2.14.1+cu130") is None
    for old_or_new in ("2.3.1", "1.13.0", "2.15.0"):
        line = torchcompat.version_warning(old_or_new)
        assert line and "\n" not in line and old_or_new in line and "2.4 to 2.14" in line
    for untested in range(torchcompat.SUPPORTED[0][1], torchcompat.SUPPORTED[1][1] + 1):
        line = torchcompat.version_warning(f"2.{untested}.0")
        assert (line is None) == ((2, untested) in torchcompat.TESTED), untested
        assert line is None or "inside the range" in line
    running = torchcompat.version_warning()  # the torch this suite runs on: warned about unless tested
    assert (running is None) == (torchcompat.torch_version() in torchcompat.TESTED)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(256, 256) for _ in range(8)])  # 8 x (256 KiB + 1 KiB)


def _observe(ddp, params):
    """A comm hook doing DDP's allreduce that notes each bucket's parameters, per iteration."""
    import torch.distributed as dist

    index = {id(p): i for i, p in enumerate(params)}
    seen = []

    def hook(state, bucket):
        seen.append((bucket.index(), [index[id(p)] for p in bucket.parameters()]))
        buf = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])

    ddp.register_comm_hook(None, hook)
    return seen


def _layouts(ddp, params, iters):
    seen = _observe(ddp, params)
    out = []
    for it in range(iters):
        seen.clear()
        ddp(torch.randn(4, 256)).sum().backward()
        out.append([{"params": p} for _, p in sorted(seen)])
    return out


def _caps_rank(rank, world, bucket_cap_mb, find_unused):
    from ddpsim.record.instrument import reducer_params, torch_layout_caps

    ddp = nn.parallel.DistributedDataParallel(_model(), bucket_cap_mb=bucket_cap_mb,
                                              find_unused_parameters=find_unused)
    params = reducer_params(ddp.module)
    layouts = _layouts(ddp, params, 2)
    result = {"had_bucket_config": hasattr(ddp, "_bucket_config")}
    # torch 2.13's _bucket_config; then as 2.4-2.11 (no _bucket_config); then neither.
    for name, strip in (("current", ()), ("no_bucket_config", ("_bucket_config",)),
                        ("none", ("_bucket_config", "bucket_bytes_cap", "bucket_bytes_cap_default"))):
        for attr in strip:
            if hasattr(ddp, attr):
                delattr(ddp, attr)
        caps = torch_layout_caps(ddp, params)
        result[name] = (torchcompat.bucket_caps(ddp).source, caps(layouts[0]), caps(layouts[1]))
    result["layouts"] = layouts
    logging = torchcompat.ddp_logging_data(ddp)
    result["logging_keys"] = sorted(logging) if logging else None
    ddp._get_ddp_logging_data = None  # as a torch without the method
    result["logging_missing"] = torchcompat.ddp_logging_data(ddp)
    return result


@pytest.mark.slow
@pytest.mark.parametrize("bucket_cap_mb,find_unused", [(None, False), (0.5, True), (None, True)])
def test_layout_caps_with_and_without_private_attributes(bucket_cap_mb, find_unused):
    r = run_ranks(_caps_rank, 1, args=(bucket_cap_mb, find_unused), timeout=120)[0]
    mib = 1024 * 1024
    cap = int((bucket_cap_mb or 25) * mib)
    first = torchcompat.DEFAULT_FIRST_BUCKET_BYTES if bucket_cap_mb is None else cap
    source, construction, second = r["current"]
    # _bucket_config since 2.12 (2.13 and 2.14 run here); 2.4-2.11 only the public attributes
    assert source == ("_bucket_config" if r["had_bucket_config"] else "bucket_bytes_cap")
    n0, n1 = len(r["layouts"][0]), len(r["layouts"][1])
    if find_unused:  # never rebuilt: the construction layout with the small first cap at the end
        assert n0 == n1 > 1 and construction[-1] == first and set(construction[:-1]) == {cap}
    else:  # one bucket, then the rebuild in ready order, first bucket under the first cap
        assert construction == [sys.maxsize] and n1 > 1
        assert second[0] == first and set(second[1:]) == {cap}
    # Without _bucket_config the public attributes give the same caps (they reproduce the buckets).
    assert r["no_bucket_config"] == ("bucket_bytes_cap", construction, second)
    # With nothing to read: stated unknown (None), never a crash or a guess.
    assert r["none"] == ("unknown", [None] * n0, [None] * n1)
    assert "bucket_sizes" in r["logging_keys"] and r["logging_missing"] is None


def test_assignment_wrapper_is_torchs():
    tensors = [torch.empty(n) for n in (10, 300, 5, 700, 20)]
    got = torchcompat.compute_bucket_assignment_by_size(tensors, [1000, 2000])
    assert got == tuple(torch.distributed._compute_bucket_assignment_by_size(tensors, [1000, 2000]))


def test_no_private_torch_use_outside_torchcompat():
    """Private torch names appear in ddpsim/ and tests/ code only through torchcompat
    (comments and ``quoted`` names in docstrings may mention them)."""
    pattern = r"(torch|dist|ddp|autograd)\._[a-zA-Z]|_bucket_config|_get_ddp_logging_data|_prims_common"
    out = subprocess.run(["git", "grep", "-nE", pattern, "--", "ddpsim/*.py", "tests/*.py"],
                         cwd=ROOT, capture_output=True, text=True).stdout.splitlines()
    allowed = ("ddpsim/torchcompat.py", "tests/test_torchcompat.py")
    # minddp's own methods, named as torch's (``def _log_and_throw``): minddp may call them on its own DDP
    own = set(re.findall(r"^\s*def (_\w+)", "\n".join(p.read_text() for p in (ROOT / "ddpsim" / "minddp").glob("*.py")),
                         re.M))
    offenders = []
    for line in out:
        code = re.sub(r"``[^`]*``|`[^`]*`", "", line.split(":", 2)[2]).split("#")[0]
        mirror = line.startswith("ddpsim/minddp/") and (  # minddp's method, torch's name: defined or called
            re.match(r"\s*def _", code) or _calls_own_method(code, own, pattern))
        if not line.startswith(allowed) and re.search(pattern, code) and not _prose(code) and not mirror:
            offenders.append(line)
    assert not offenders, "\n".join(offenders)


def _calls_own_method(code: str, own: set[str], pattern: str) -> bool:
    """A minddp line whose only private names are calls ``ddp._name(`` of methods minddp defines."""
    called = set(re.findall(r"\bddp\.(_\w+)\(", code))
    return bool(called) and called <= own and not re.search(pattern.replace("ddp|", ""), code) \
        and len(re.findall(r"\bddp\._", code)) == len(re.findall(r"\bddp\._\w+\(", code))


def _prose(code: str) -> bool:
    """A docstring line: words, no call or assignment."""
    return not re.search(r"[=(\[]", code)


def _record_as_torch(version, tmp_path, *args):
    code = (f"import sys, torch; torch.__version__ = {version!r}; from ddpsim.__main__ import main; "
            f"sys.exit(main(['record', *{list(args)!r}, '--out', r'{tmp_path / 'r.json'}']))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_bad_input_is_one_line_on_an_unsupported_torch(tmp_path):
    """The version warning waits for the input checks: a bad flag is still one line."""
    result = _record_as_torch("2.3.1", tmp_path, "--world-size", "0")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--world-size must be >= 1" in lines[0] and result.returncode == 2, result.stderr


@pytest.mark.slow
def test_unsupported_torch_is_one_warning_line_not_a_crash(tmp_path):
    """As a torch outside the range would: one warning line, then the recording runs."""
    result = _record_as_torch("2.3.1", tmp_path, "--world-size", "1", "--iters", "1", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    warnings = [line for line in lines if line.startswith("ddpsim: warning:")]
    assert warnings == [lines[0]] and "torch 2.3.1 is outside the range" in lines[0]
    assert "2.4 to 2.14" in lines[0] and (tmp_path / "r.json").exists()
