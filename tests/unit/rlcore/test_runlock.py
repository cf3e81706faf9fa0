"""`hold_run` on a folder whose run marker is gone: a clear error naming the flag. The locks
between live processes are tested with real holders in tests/integration/test_runlock_holders.py."""

import pytest

from rlcore.errors import ConfigError
from rlcore.runlock import hold_run


def test_a_folder_whose_marker_went_missing_is_a_clear_error(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(ConfigError, match=r"\.rl-run cannot be opened .*--output-dir"):
        hold_run(tmp_path / "run")
