"""Kneser-Ney estimation in stages: count, adjust, discount, interpolate, write;
in memory, or part by part within a memory budget (see ``pipeline``)."""
from nplm.backoff.estimate.config import DEFAULT_MEMORY, MAX_ORDER, EstimateConfig, parse_size
from nplm.backoff.estimate.discount import DiscountError
from nplm.backoff.estimate.pipeline import estimate

__all__ = ["estimate", "EstimateConfig", "DiscountError", "parse_size", "DEFAULT_MEMORY", "MAX_ORDER"]
