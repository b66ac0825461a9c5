"""Every renderer of what the store holds: the terminal grid and tables, Markdown for an issue,
JSON, the HTML page (ladder, rank view), ``show``, progress on stderr.

Imports: core ... offline.
"""
