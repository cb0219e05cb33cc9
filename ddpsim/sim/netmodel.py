"""The allreduce cost at any world size, from lines measured at a few (``ddpsim calibrate --world-sizes``).

``meta["calibration"]`` holds, per measured world size ``k``, the wall-time line
``t = a + b·bytes`` and the CPU-time line (Note [Not all of an allreduce is core
work] in network.py), plus the host's CPU count and the scheduler's time slice.
A measured world size uses its own lines; any other uses ``fit_world_sizes``:

    a(k) = 2(k-1)   · alpha · s(k)
    b(k) = 2(k-1)/k · beta  · s(k),    s(k) = (k / cpus) ** gamma  if k > cpus, else 1

the ring's step counts (network.py) times a core-sharing slowdown.

Note [Ranks that share cores slow the ring]: the recorder pins rank r to CPU
r % cpus, and so does ``calibrate``. Measured here (2 cores, 2026-11-23, 15
repetitions of 4 KiB-8 MiB): the wall-time slope was 0.78, 1.22, 1.89, 2.16,
2.86 ms/MiB at 2, 3, 4, 6, 8 ranks, where the ring's 2(k-1)/k alone gives 0.78,
1.04, 1.17, 1.30, 1.37; the intercept 4.1, 3.6, 6.6, 10.0, 16.0 ms, about 1 ms
per ring step beyond 2 ranks. Once ranks share cores every step waits for a
core-mate's turn and the per-byte work of k ranks runs on ``cpus`` cores, so the
plain ring under-predicts 4 ranks by ~40%; the missing factor grows about as
(k/cpus)**0.7 (1.62 at 4, 1.66 at 6, 2.09 at 8 ranks for the slope). ``gamma`` is
fitted from the measured world sizes above ``cpus``; with none measured it is 1
(the ranks of a core split it evenly), and with none at or below ``cpus`` alpha
and beta come from the shared ones. Where ranks share cores the target Link also
plays them taking turns on ``cpus`` cores (``link_at``): that comes from the
calibration's host, not from the run being predicted.
"""
from __future__ import annotations

from ddpsim.sim.network import Link

GAMMAS = [i / 100 for i in range(0, 301)]  # candidate sharing exponents (gamma), 0..3 by 0.01


def ring_steps(k: int) -> tuple[float, float]:
    """(latency steps, bandwidth factor) of a ring allreduce over ``k`` ranks."""
    return 2.0 * (k - 1), 2.0 * (k - 1) / k


def sharing(k: int, cpus: int, gamma: float) -> float:
    """The slowdown of a collective when ``k`` ranks share ``cpus`` cores (1: a core each)."""
    return (k / cpus) ** gamma if cpus and k > cpus else 1.0


def fit_world_sizes(lines: dict[int, tuple[float, float]], cpus: int) -> dict:
    """{alpha_s, beta_s_per_byte, gamma} through lines {k: (intercept s, s/byte)} (k >= 2).

    For each candidate gamma, alpha and beta by least squares of the relative error
    (each world size counts alike); the gamma with the smallest error. Exact on lines
    made by the model itself with a gamma on ``GAMMAS``.
    """
    lines = {int(k): (float(a), float(b)) for k, (a, b) in lines.items() if int(k) >= 2}
    if not lines:
        raise ValueError("the world-size fit needs a line measured at a world size >= 2")
    spread = any(cpus and k > cpus for k in lines) and any(not cpus or k <= cpus for k in lines)
    best = None
    for gamma in GAMMAS if spread else [1.0]:
        alpha, ea = _scale([(ring_steps(k)[0] * sharing(k, cpus, gamma), a) for k, (a, _) in lines.items()])
        beta, eb = _scale([(ring_steps(k)[1] * sharing(k, cpus, gamma), b) for k, (_, b) in lines.items()])
        if best is None or ea + eb < best[0] - 1e-15:
            best = (ea + eb, alpha, beta, gamma)
    _, alpha, beta, gamma = best
    return {"alpha_s": alpha, "beta_s_per_byte": beta, "gamma": gamma, "cpus": cpus,
            "world_sizes": sorted(lines)}


def _scale(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """(c, error): the c >= 0 minimising sum (c·x/y - 1)^2 over (x, y), y > 0 (y = 0 pairs fit c·x = 0)."""
    rel = [(x / y, 1.0) for x, y in pairs if y > 0]
    if not rel:
        return 0.0, 0.0
    c = sum(r for r, _ in rel) / sum(r * r for r, _ in rel)
    return c, sum((c * r - 1.0) ** 2 for r, _ in rel)


def line_at(fit: dict, k: int) -> tuple[float, float]:
    """(intercept s, s/byte) the world-size fit gives at ``k`` ranks."""
    steps, factor = ring_steps(k)
    s = sharing(k, int(fit.get("cpus") or 0), float(fit["gamma"]))
    return steps * float(fit["alpha_s"]) * s, factor * float(fit["beta_s_per_byte"]) * s


def measured_lines(cal: dict) -> dict[int, dict]:
    """{world size: its line entry} of a calibration; an old single-world-size one is its own entry."""
    by = cal.get("world_sizes")
    if isinstance(by, dict):
        return {int(k): v for k, v in by.items()}
    if "intercept_s" in cal and cal.get("world_size"):
        return {int(cal["world_size"]): cal}
    return {}


def covers(cal, k: int) -> bool:
    """Does calibration ``cal`` give a line at ``k`` ranks (measured, or through a world-size fit)?"""
    return isinstance(cal, dict) and (k in measured_lines(cal) or isinstance(cal.get("fit"), dict))


def lines_at(cal: dict, k: int) -> tuple[tuple[float, float], tuple[float, float] | None, str]:
    """(wall line, CPU line or None, where from) at ``k`` ranks: measured, else the fit."""
    entry = measured_lines(cal).get(k)
    if entry is not None:
        cpu = ((float(entry["cpu_intercept_s"]), float(entry["cpu_s_per_byte"]))
               if "cpu_intercept_s" in entry else None)
        return (float(entry["intercept_s"]), float(entry["s_per_byte"])), cpu, f"measured at k={k}"
    fit = cal.get("fit")
    if not isinstance(fit, dict) or "wall" not in fit:
        raise ValueError(f"the calibration has no line at world size {k} and no world-size fit: "
                         f"run `ddpsim calibrate --world-sizes ...{k}`")
    cpu = line_at(fit["cpu"], k) if fit.get("cpu") else None
    return line_at(fit["wall"], k), cpu, f"fitted from k={','.join(map(str, fit['wall']['world_sizes']))}"


def target_cpus(cal: dict, k: int) -> int:
    """The cores ``k`` pinned ranks share on the calibration's host (0: a core each)."""
    cpus = int(cal.get("host_cpus") or 0)
    return cpus if 0 < cpus < k else 0


def link_at(cal: dict, k: int, concurrency: int = 2, interference: float = 0.0, cpus: int | None = None) -> Link:
    """The shared-core Link of ``k`` ranks on the calibration's host.

    Where ``k`` exceeds the host's cores the ranks share them (round robin) and take
    turns of the measured time slice (Note [Ranks take turns on a shared core]).
    ``cpus``: the cores a recorded run was pinned to, when it is known (default: the
    calibration host's, ``target_cpus``).
    """
    (a, b), cpu, where = lines_at(cal, k)
    cpus = target_cpus(cal, k) if cpus is None else cpus
    turn = float(cal.get("time_slice_s") or 0.0) if cpus else 0.0
    return Link.from_fit(a, b, k, core_fit=cpu, concurrency=concurrency, interference=interference,
                         shared_core=True, cpus=cpus, time_slice_s=turn,
                         name=f"shared-core, gloo calibration ({where})")

