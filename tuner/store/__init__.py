"""What a study keeps: storages (SQLite, Postgres, journal file), the results schema, notes, the winner's header, and the one place Optuna's private API is used.
"""
