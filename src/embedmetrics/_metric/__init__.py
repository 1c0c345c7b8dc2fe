"""The module metrics' machinery: the base class (nothing lost, settings and layouts checked), the
deadlock-free sync and the agreement of ranks, state slots, the registry of public metrics and its
valid-input factories. Importing this package (and ``registry``) loads no torch.
"""
