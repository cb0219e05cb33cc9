"""How a trace's label reads: in full (``pretty``), and in the sidebar's chooser (``chooser_name``).

The chooser and its list show about ``CHOOSER_CHARS`` characters and cut the rest. The bundled
SIMULATED samples differ only at their ends (``20_sim_resnet50_v100-eth25_w64_default``, ``..._cap0.25``,
``..._cap100``, ``..._find_unused``), so the chooser names them with what tells them apart first:
``20 SIMULATED default: resnet50, v100-eth25, 64 ranks``; the sidebar writes the open trace's full
name below the chooser when the chooser cuts or rewords it.
"""
from __future__ import annotations

import re

CHOOSER_CHARS = 32  # characters the sidebar's chooser shows of a name at its default width (then it cuts)
SIM_SAMPLE = re.compile(r"^(\d+)_sim_([^_]+)_([^_]+)_w(\d+)_(.+)$")  # NN_sim_ARCH_HARDWARE_wN_VARIANT


def pretty(label: str) -> str:
    """How a trace label reads in full (simulated samples say so)."""
    return label.replace("_sim_", " SIMULATED ", 1) if "_sim_" in label else label


def chooser_name(label: str) -> str:
    """``label`` as the chooser lists it: a SIMULATED sample with its variant first, the rest as ``pretty``."""
    m = SIM_SAMPLE.match(label)
    if not m:
        return pretty(label)
    nn, arch, hardware, world, variant = m.groups()
    return f"{nn} SIMULATED {variant}: {arch}, {hardware}, {world} ranks"


def full_name_note(label: str) -> str | None:
    """The open trace's full name, for below the chooser, when the chooser cuts or rewords it (else None)."""
    shown = chooser_name(label)
    return pretty(label) if shown != pretty(label) or len(shown) > CHOOSER_CHARS else None
