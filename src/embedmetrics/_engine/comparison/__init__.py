"""Comparing systems on per-query values: paired significance tests (``paired``), multiple-comparison
corrections (``corrections``), bootstrap confidence intervals (``bootstrap``) and their option tables
(``options``). Resampling runs in torch on the values' device; distribution functions come from torch
(the normal) or scipy (Student's t)."""
