"""The GPU side: the worker process and its supervisor, their typed protocol, the driver, inputs, output checks, paired timing and energy.
"""
