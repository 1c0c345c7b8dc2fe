"""Embedding pairs: contrastive accuracy, uniformity and alignment (``pairs``), the contrastive loss
(``losses``) and nidl's Procrustes / Kruskal shape similarity (``shape_similarity``).
"""
