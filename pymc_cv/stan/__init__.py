"""The Stan edge: draws and scores from PyStan and CmdStanPy fits, and thermodynamic integration from
fits of a tempered Stan program.

PyStan and CmdStanPy load on first use.
"""
