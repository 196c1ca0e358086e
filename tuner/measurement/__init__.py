"""What a measurement is and how measurements compare: the typed value, paired statistics, the steady-state criterion, Pareto fronts.
"""
