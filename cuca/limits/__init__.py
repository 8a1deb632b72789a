"""Rate limits and budgets: what a turn may spend, admitted before its request goes
out (see docs/limits.md)."""

from cuca.plugins import BudgetWarning

from .budget import Budget
from .limiter import RateLimiter

__all__ = ["Budget", "BudgetWarning", "RateLimiter"]
