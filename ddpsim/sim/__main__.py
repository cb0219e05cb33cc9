"""``python -m ddpsim.sim simulate|sweep|calibrate|validate ...``: the simulator's commands on their own."""
from ddpsim.__main__ import end_process
from ddpsim.cli import COMMANDS, main

if __name__ == "__main__":
    end_process(main(commands={k: v for k, v in COMMANDS.items()
                               if k in ("simulate", "sweep", "calibrate", "validate")}))
