"""The report layer: results written for people, as files and figures.

It owns a fit's output folder (:func:`~.outputs.write_fit_folder`, the one writer of the
folder ``bayes-scalerl fit`` writes, :mod:`.outputs`), the figures (curves with bands,
forest plot, linearised view, :mod:`.plots`) and the HTML and Markdown report of a fit
folder (:func:`~.report.write_report`, :mod:`.report`). :mod:`.plots` and :mod:`.report`
import matplotlib, so importing this package does not load them: their names here load
them on first use.
"""

from .outputs import (
    DECLINE_COLUMNS,
    DISCREPANCY_COLUMNS,
    IDENTIFIABILITY_COLUMNS,
    PRIOR_COLUMNS,
    fit_diagnostics,
    write_fit_folder,
    write_fit_folder_tables,
)

__all__ = [
    "DECLINE_COLUMNS",
    "DISCREPANCY_COLUMNS",
    "IDENTIFIABILITY_COLUMNS",
    "PRIOR_COLUMNS",
    "fit_diagnostics",
    "plot_curves",
    "plot_forest",
    "plot_linearised",
    "write_fit_folder",
    "write_fit_folder_tables",
    "write_report",
]

#: Names of the matplotlib modules, loaded on first use: name -> submodule.
_LAZY = {
    "plot_curves": "plots",
    "plot_forest": "plots",
    "plot_linearised": "plots",
    "write_report": "report",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
