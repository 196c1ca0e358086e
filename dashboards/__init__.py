"""Dashboards over a tuner storage: Plotly HTML reports and optuna-dashboard.

- :func:`dashboards.report.write_report` writes self-contained HTML pages;
- :func:`dashboards.serve.run_dashboard` starts optuna-dashboard on the same storage;
- :func:`dashboards.cli.register` adds ``tuner report`` and ``tuner dashboard``.
"""

__all__ = ["write_report", "run_dashboard"]


def __getattr__(name):  # lazy: importing the package must not pull plotly / bottle
    if name == "write_report":
        from dashboards.report import write_report

        return write_report
    if name == "run_dashboard":
        from dashboards.serve import run_dashboard

        return run_dashboard
    raise AttributeError(name)
