"""Ranking measures of the retrieval family: the grouped-ranking engine (``measures``), one declaration
per metric (``retrieval``) and the precision-recall curves (``curves``).
"""
