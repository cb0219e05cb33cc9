"""``python -m ddpsim.sim simulate|sweep ...``: the simulator's commands on their own."""
import sys

from ddpsim import __main__ as top

if __name__ == "__main__":
    top.COMMANDS = {k: v for k, v in top.COMMANDS.items()
                    if k in ("simulate", "sweep", "calibrate", "validate")}
    sys.exit(top.main())
