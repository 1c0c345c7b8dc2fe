"""The settings of every metric: checks of scalar arguments (``arguments``), the named choices
(``policies``: tie policies, similarities) and the ``Option`` that declares one setting (``options``).
No torch is imported here: the command line and the registry read them first.
"""
