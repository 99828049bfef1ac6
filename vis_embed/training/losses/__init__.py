"""Contrastive losses, one file each.  See each module's docstring for the formula."""

from vis_embed.training.losses.designated import designated_negatives
from vis_embed.training.losses.infonce import Temperature, info_nce_loss
from vis_embed.training.losses.objective import BatchLabels, build_objective
from vis_embed.training.losses.triplet_hinge import triplet_hinge_loss
from vis_embed.training.losses.two_tier import two_tier_loss
from vis_embed.training.losses.two_tier_margin import designated_margin_loss, two_tier_margin_loss

__all__ = ["BatchLabels", "Temperature", "build_objective", "designated_margin_loss",
           "designated_negatives", "info_nce_loss", "triplet_hinge_loss", "two_tier_loss",
           "two_tier_margin_loss"]
