"""Every renderer of what the store holds: the terminal grid and tables, Markdown for an issue,
JSON, the HTML page (ladder, rank view), ``show``, progress on stderr; what ``report`` and ``show``
read from a store, and a finished bisection as ``bisect`` prints it (``github``: as a GitHub
Actions step shows it).

Imports: core ... offline.
"""
