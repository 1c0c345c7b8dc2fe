"""Internals of the ``embedmetrics report`` command (loading, TREC files, evaluation, output, plots).

Nothing here is public API: the command line (``embedmetrics.cli``) is the interface.
"""
