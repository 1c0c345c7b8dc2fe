"""Representation health from float64 sufficient statistics: RankMe, alpha-ReQ, LiDAR and CKA
(``moments``) and the kNN-accuracy options (``options``).
"""
