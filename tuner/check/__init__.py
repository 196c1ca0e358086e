"""Checks before a GPU run: ``tuner check`` (CUBIN against launch) and the host dry run of a kernel for another GPU.
"""
