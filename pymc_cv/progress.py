"""Progress bars in PyMC's own style (rich), or nothing when PyMC is absent or they are off."""

from __future__ import annotations

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
        from pymc.progress_bar.progress import create_simple_progress
    except ImportError:
        return _Silent()
    return create_simple_progress(progressbar=True)
