"""The ``tuner`` command: its entry (which starts the GPU worker early) and its subcommands.
"""
