"""stacks: the one reader of py-spy and faulthandler dumps (forensics, evidence, multinode).

The dumps are real ones made on CPU (tests/data/forensics, see its README), and literal
variations of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsbisect.forensics.stacks import (
    Frame,
    Thread,
    faulthandler_threads,
    last_dump,
    main_thread,
    pyspy_main,
    pyspy_threads,
)

STACKS = Path(__file__).parents[1] / "data" / "forensics" / "gloo-each-rank-log" / "stacks"
PYSPY = (STACKS / "pyspy.rank0.quiet.txt").read_text()
FAULTHANDLER = (STACKS / "rank0.pid5305.txt").read_text()
MAIN = (Frame("all_reduce", "torch/distributed/distributed_c10d.py", 3252),
        Frame("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
        Frame("step", "toy.py", 13), Frame("main", "toy.py", 29), Frame("<module>", "toy.py", 35))


def test_a_real_pyspy_dump():
    threads = pyspy_threads(PYSPY)
    assert [(t.name, len(t.frames)) for t in threads] == [("MainThread", 5), ("heartbeat", 4)]
    assert pyspy_main(PYSPY) == MAIN


@pytest.mark.parametrize(("text", "expected"), [
    ("", ()),
    ("Process 1: python\nPython v3.11.7\n", ()),  # no thread
    ('Thread 7 (idle): "MainThread"\n', ()),  # a thread without a Python frame
    # unnamed threads: the one not started by threading
    ("Thread 8 (idle)\n    run (threading.py:982)\n    _bootstrap (threading.py:1002)\n"
     "Thread 7 (active)\n    main (job.py:3)\n",
     (Frame("main", "job.py", 3),)),
    # a frame without a line number; the main thread listed second
    ('Thread 8 (idle): "w"\n    loop (w.py:1)\n    _bootstrap (threading.py:1002)\n'
     'Thread 7 (active+gil): "MainThread"\n    <module> (<string>)\n',
     (Frame("<module>", "<string>", None),)),
])
def test_pyspy_main(text, expected):
    assert pyspy_main(text) == expected


def test_a_real_faulthandler_file_holds_two_dumps_and_the_last_is_read():
    threads = faulthandler_threads(FAULTHANDLER)
    assert [t.current for t in threads] == [False, True, False, True]
    last = last_dump(threads)
    assert len(last) == 2 and main_thread(last).current
    assert [(f.function, Path(f.file).name, f.line) for f in main_thread(last).frames] == [
        ("all_reduce", "distributed_c10d.py", 3252), ("wrapper", "c10d_logger.py", 83), ("step", "toy.py", 13),
        ("main", "toy.py", 29), ("<module>", "toy.py", 35)]


def test_faulthandler_unknown_line_and_main_thread_order():
    text = ('Thread 0x1 (most recent call first):\n  File "/w.py", line ??? in loop\n'
            '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n\n'
            'Current thread 0x2 (most recent call first):\n  File "/job.py", line 3 in <module>\n')
    threads = last_dump(faulthandler_threads(text))
    assert threads[0] == Thread("0x1", False, (Frame("loop", "/w.py", None),
                                               Frame("_bootstrap", "/usr/lib/python3.11/threading.py", 1002)))
    assert main_thread(threads).frames == (Frame("<module>", "/job.py", 3),)
    assert main_thread([]) is None
