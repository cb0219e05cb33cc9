"""A recording started by the app, run as its own process (no Streamlit here).

    python -m ddpsim.app.record_job CONFIG_JSON OUT STATUS

It calls ``ddpsim.record.launcher.record`` and writes its progress to STATUS (a
small JSON file, replaced atomically): {"state": running|done|failed|stopped, "done",
"total", "error", "stage"} (stage: what the ranks do before an iteration is recorded;
stopped: by a signal, the page's Stop; "kept": whether a partial trace was kept).
``ddpsim.app.jobs`` starts it in a new session (process group) so the app can stop it
and every rank with one signal. It also stops by itself, ranks included, when its
parent (the Streamlit server) dies.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

WATCH_S = 0.5  # seconds between looks at the parent process


def write_status(path: Path, **status) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(status))
    os.replace(tmp, path)


def _on_signal(signum, frame):
    raise SystemExit(128 + signum)  # unwinds record(), whose finally stops every rank


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(WATCH_S)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def main(argv: list[str]) -> int:
    config_json, out, status = argv
    status_path = Path(status)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    from ddpsim.errors import CLIError
    from ddpsim.record.config import RecordConfig
    from ddpsim.heartbeat import STARTING
    from ddpsim.record.launcher import record

    cfg = RecordConfig.from_json(config_json)
    said = {"state": "running", "done": 0, "total": cfg.iters, "error": None, "stage": STARTING}

    def tell(**changes) -> None:
        said.update(changes)
        write_status(status_path, **said)

    tell()
    try:
        record(cfg, out, progress=lambda done, total: tell(done=done, total=total),
               starting=lambda line: tell(stage=line))
    except CLIError as e:  # RecordError and bad configurations: one plain line
        tell(state="failed", error=str(e), kept=getattr(e, "iterations", 0) > 0)  # a partial trace to open
        return 1
    except SystemExit:  # stopped (the page's Stop): not a failure; the launcher kept what was recorded, if anything
        tell(state="stopped", kept=Path(out).is_file())
        raise
    except Exception as e:  # noqa: BLE001 (anything else still reaches the page as one line)
        tell(state="failed", error=f"{type(e).__name__}: {e}".splitlines()[0])
        return 1
    tell(state="done", done=cfg.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
