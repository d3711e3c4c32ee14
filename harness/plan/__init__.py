"""The work, resolved once in the core for every backend: the execution plan (plan), which
host of a multi-host job this process is (hosts), and how a worker process is started
(launchers).

May import: basics, scenario, figures.
"""
