"""torch 2.13 DDP's device and process-group arguments (``device_ids``, ``output_device``, ``dim``,
``check_reduction``, ``device_mesh``): minddp against torch's DDP on 2 real gloo ranks, in one spawn.
Each case is constructed by both in the same rank; the exception (type and message), the warnings
(category and message, in order) and the attributes must be the same. A 1-D mesh and a mesh sliced
out of a 2-D one then train 3 steps, bit for bit (Notes in ddpsim/minddp/devices.py)."""
import inspect
import warnings

import pytest
import torch
import torch.distributed as dist
from torch import nn

from distutil import run_ranks
from torchgates import needs_ddp

# name -> DDP options; "MESH1", "MESH2", "SLICED" and "WORLD" stand for objects built in the rank
CASES = {
    "default": {},
    "device_ids=[0, 1]": dict(device_ids=[0, 1]),
    "device_ids=0 (an int)": dict(device_ids=0),
    "device_ids=[0]": dict(device_ids=[0]),
    "device_ids=(0,)": dict(device_ids=(0,)),
    "device_ids=[] (empty)": dict(device_ids=[]),
    "device_ids=[], output_device=1": dict(device_ids=[], output_device=1),
    "output_device=0 (falsy)": dict(output_device=0),
    "output_device='cpu'": dict(output_device="cpu"),
    "dim=1": dict(dim=1),
    "check_reduction=False": dict(check_reduction=False),
    "check_reduction=True": dict(check_reduction=True),
    "check_reduction=True, broadcast_buffers=True": dict(check_reduction=True, broadcast_buffers=True),
    "check_reduction=True, device_ids=[0]": dict(check_reduction=True, device_ids=[0]),
    "frozen module, device_ids=[0, 1]": dict(device_ids=[0, 1]),
    "cpu and meta parameters": {},
    "device_mesh 1-D": dict(device_mesh="MESH1"),
    "device_mesh 1-D, process_group=None": dict(device_mesh="MESH1", process_group=None),
    "device_mesh 1-D, process_group=WORLD": dict(device_mesh="MESH1", process_group="WORLD"),
    "device_mesh 2-D": dict(device_mesh="MESH2"),
    "device_mesh 2-D, device_ids=[0, 1]": dict(device_mesh="MESH2", device_ids=[0, 1]),
    "device_mesh sliced from 2-D": dict(device_mesh="SLICED"),
    "process_group=WORLD, dim=-1": dict(process_group="WORLD", dim=-1),
    "SyncBatchNorm in a CPU module": {},  # minddp only: NaiveDDP does not check the layers
}
BUFFER_FLAGS = ("broadcast_buffers", "forward_sync_buffers")  # NaiveDDP takes them and ignores them
ATTRIBUTES = ("device_ids", "output_device", "dim", "device", "device_type", "is_multi_device_module",
              "use_side_stream_for_tensor_copies")
TRAINED_MESHES = ("MESH1", "SLICED")


def _model(name):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    if name.startswith("frozen"):
        model.requires_grad_(False)
    if name == "cpu and meta parameters":
        model[2] = nn.Linear(8, 2, device="meta")
    if name.startswith("SyncBatchNorm"):
        model.insert(1, nn.SyncBatchNorm(8))
    return model


def _resolved(options, meshes):
    return {k: meshes.get(v, v) if isinstance(v, str) else v for k, v in options.items()}


def _ddp_class(impl):
    from ddpsim.minddp import DistributedDataParallel, NaiveDDP
    return {"torch": torch.nn.parallel.DistributedDataParallel, "minddp": DistributedDataParallel,
            "naive": NaiveDDP}[impl]


def _construct(impl, name, options, meshes):
    """What constructing gives: the error, the warnings, the attributes (plain values)."""
    model = _model(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ddp = _ddp_class(impl)(model, **_resolved(options, meshes))
        except Exception as e:  # noqa: BLE001 - the error is what is compared
            ddp, error = None, [type(e).__name__, str(e)]
    seen = [[w.category.__name__, str(w.message)] for w in caught]
    if ddp is None:
        return {"error": error, "warnings": seen}
    mesh = options.get("device_mesh")
    group = meshes[mesh].get_group(mesh_dim=0) if mesh else dist.group.WORLD
    return {"error": None, "warnings": seen, "attributes": [repr(getattr(ddp, a)) for a in ATTRIBUTES],
            "device_mesh": repr(getattr(ddp, "device_mesh", "no attribute")),
            "mesh is the one given": mesh is not None and ddp.device_mesh is meshes[mesh],
            "process_group": ddp.process_group is group,
            "module hooks": [len(model._forward_pre_hooks), len(model._forward_hooks)]}


def _train(impl, mesh, rank):
    """3 SGD steps on rank-dependent data; the parameters after each step."""
    model = _model("train")
    ddp = _ddp_class(impl)(model, device_mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(100 + rank)
    out = []
    for _ in range(3):
        opt.zero_grad()
        ddp(torch.randn(5, 4)).square().sum().backward()
        opt.step()
        out.append([p.detach().flatten().tolist() for p in model.parameters()])
    return out


def _every_case(rank, world):
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_num_threads(1)
    mesh2 = init_device_mesh("cpu", (1, world), mesh_dim_names=("tp", "dp"))
    meshes = {"MESH1": init_device_mesh("cpu", (world,)), "MESH2": mesh2, "SLICED": mesh2["dp"],
              "WORLD": dist.group.WORLD}
    built = {(name, impl): _construct(impl, name, options, meshes) for name, options in CASES.items()
             for impl in ("torch", "minddp", "naive")
             if impl != "naive" or not (set(options) & set(BUFFER_FLAGS) or name.startswith("SyncBatchNorm"))}
    trained = {(mesh, impl): _train(impl, meshes[mesh], rank) for mesh in TRAINED_MESHES
               for impl in ("torch", "minddp")}
    return built, trained


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(_every_case, 2, timeout=300)


def _gate(options):
    """torch 2.13 warns that ``broadcast_buffers`` is deprecated for ``forward_sync_buffers``; a torch
    without that flag does not, so minddp's warnings are 2.13's there."""
    return needs_ddp("forward_sync_buffers") if "broadcast_buffers" in options else ()


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(name, marks=_gate(options)) for name, options in CASES.items()])
def test_minddp_constructs_as_torch(ranks, name):
    for built, _ in ranks:
        assert built[(name, "minddp")] == built[(name, "torch")]
        if (name, "naive") in built:
            assert built[(name, "naive")] == built[(name, "torch")]


@pytest.mark.slow
def test_what_torch_does_with_these_arguments(ranks):
    """The measured behaviour the docs describe (docs/usage.md), on torch's DDP."""
    built = ranks[0][0]

    def torch_(name):
        return built[(name, "torch")]
    assert torch_("device_ids=[0, 1]")["error"] == [
        "ValueError", "device_ids can only be None or contain a single element."]
    assert torch_("SyncBatchNorm in a CPU module")["error"] == [
        "ValueError", "SyncBatchNorm layers only work with GPU modules"]
    assert torch_("device_ids=[0]")["error"][1].endswith(
        "but got device_ids [0], output_device None, and module parameters {device(type='cpu')}.")
    assert torch_("output_device=0 (falsy)")["error"] is None  # `if device_ids or output_device`
    assert torch_("default")["attributes"] == ["None", "None", "0", "device(type='cpu')", "'cpu'", "False", "True"]
    assert torch_("dim=1")["attributes"][2] == "1"
    assert torch_("check_reduction=True")["warnings"] == [["FutureWarning", (
        "The `check_reduction` argument in `DistributedDataParallel` module is deprecated. Please avoid using it.")]]
    assert torch_("check_reduction=True, device_ids=[0]")["warnings"] == []  # the error comes first
    assert torch_("frozen module, device_ids=[0, 1]")["error"][0] == "RuntimeError"
    assert torch_("device_mesh 2-D")["error"][0] == "RuntimeError"  # then the mesh, as its torch prints it
    assert torch_("device_mesh 2-D")["error"][1].startswith("Only 1D device mesh is supported, but got DeviceMesh(")
    assert torch_("device_mesh 1-D, process_group=WORLD")["error"] == [
        "RuntimeError", "Cannot specify both process_group and device_mesh arguments."]
    one_d, sliced = torch_("device_mesh 1-D"), torch_("device_mesh sliced from 2-D")
    assert one_d["mesh is the one given"] and one_d["process_group"] and one_d["module hooks"] == [0, 0]
    assert sliced["mesh is the one given"] and sliced["process_group"] and sliced["module hooks"] == [1, 1]
    assert torch_("default")["device_mesh"] == "'no attribute'"


@pytest.mark.slow
@pytest.mark.parametrize("mesh", TRAINED_MESHES)
def test_minddp_trains_on_a_device_mesh_as_torch(ranks, mesh):
    for _, trained in ranks:
        assert trained[(mesh, "minddp")] == trained[(mesh, "torch")]  # bit for bit
    assert ranks[0][1][(mesh, "torch")] == ranks[1][1][(mesh, "torch")]  # and the ranks agree


def test_naive_and_overlap_take_minddp_arguments():
    """naive.py and overlap.py say "Same constructor as minddp.DistributedDataParallel"."""
    from ddpsim.minddp import DistributedDataParallel, NaiveDDP, OverlapDDP

    def arguments(cls):
        return [(p.name, p.default) for p in inspect.signature(cls.__init__).parameters.values()]
    assert arguments(NaiveDDP) == arguments(OverlapDDP) == arguments(DistributedDataParallel)
