"""Comparing systems on per-query values: paired significance tests (``paired``), multiple-comparison
corrections (``corrections``), bootstrap confidence intervals (``bootstrap``), the resampling kernels
they share (``resampling``) and their option tables (``options``). The random numbers are drawn on the
CPU by NumPy, the products run in torch on the values' device; distribution functions come from torch
(the normal, as ``erfc``) or scipy (Student's t)."""
