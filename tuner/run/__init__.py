"""One tuning run wired together: the session behind the CLI and the API, the runner, the compile-ahead pipeline, the objective, several workers.
"""
