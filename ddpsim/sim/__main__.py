"""``python -m ddpsim.sim simulate|sweep|calibrate|validate ...``: the simulator's commands on their own."""
import sys

from ddpsim.cli import COMMANDS, main

if __name__ == "__main__":
    sys.exit(main(commands={k: v for k, v in COMMANDS.items()
                            if k in ("simulate", "sweep", "calibrate", "validate")}))
