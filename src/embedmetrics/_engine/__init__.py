"""The computing engine shared by every module metric and functional twin: argument and batch
checks, the blocked scans, and one subpackage per family of computations. Faces (modules,
functionals) call it; it knows nothing of torchmetrics' ``Metric``.
"""
