"""The command line: ``bayes-scalerl`` and the demo data it ships.

It owns the argument parser, :func:`main` (parse, check, run a command, map user errors to
exit status 2) and :func:`entry`, the console script ``bayes-scalerl`` (:mod:`.commands`),
and the bundled demo curves of ``bayes-scalerl demo`` and the notebooks (:mod:`.demo`). It
is the top layer: it imports every layer below, the heavy ones inside the commands.
"""

from .commands import build_parser, entry, main
from .demo import DEMO_FIT_UNTIL, DEMO_MIN_COMPUTE, demo_runs, demo_truth

__all__ = [
    "DEMO_FIT_UNTIL",
    "DEMO_MIN_COMPUTE",
    "build_parser",
    "demo_runs",
    "demo_truth",
    "entry",
    "main",
]
