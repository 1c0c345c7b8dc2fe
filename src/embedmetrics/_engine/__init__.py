"""Shared engines: input checks, the grouped-ranking engine and the blocked similarity scan.

Everything in here is private: metrics (module and functional) are thin layers on top.
"""
