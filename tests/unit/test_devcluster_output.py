"""The dev cluster's and the demo's progress output: losing it stops nothing."""

from __future__ import annotations

import os
import subprocess
import sys


def test_unfailing_progress_drops_output_to_a_closed_pipe(tmp_path):
    """The wrapper itself: the same messages into a pipe whose reader is gone; the
    process goes on and exits 0 (no BrokenPipeError, not even at the final flush)."""
    code = ("from jupyterhub_gpu.devcluster.procs import unfailing\n"
            "report = unfailing(print)\n"
            "for i in range(3): report('stopping ' * 10000)\n"
            "open(r'%s', 'w').write('went on')\n" % (tmp_path / "after"))
    read_end, write_end = os.pipe()
    os.close(read_end)
    done = subprocess.run([sys.executable, "-c", code], stdout=write_end,
                          stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")
    assert (tmp_path / "after").read_text() == "went on"

