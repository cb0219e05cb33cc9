"""The What-if page's widget values, in and out: the comm hooks offered, the one a recorded run starts on,
what a choice simulates, and the name a kept what-if gets (no Streamlit here, so the page stays thin)."""
from __future__ import annotations

from ddpsim.app.state import SIMULATED_PREFIX
from ddpsim.app.whatif import AS_RAN, AS_RECORDED, HOOKS, POWERSGD_START, Base
from ddpsim.learn.gpu_model import DEFAULTS, flag_text
from ddpsim.sim import budget, nccl
from ddpsim.sim.network import NCCL_ALGOS, fabric_between_nodes, gpu_networks, gpus, network_for, networks


def recorded_hook(base: Base) -> str | None:
    """The hook the run was recorded (or a simulated trace of a GPU model ran) with (None: DDP's own allreduce)."""
    return base.config.get("comm_hook")


def cap_list_note(base: Base) -> str | None:
    """What the bucket-cap slider means for a run recorded with torch 2.13's bucket_cap_mb_list (None: none)."""
    listed = base.config.get("bucket_cap_mb_list") if base.kind == "trace" or base.model else None
    if not listed:
        return None
    caps = ", ".join(f"{v:g}" for v in listed)
    return (f"This run {'gave' if base.kind == 'trace' else 'ran with'} bucket_cap_mb_list {caps} MiB (a cap per "
            "bucket), which the unchanged configuration keeps; another cap here replaces it.")


def order_label(order: str, base: Base) -> str:
    """How an ordering reads in its selector: a simulated trace's ordering by indices as ``--order`` gives it."""
    if order != AS_RAN:
        return order
    return f"{AS_RAN} ({flag_text('order', base.config['order']).partition(' ')[2]})"


def carried_note(base: Base) -> str | None:
    """A simulated trace's options as the flags that set them, which the page simulates as it ran (None: not one)."""
    if base.model is None:
        return None
    shown = [flag_text(k, v) for k, v in base.model.config.items()
             if k not in ("world_size", "iters") and v != DEFAULTS[k]]  # SimConfig's own: torch's defaults
    shown += [flag_text("tflops", base.model.tflops)] if base.model.tflops is not None else []
    ran = f"{base.model.arch} on {base.hardware}, {base.config.get('world_size', 2)} ranks"
    return (f"Simulated as {base.source} ran ({ran}{', ' if shown else ''}{', '.join(shown)}), as `ddpsim simulate "
            "--trace` runs it: each control below changes only what it names.")


NO_HOOK = "none"  # the hook selectors' value for DDP's own allreduce: Streamlit shows a None option as no choice


def hook_options(base: Base | None = None) -> list[str]:
    """The selectors' hooks: the usual what-ifs, and the recorded one if it is another (a user's hook)."""
    rec = recorded_hook(base) if base is not None else None
    return [h or NO_HOOK for h in HOOKS] + ([rec] if rec and rec not in HOOKS else [])


def chosen_hook(value: str | None) -> str | None:
    """The hook a selector's ``value`` names (None: DDP's own allreduce)."""
    return None if value in (None, NO_HOOK) else value


def hook_label(hook: str | None, base: Base | None = None) -> str:
    """How a hook reads in the selectors: the recorded one as recorded, PowerSGD what-ifs with the rank
    and start step they run with here."""
    hook = chosen_hook(hook)
    if hook and base is not None and hook == recorded_hook(base):
        return f"{hook} (as recorded)" if base.kind == "trace" else f"{hook} (as the trace ran)"
    if hook == "powersgd":
        return f"powersgd (rank 1, from step {POWERSGD_START}; torch's default start is 1000)"
    return hook or "none (DDP's own allreduce)"


def simulated_hook(hook: str | None, base: Base) -> str | None:
    """What the simulator plays for the selector's ``hook``: None replays the run as recorded, and "none"
    on a hooked run is DDP's own allreduce, not the recorded hook."""
    return None if hook == recorded_hook(base) else (hook or "allreduce")


def kept_name(who: str, now: dict, recorded_hook, cap, order: str, fu: bool, n_sync: int, world: int, network: str,
              hook, bufs, algo, small: bool = False) -> str:
    """A kept what-if's name: the source and what the what-if changes from ``now`` (``whatif.choices``), in
    the words of the page's controls; nothing changed: ``unchanged_name``. ("cap=0.25 torch fu=0 n=1 w=2 as
    recorded" listed every choice, and Compare's table cut it to "…fu=0 n=1 w=2 as recorded".)"""
    changes = ((cap, now["bucket_cap_mb"], f"bucket_cap_mb={'default' if cap is None else f'{cap:g}'}"),
               (order, now["order"], f"order={order}"),
               (fu, now["find_unused_parameters"], f"find_unused_parameters={fu}"),
               (n_sync, now["no_sync_every"], f"sync every {n_sync}"), (world, now["world_size"], f"world size {world}"),
               (network, now["network"], f"network {network}"), (hook, recorded_hook, f"hook={hook}"),
               (bufs, now["broadcast_buffers"] if bufs is not None else None, f"forward_sync_buffers={bufs}"),
               (algo, now["algo"], f"NCCL_ALGO={algo}"), (small, now["last_bucket_small"], "small bucket last"))
    changed = [words for value, before, words in changes if value != before]
    return f"{SIMULATED_PREFIX}{who}, {', '.join(changed)}" if changed else unchanged_name(who, False)


def unchanged_name(who: str, at_median_speed: bool) -> str:
    """The name of the unchanged configuration kept beside a what-if: the What-if page's own reference, which the
    Compare page puts first so that its Δ is the page's (the recording's Δ against it is the replay's error)."""
    return f"{SIMULATED_PREFIX}{who} unchanged" + (", every rank at the median speed" if at_median_speed else "")


def nccl_algos(base: Base, world: int) -> list[str]:
    """The NCCL algorithms a GPU model can run at ``world`` ranks ("auto": NCCL's choice, always offered):
    NVLS only inside one node with NVLink SHARP, NVLS-tree only across such nodes (``nccl.runs``)."""
    if world <= 1:
        return ["auto"]  # one rank sends nothing: no algorithm to choose
    cluster = network_for(base.hardware, world).cluster
    return [a for a in NCCL_ALGOS if cluster is None or nccl.runs(cluster, world, a)]


def algo_gone(state, key: str, offered: list[str]) -> str | None:
    """Where the algorithm chosen before is not offered now (another world size), set the widget's
    ``state`` back to "auto" and return the one dropped, so the page can say so; else None."""
    chosen = state.get(key)
    if chosen is None or chosen in offered:
        return None
    state[key] = "auto"
    return chosen


def bucket_note(sim, unchanged) -> str:
    """How many buckets the what-if's steady iterations use, against the unchanged run's: several caps build
    the same buckets (every cap from 0.25 to 2 MiB gives the recorded 12 MiB MLP 4 buckets), and without the
    count a slider that moved and changed nothing looked broken."""
    n, m = (len(t.ranks[0].layouts[-1].buckets) if t.ranks[0].layouts else 0 for t in (sim, unchanged))
    return f"{n} bucket{'s' * (n != 1)} in the steady iterations" + (", as unchanged." if n == m else f" (unchanged: {m}).")


def gpu_model_nodes(base: Base, world: int) -> str:
    """Where a GPU model's ``world`` ranks sit and what carries their allreduces (``network_for``): NCCL runs
    over one node's NVLink alone up to a node's GPUs, so the chosen network only counts beyond one node
    (at 8 ranks of a v100-eth25 model the exposed communication fell from 8.1 to 0.2 ms, unexplained)."""
    per_node = network_for(base.hardware, max(int(world), 1)).cluster.gpus_per_node
    head = f"**GPU:** {base.gpu}, {per_node} per node."
    fabric = fabric_between_nodes(gpus()[base.gpu], base.network)
    if world <= 1:
        return f"{head} One rank: no allreduce, so no network."
    if world <= per_node:
        return (f"{head} {world} ranks fit in one node: every allreduce goes over its NVLink, and the network "
                f"between nodes ({fabric}) is not used.")
    nodes = -(-int(world) // per_node)
    return f"{head} {world} ranks on {nodes} nodes: NVLink inside each node, {network_label(fabric)} between them."


def gpu_names() -> list[str]:
    return list(gpus())


def network_names(gpu_model: bool = False) -> list[str]:
    """The Network selector's choices: a GPU model's exclude this CPU machine's loopback gloo."""
    return gpu_networks() if gpu_model else list(networks())


def network_label(name: str, gpu: str | None = None) -> str:
    if name == AS_RECORDED:
        return "as recorded (fitted from the trace)"
    fabric = gpus().get(gpu or "", {}).get("default_fabric") if name == "nvlink" else None
    if fabric:  # "nvlink" is one node's NVLink; a job beyond it crosses the GPU's own fabric (network_for)
        return f"nvlink: NVLink inside a node, {fabric} between nodes ({networks()[fabric].get('name', fabric)})"
    if name == "nvlink":  # a CPU recording has no GPU node: NVLink's figures as one link between every rank
        return "nvlink: NVLink's datasheet figures, as one flat link between all ranks"
    return f"{name}: {networks()[name].get('name', name)}"


LAST_BUCKET_SMALL_HELP = (
    "torch's DDP_SET_LAST_BUCKET_CAP=1 (an environment variable; torch reads it at the rebuild after the first "
    "iteration). By default the rebuild gives its small first cap (1 MiB, or bucket_cap_mb_list's first) to the "
    "first gradients ready, so their allreduce starts early; with it set, the small bucket goes to the last "
    "gradients ready, so the allreduce left after the backward is short. No effect where torch never rebuilds "
    "(find_unused_parameters without static_graph, an ordering other than torch's).")


SWEEP_ASK_S = 5.0  # seconds: a sweep expected to take longer waits for its button (a page choice, not torch's)


def run_seconds(summary: dict) -> float:
    """How long the simulation whose ``summary`` is given took here (``sim_wall_s``; from its ``simpy_events``
    where it has no wall time): what one more like it costs."""
    wall = summary.get("sim_wall_s")
    return float(wall) if wall is not None else budget.seconds_for(int(summary.get("simpy_events", 0)))
