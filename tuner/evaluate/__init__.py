"""Where a config's value comes from: the GPU, a recorded replay, and the confirmation of the top configs.
"""
