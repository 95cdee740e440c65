"""Figures from a case's history and histograms: analysis, fidelity, floors, statistics, arrival metrics, the evidence rule. Pure where it can be."""
