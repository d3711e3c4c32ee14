"""What every room may use, and which imports nothing of bench: errors a user can act on
(errors), YAML reading and validation messages (yaml_io), did-you-mean hints (suggest),
atomic file writes (files), escaping for Markdown and HTML (textsafe), the checkout's
location (paths) and the one plug-in registry (plugins).

May import: nothing of harness.
"""
