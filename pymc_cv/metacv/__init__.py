"""Meta-CVs: neural Stein control variates meta-learned (MAML) over many related tasks."""

from .metacv import MetaCV

__all__ = ["MetaCV"]
