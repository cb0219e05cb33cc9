"""The scripts run as ``python -m ddpsim.experiments.NAME`` answer ``--help`` with their purpose, and refuse an
unknown option in one line, instead of starting minutes of work."""
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.stem for p in (ROOT / "ddpsim" / "experiments").glob("*.py")
                 if 'if __name__ == "__main__"' in p.read_text())


def test_the_scripts_are_found():
    assert {"compression", "join_equivalence", "hooks"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_answers_and_a_bad_option_is_one_line(name, capsys):
    main = importlib.import_module(f"ddpsim.experiments.{name}").main
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "usage:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["--no-such-option"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unrecognized arguments: --no-such-option" in err
