"""``python -m bayes_scalerl.cli``: the ``bayes-scalerl`` command line."""

from .commands import entry

entry()
