"""Where a recording's ranks run: the backend (gloo or NCCL), the tensors' device, and why."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from ddpsim.errors import CLIError


@dataclass
class Placement:
    """Where a recording's ranks run: the backend, the tensors' device, and why (one line)."""

    backend: str  # gloo or nccl
    device: str  # cpu or cuda
    reason: str

    def line(self) -> str:
        return f"backend {self.backend} on {self.device}: {self.reason}"

    ENV = "DDPSIM_PLACEMENT"  # the launcher's placement, handed to its ranks (JSON)

    def rank_env(self) -> dict[str, str]:
        """What ddpsim's launcher puts in each rank's environment: this placement, and on the CPU no
        GPU. Note [CPU ranks see no GPU]: a rank that keeps its tensors on the CPU has no use for
        CUDA, and torch's PowerSGD hook fails there wherever CUDA is visible (its ``decompress``
        calls ``torch.cuda.synchronize`` on the bucket's device, the CPU); hidden GPUs also spare
        each rank a CUDA context. Under torchrun nothing hides them: start a CPU run there with
        ``CUDA_VISIBLE_DEVICES=`` (docs/usage.md)."""
        env = {self.ENV: json.dumps(asdict(self))}
        return {**env, "CUDA_VISIBLE_DEVICES": ""} if self.device == "cpu" else env

    @classmethod
    def for_rank(cls, cfg) -> "Placement":
        """In a rank: the launcher's placement, or (under torchrun) this node's own (``cfg.placement()``, a RecordConfig's)."""
        handed = os.environ.get(cls.ENV) if "DDPSIM_LAUNCHED" in os.environ else None  # not one torchrun passed on
        return cls(**json.loads(handed)) if handed else cfg.placement()


def local_ranks(world_size: int) -> int:
    """Ranks on this node: torchrun's LOCAL_WORLD_SIZE, else every rank (ddpsim's own launcher)."""
    under_torchrun = "RANK" in os.environ and "DDPSIM_LAUNCHED" not in os.environ
    return int(os.environ.get("LOCAL_WORLD_SIZE", world_size)) if under_torchrun else world_size


def visible_gpus() -> tuple[int, bool]:
    """(visible CUDA devices, whether CUDA works) on this node; (0, False) without CUDA."""
    try:
        import torch

        ok = torch.cuda.is_available()
        return (torch.cuda.device_count() if ok else 0), ok
    except Exception:  # noqa: BLE001 - a broken CUDA install means no GPU for us
        return 0, False


def choose_backend(backend: str | None, device: str | None, local: int, gpus: int,
                   cuda_ok: bool | None = None) -> Placement:
    """The backend rule; raises CLIError (one line) for a choice this node cannot run.

    Note [NCCL needs one GPU per rank]: NCCL refuses two ranks on one GPU (the run then
    dies inside a rank with a CUDA message that names neither NCCL nor the GPU count). So
    NCCL is the default only when this node sees at least as many GPUs as it runs ranks;
    otherwise gloo, which also accepts CUDA tensors (``--device cuda``, GPUs shared).
    """
    cuda_ok = gpus > 0 if cuda_ok is None else cuda_ok
    gpus = gpus if cuda_ok else 0
    have = f"{local} local rank{'s' if local != 1 else ''} and {gpus} visible GPU{'s' if gpus != 1 else ''}"
    if device == "cuda" and not gpus:
        raise CLIError("--device cuda needs CUDA, but this node has no visible GPU "
                       "(torch.cuda.is_available() is False); use --device cpu")
    if backend == "nccl":
        if device == "cpu":
            raise CLIError("--backend nccl needs CUDA tensors: drop --device cpu or use --backend gloo")
        if gpus < local:  # with no GPU, neither --device cuda nor fewer ranks would run
            advice = "use --backend gloo (optionally with --device cuda) or fewer ranks" if gpus else "use --backend gloo"
            raise CLIError(f"--backend nccl needs one GPU per local rank, but this node has {have}; {advice}")
        return Placement("nccl", "cuda", f"requested, {have}")
    if backend == "gloo":
        return Placement("gloo", device or "cpu", f"requested, {have}")
    if device != "cpu" and gpus and gpus >= local:
        return Placement("nccl", "cuda", f"default: {have}, so one GPU per rank")
    if device == "cpu":
        why = "--device cpu"
    elif gpus:
        why = f"{have}: NCCL needs one GPU per rank"
    else:
        why = "no CUDA GPU visible"
    return Placement("gloo", device or "cpu", f"default: {why}")
