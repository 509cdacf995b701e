"""Training support: gradient reduction with error feedback, layer-selective rules.

``GradientReducer(comm, codec=..., rate=..., error_feedback="classic")`` averages
named gradients across the ranks of ``comm`` in buckets, each one compressed
collective, with what compression lost fed back into the next step.
"""
from .feedback import ErrorFeedback
from .groups import DEFAULT_POLICIES, ParallelGroups, parallel_groups
from .reducer import GradientReducer
from .rules import settings_for

__all__ = ["DEFAULT_POLICIES", "ErrorFeedback", "GradientReducer", "ParallelGroups",
           "parallel_groups", "settings_for"]
