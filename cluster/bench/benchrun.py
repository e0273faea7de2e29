"""benchrun.py: runs one benchmark command and reads its figure, for the drivers that launch
benchmarks through lockstep-run (scaling.py, compare_compress.py). Standard library only."""
import os
import re
import shlex
import signal
import subprocess
import sys


def run_output(prog, name, cmd, env, timeout=None):
    """cmd's standard output. Exits (naming prog and name) when cmd fails or runs past timeout
    seconds; a timeout ends the whole process group, so also the ranks mpirun started."""
    try:  # its own process group, so that a timeout also ends the ranks mpirun started here
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    except OSError as e:
        sys.exit(f"{prog}: {name}: cannot run {shlex.join(cmd)}: {e}")
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        sys.exit(f"{prog}: {name}: {shlex.join(cmd)} did not finish in {timeout} s:\n{out}{err}")
    if p.returncode != 0:
        sys.exit(f"{prog}: {name}: {shlex.join(cmd)} failed with status {p.returncode}:\n{out}{err}")
    return out


def samples_per_s(prog, name, cmd, env, ranks=None, timeout=None):
    """The 'samples/s' figure of cmd's last line that has one. Exits (naming prog and name) when
    cmd fails, runs past timeout seconds, prints no figure, or reports other than `ranks` ranks
    (ranks that did not find each other train alone)."""
    out = run_output(prog, name, cmd, env, timeout)
    lines = [l for l in out.splitlines() if "samples/s" in l]
    m = re.search(r"samples/s ([0-9.]+)", lines[-1]) if lines else None
    if not m:
        sys.exit(f"{prog}: {name}: no 'samples/s' figure in the output of {shlex.join(cmd)}:\n{out}")
    got = re.search(r"ranks ([0-9]+)", lines[-1])
    if ranks is not None and (not got or int(got.group(1)) != ranks):
        sys.exit(f"{prog}: {name}: ran as {got.group(1) if got else '?'} rank(s), expected {ranks}:\n{out}")
    return float(m.group(1))
