"""One ``modular-rag tune`` per output folder: the lock is filelock's, so it holds on every OS (the kit took it with
``fcntl``, which Windows lacks), and the OS releases it when the run's process dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from modular_rag.errors import ModularRagError
from modular_rag.eval.tune.study import OutLock

pytestmark = pytest.mark.unit


def test_a_second_run_on_a_folder_is_refused_until_the_first_releases_it(tmp_path: Path) -> None:
    first = OutLock(tmp_path / ".lock")
    with pytest.raises(ModularRagError, match="another modular-rag tune is running on"):
        OutLock(tmp_path / ".lock")
    first.release()
    OutLock(tmp_path / ".lock").release()


def test_the_lock_of_a_killed_run_is_released(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; from modular_rag.eval.tune.study import OutLock; "
        f"lock = OutLock(Path({str(tmp_path / '.lock')!r})); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ModularRagError, match="another modular-rag tune"):
            OutLock(tmp_path / ".lock")
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    OutLock(tmp_path / ".lock").release()


def test_the_lock_holds_where_there_is_no_fcntl(tmp_path: Path) -> None:
    code = (
        "import sys, warnings; sys.modules['fcntl'] = None; warnings.simplefilter('ignore')\n"
        "from pathlib import Path\nfrom modular_rag.errors import ModularRagError\n"
        "from modular_rag.eval.tune.study import OutLock\n"
        f"path = Path({str(tmp_path / '.lock')!r})\nfirst = OutLock(path)\n"
        "try:\n    OutLock(path)\nexcept ModularRagError as exc:\n    print(exc)\n"
        "first.release()\nOutLock(path).release()\nprint('released')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"another modular-rag tune is running on {tmp_path}; wait for it or use another --out",
        "released",
    ]
