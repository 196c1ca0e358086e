"""A study as a user writes it: the study file, the one options table, and studies made from Python data.
"""
