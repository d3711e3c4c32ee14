"""What the terminal shows: progress and summary tables (display) and the lines above each
run's execution plan (run_lines).

May import: every room below it (basics to gate).
"""
