"""Progress bars in the look of PyMC's (rich), or nothing when they are off.

rich is imported directly, not through PyMC: importing PyMC costs seconds, which a Stan user's
``summary`` would otherwise pay for a progress bar.
"""

from __future__ import annotations

# rich loads inside the functions that use it: `import pymc_cv` stays cheap without it.

__all__ = ["progress_bar"]


class _Silent:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, *args, **kwargs):
        return 0

    def advance(self, *args, **kwargs):
        return None

    def update(self, *args, **kwargs):
        return None


def progress_bar(show):
    """A context manager with ``add_task(description, completed, total)`` and ``advance(task, n)``."""
    if not show:
        return _Silent()
    try:
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
    except ImportError:
        return _Silent()
    return Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
