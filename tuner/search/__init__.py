"""The search space and its proposers: axes, valid-config enumeration, the pool of untried configs, our Parzen search, wrapped Optuna samplers, warm start and transfer, the pruner.
"""
