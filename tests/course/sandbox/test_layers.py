"""What each containment layer of the grade of record stops, alone and together.

A fresh interpreter applies one layer (:data:`attncourse.course.sandbox.contain.LAYERS`, or
the tripwire of :mod:`attncourse.course.sandbox.child`, or all of them as the grader does),
then tries one harmful act; the test looks from outside whether the act happened. Together
the layers stop every act; the printed table (``-s``) is the closing note's "what each layer
stopped". Acts a layer is not meant to stop (FSIZE does not stop a truncation) are expected
to pass that layer alone.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attncourse.course.sandbox.contain import landlock_abi

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's layers")

_SETUP = """
import os, sys, signal, socket
sys.path.insert(0, {root!r})
import numpy as np
from attncourse.course.sandbox.contain import contain
from attncourse.course.sandbox.child import tripwire
layer = {layer!r}
if layer == "tripwire":
    tripwire({root!r})
elif layer == "all":
    contain({root!r}, 2**30, 30)
    tripwire({root!r})
else:
    contain({root!r}, 2**30, 30, only=(layer,))
"""

#: act -> code that does it (and prints a word on success, for the acts seen from inside).
ACTS = {
    "overwrite a file": "open({victim!r}, 'w').write('harmed')",
    "remove a file": "os.remove({victim!r})",
    "read the course's chapters": "open({root!r} + '/notebooks/04_self_attention.md').read(); print('READ')",
    "read the grader's /proc/pid/fd": "open(f'/proc/{grader}/fd/0', 'rb'); print('READ')",
    "read the grader's command line": "open(f'/proc/{grader}/cmdline').read(); print('READ')",
    "signal another process": "os.kill({sleeper}, signal.SIGKILL)",
    "fork": ("pid = os.fork()\nif pid == 0:\n    open({victim!r}, 'w').write('forked')\n    os._exit(0)\n"
             "os.waitpid(pid, 0)"),
    "start a program": "os.system('echo harmed > ' + {victim!r})",
    "allocate 20 GB": "a = np.empty(20 * 2**30, dtype=np.uint8); print('ALLOCATED')",
    "connect to a port": "socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')",
}
LAYER_NAMES = ("rlimits", "prctl", "landlock", "seccomp", "tripwire", "all")


def _harmed(act: str, layer: str, tmp_path: Path) -> bool:
    victim = tmp_path / f"victim-{abs(hash((act, layer)))}"
    victim.write_text("intact")
    sleeper = subprocess.Popen(["sleep", "60"])
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.1)
    code = _SETUP.format(root=str(ROOT), layer=layer) + ACTS[act].format(
        victim=str(victim), root=str(ROOT), grader=os.getpid(), sleeper=sleeper.pid,
        port=server.getsockname()[1])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}
    try:
        done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                              timeout=120, env=env, cwd=tmp_path)
        time.sleep(0.05)
        try:
            server.accept()[0].close()
            connected = True
        except OSError:
            connected = False
        return (victim.read_text() != "intact" if victim.exists() else True) or sleeper.poll() is not None \
            or any(word in done.stdout for word in ("READ", "ALLOCATED", "CONNECTED")) or connected
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
        server.close()


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("layers")
    found = {(act, layer): _harmed(act, layer, tmp) for act in ACTS for layer in LAYER_NAMES}
    found.update({(act, "none"): _harmed(act, "none", tmp) for act in ACTS})
    width = max(map(len, ACTS))
    print(f"\n{'act':<{width}} | " + " | ".join(f"{n:>8}" for n in ("none", *LAYER_NAMES)))
    for act in ACTS:
        print(f"{act:<{width}} | " + " | ".join(f"{'harm' if found[act, n] else 'stopped':>8}"
                                                for n in ("none", *LAYER_NAMES)))
    return found


def test_every_act_does_harm_without_a_layer(table):
    # Else the test proves nothing: each act works when nothing stops it.
    assert all(table[act, "none"] for act in ACTS), [act for act in ACTS if not table[act, "none"]]


def test_together_the_layers_stop_every_act(table):
    assert not [act for act in ACTS if table[act, "all"]]


def test_the_operating_systems_layers_alone_stop_every_act_that_does_harm_outside(table):
    # Without the tripwire, which only reports: rlimits, prctl, Landlock and seccomp.
    if landlock_abi() < 1:
        pytest.skip("no Landlock on this kernel: reading the course's files rests on the tripwire")
    outside = [act for act in ACTS if all(table[act, layer] for layer in ("rlimits", "prctl", "landlock", "seccomp"))]
    assert not outside, outside


def test_landlock_stops_writes_reads_of_the_course_and_other_processes(table):
    if landlock_abi() < 1:
        pytest.skip("no Landlock on this kernel")
    for act in ("overwrite a file", "remove a file", "read the course's chapters", "read the grader's /proc/pid/fd",
                "read the grader's command line"):
        assert not table[act, "landlock"], act
    if landlock_abi() >= 6:
        assert not table["signal another process", "landlock"]
    if landlock_abi() >= 4:
        assert not table["connect to a port", "landlock"]


def test_seccomp_stops_writes_new_processes_signals_and_sockets(table):
    from attncourse.course.sandbox.contain import _pyseccomp

    if _pyseccomp() is None:
        pytest.skip("no libseccomp here")
    for act in ("overwrite a file", "remove a file", "signal another process", "fork", "start a program",
                "connect to a port"):
        assert not table[act, "seccomp"], act


def test_rlimits_bound_memory(table):
    assert not table["allocate 20 GB", "rlimits"]
