"""The kernel contract: a kernel spec (full or light), its rules, numerics, precision classes and the arch table.

Kernel authors import it through :mod:`tuner.spec`.
"""
