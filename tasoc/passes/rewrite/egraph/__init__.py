"""Equality saturation for the equality-rewrite pass (`search=egraph`)."""

from tasoc.passes.rewrite.egraph.egraph import EGraph, EGraphError
from tasoc.passes.rewrite.egraph.search import EGraphLimits, egraph_search

__all__ = ["EGraph", "EGraphError", "EGraphLimits", "egraph_search"]
