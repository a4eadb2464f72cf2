"""Interpolated modified Kneser-Ney estimation that reproduces KenLM's ``lmplz``.

The stages live in ``nplm.backoff.estimate``; this module keeps the names that
callers import from here."""
from nplm.backoff.estimate import MAX_ORDER, DiscountError, EstimateConfig, estimate
from nplm.backoff.estimate.config import DEFAULT_FALLBACK

__all__ = ["estimate", "DiscountError", "EstimateConfig", "MAX_ORDER", "DEFAULT_FALLBACK"]
