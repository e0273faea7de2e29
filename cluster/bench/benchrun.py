"""benchrun.py: runs one benchmark command and reads its figure, for the benchmark drivers
(compare_*.py, scaling.py); finds the programs they run, checks their flags' values (also the
PyTorch peers', torch_*.py, which import torch through peer_modules once they are checked) and
prints the command line they were run with. Standard library only."""
import argparse
import importlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys


def whole(lo=1, hi=None):
    """An argparse type: a whole number from lo (to hi). Anything else is a usage error naming the
    flag, the value and the range (argparse: exit status 2), not a traceback or a run of nothing."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(
                f"'{text}' must be a whole number " + (f"from {lo} to {hi}" if hi is not None else f">= {lo}"))
        return v
    return parse


def number(lo, hi):
    """An argparse type: a number from lo to hi (NaN and inf never pass), else a usage error as whole's."""
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"'{text}' must be a number from {lo:g} to {hi:g}")
        return v
    return parse


def sizes(text):
    """An argparse type: layer sizes, whole numbers >= 1 separated by commas ('' for none), as a
    list; an empty entry ('512,', '8,,8') or another word is a usage error, not a traceback."""
    if text == "":
        return []
    parts = text.split(",")
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"'{text}' must be sizes of 1 or more, comma-separated, as 512,256")
    return [int(p) for p in parts]


def peer_modules(prog, *names):
    """The modules names (numpy, torch, ...), imported once the flags are checked; where one is not
    importable by this Python, exits naming it and the Python (the peers need PyTorch: Debian's
    python3-torch is /usr/bin/python3's), not a traceback about whichever came first."""
    mods = []
    for name in names:
        try:
            mods.append(importlib.import_module(name))
        except ImportError as e:
            sys.exit(f"{prog}: cannot import {name} with {sys.executable} ({e}): the PyTorch peers need numpy "
                     "and torch; run them with a Python that has both (Debian's python3-torch: /usr/bin/python3)")
    return mods


def free_port():
    """A TCP port free on this host now, the kernel's pick: the rendezvous port of a PyTorch run
    (MASTER_PORT), so that two runs on one node at once do not meet at one fixed port (the second
    failed, 'Address already in use', or its ranks joined the first's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def master_port(prog, default=None):
    """The PyTorch ranks' rendezvous port: $MASTER_PORT where set, else default, else a free port
    of this host (free_port). A MASTER_PORT that is no port is a usage error (exit status 2)."""
    text = os.environ.get("MASTER_PORT")
    if text is None:
        return default if default is not None else free_port()
    try:
        return whole(1, 65535)(text)
    except argparse.ArgumentTypeError as e:
        print(f"{prog}: MASTER_PORT: {e}", file=sys.stderr)
        sys.exit(2)


def timeout_flag(ap):
    """The drivers' --timeout: how long one run may take before it (its whole process group) is
    ended and the driver exits saying so; a hung rank otherwise blocks the driver forever."""
    ap.add_argument("--timeout", type=whole(1), default=600, help="seconds a run may take (default 600)")


def command_line():
    """The command line this driver was run with, as a shell would take it back."""
    return shlex.join([sys.executable] + sys.argv)


def print_command(file=None):
    """Prints 'command: ' and the command line this driver was run with (for the record of a run)."""
    print(f"command: {command_line()}", file=file or sys.stdout, flush=True)


def program(prog, path, hint="give the build directory that holds it with --build", dry_run=False):
    """path, absolute, when it is an executable file (or for a dry run, which only prints it); else
    exits naming it and what to do (the usual cause: a build directory not built, or another given)."""
    path = os.path.abspath(path)
    if dry_run or (os.path.isfile(path) and os.access(path, os.X_OK)):
        return path
    why = "is not executable" if os.path.exists(path) else "does not exist"
    sys.exit(f"{prog}: '{path}' {why}: build it first (cmake -S . -B build && cmake --build build -j) or {hint}")


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
