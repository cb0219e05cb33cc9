"""Profiles in the shapes users send, derived from the bundled H100 profiles, and what ddpsim makes of each.

``python -m ddpsim.experiments.profile_variants [--out DIR]`` writes the variants and prints one
table: for each, the import's result, the bucket sizes it recovered against torch's own
``rebuilt_bucket_sizes`` (the ``*.truth.json`` beside each profile), where the sizes came from,
and what ``simulate`` does with it (the replay, and the issue's what-if: 8 ranks on
``h100-nvlink`` with a 5 MiB cap) or its one-line refusal.

The variants are what ``torch.profiler`` writes with other settings:
- ``no shapes``: ``record_shapes=False`` (its default): no ``Input Dims``, ``Input type``,
  ``Input Strides`` or ``Concrete Inputs`` on any op. NCCL's ``record_param_comms`` keeps its
  ``In msg nelems`` and ``dtype`` (they are the collective's own, not record_shapes');
- ``no NCCL metadata``: no ``record_param_comms`` (gloo, or a torch before it existed);
- ``neither``, and ``neither + --model``: the sizes from the model on the meta device;
- ``partial first step``: the first ProfilerStep lost its forward (profiling began mid-step);
- ``one rank of two``: one rank's file from a two-rank job;
- every variant is written gzipped (``.json.gz``) except ``no shapes``, written as ``.json``.
"""
from __future__ import annotations

import argparse
import functools
import gzip
import json
import tempfile
from pathlib import Path

from ddpsim.samples import H100_DIR

SHAPE_FIELDS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
RUNS = {  # stem -> (ranks, the model that ran, for --model: None where ddpsim has none)
    "resnet18_gloo_ws2": (2, "ddpsim.models.resnet:resnet18"),
    "resnet50_nccl_ws1": (1, "ddpsim.models.resnet:resnet50"),
    "vit_b_16_nccl_ws1": (1, None),
}
VARIANTS = ("as captured", "no shapes", "no NCCL metadata", "neither", "neither + --model",
            "partial first step", "one rank of two")
WHAT_IF = {"world_size": 8, "bucket_cap_mb": 5.0}  # the example, on hardware h100-nvlink


def derive(raw: dict, variant: str, rank: int) -> dict | None:
    """The profile ``raw`` as ``variant`` would have written it (None: no such file)."""
    if variant == "one rank of two" and rank > 0:
        return None
    events = raw["traceEvents"]
    if variant in ("no NCCL metadata", "neither", "neither + --model"):
        events = [e for e in events if e.get("name") != "record_param_comms"]
    if variant in ("no shapes", "neither", "neither + --model"):
        events = [{**e, "args": {k: v for k, v in e["args"].items() if k not in SHAPE_FIELDS}}
                  if isinstance(e.get("args"), dict) else e for e in events]
    if variant == "partial first step":
        first = min((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
        events = [e for e in events if not (e.get("name") == "DistributedDataParallel.forward"
                                            and first["ts"] <= e["ts"] <= first["ts"] + first["dur"])]
    return {**raw, "traceEvents": events}


def write_variant(stem: str, variant: str, out: Path) -> list[Path]:
    """The variant's files, one per rank it keeps."""
    ranks, _ = RUNS[stem]
    paths = []
    for r in range(ranks):
        derived = derive(captured(stem, r), variant, r)
        if derived is None:
            continue
        slug = variant.replace(" ", "_").replace("+", "").replace("-", "")
        path = out / (f"{stem}__{slug}_rank{r}.json" + ("" if variant == "no shapes" else ".gz"))
        data = json.dumps(derived).encode()
        path.write_bytes(data if variant == "no shapes" else gzip.compress(data, compresslevel=1))
        paths.append(path)
    return paths


@functools.cache
def captured(stem: str, rank: int) -> dict:
    """A bundled profile as captured, read once (``derive`` builds its variants without changing it)."""
    return json.loads(gzip.decompress((H100_DIR / f"{stem}_rank{rank}.kineto.json.gz").read_bytes()))


def torch_sizes(stem: str) -> list[int]:
    truth = json.loads((H100_DIR / f"{stem}_rank0.truth.json").read_text())
    return [int(x) for x in truth["ddp_logging_data"]["rebuilt_bucket_sizes"].split(",")]


def check(stem: str, variant: str, out: Path) -> dict:
    """One row: import, sizes against torch's, simulate (replay and the what-if) or refusals."""
    from ddpsim.trace.profile_import import import_profiles

    row = {"profile": stem, "variant": variant}
    model_spec = RUNS[stem][1]
    if variant == "neither + --model" and model_spec is None:
        return {**row, "import": "no model in ddpsim for it (torchvision's)"}
    if variant == "one rank of two" and RUNS[stem][0] < 2:
        return {**row, "import": "(a one-rank job)"}
    paths = write_variant(stem, variant, out)
    model = None
    if variant == "neither + --model":
        from ddpsim.models.shapes import model_params

        model = model_params(model_spec)
    try:
        trace = import_profiles(paths, model=model)
    except ValueError as e:
        return {**row, "import": f"refused: {e}"}
    layout = trace.ranks[0].layouts[-1]
    sizes, torchs = [b.bytes for b in layout.buckets], torch_sizes(stem)
    row.update({"import": f"ok, {'-'.join(map(str, sorted({len(r.iterations) for r in trace.ranks})))} iterations per rank",
                "sizes_from": f"{trace.meta['sizes']['params']} / {trace.meta['sizes']['buckets']}",
                "buckets": sizes, "torch": torchs, "equal": sizes == torchs,
                "members": all(b.params for b in layout.buckets)})
    row["replay"], row["what_if"] = _simulate(trace, {}), _simulate(trace, WHAT_IF, "h100-nvlink")
    return row


def _simulate(trace, changes: dict, hardware: str | None = None) -> str:
    from ddpsim.learn import learn, replay_config
    from ddpsim.sim.api import simulate

    try:
        w = learn(trace)
        _, summary = simulate(w, replay_config(w, trace, **changes, **({"hardware": hardware} if hardware else {})))
    except ValueError as e:
        return "refused: " + str(e).split(": ", 1)[-1].split(" (")[0]
    return f"{summary['iteration_time_s'] * 1e3:.1f} ms, {summary['n_buckets']} buckets"


def table(rows: list[dict]) -> str:
    head = ("| profile | variant | import | sizes from (params / allreduces) | last layout's bucket sizes (B) "
            "| = torch's | simulate | 8 ranks, h100-nvlink, 5 MiB |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        sizes = _runs(r.get("buckets", []))
        eq = "" if "equal" not in r else ("yes" if r["equal"] else "no")
        lines.append(f"| {r['profile']} | {r['variant']} | {r['import']} | {r.get('sizes_from', '')} | {sizes} "
                     f"| {eq} | {r.get('replay', '')} | {r.get('what_if', '')} |")
    return "\n".join(lines)


def _runs(sizes: list[int]) -> str:
    """Bucket sizes with repeats folded: ``3,076,000, 28,351,488 x12, 2,976,768``."""
    out: list[list] = []
    for b in sizes:
        if out and out[-1][0] == b:
            out[-1][1] += 1
        else:
            out.append([b, 1])
    return ", ".join(f"{b:,}" + (f" x{n}" if n > 1 else "") for b, n in out)


def run(out: Path) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    return [check(stem, v, out) for stem in RUNS for v in VARIANTS]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ddpsim.experiments.profile_variants", description=__doc__.split("\n")[0])
    p.add_argument("--out", help="folder for the derived profiles (default: a temporary one)")
    args = p.parse_args(argv)
    if args.out == "":
        p.error("--out wants a folder name, not an empty one")
    if args.out:
        print(table(run(Path(args.out))))
    else:
        with tempfile.TemporaryDirectory() as d:
            print(table(run(Path(d))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
