"""The owner lock notices a folder replaced under it and leaves another owner's details."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rag_app.owner_lock import INFO_NAME, StoreOwnerLock, read_info


def test_a_lock_whose_folder_is_replaced_is_no_longer_intact(tmp_path: Path) -> None:
    lock = StoreOwnerLock([tmp_path / "a", tmp_path / "b"])
    assert not lock.intact()  # not taken yet
    lock.acquire()
    assert lock.intact()
    shutil.rmtree(tmp_path / "b")
    assert not lock.intact()  # gone
    other = StoreOwnerLock([tmp_path / "b"])
    other.acquire()  # another process could now own the folder
    assert other.intact() and not lock.intact()  # a new file: not the one locked
    other.release()
    lock.release()


def test_details_are_removed_only_while_they_are_this_processs(tmp_path: Path) -> None:
    lock = StoreOwnerLock([tmp_path])
    lock.acquire()
    lock.write_info({"pid": os.getpid(), "port": 1})
    lock.clear_info()
    assert read_info(tmp_path) == {}
    other = subprocess.Popen([sys.executable, "-c", "pass"])
    other.wait()  # a pid no running process has (the suite's clean-up signals listed pids)
    (tmp_path / INFO_NAME).write_text(json.dumps({"pid": other.pid, "port": 2}))
    lock.clear_info()  # a newer owner's: left alone
    assert read_info(tmp_path)["port"] == 2
    (tmp_path / INFO_NAME).unlink()
    lock.release()
