"""Contrastive losses, one file each.  See each module's docstring for the formula."""

from vis_embed.training.losses.infonce import Temperature, info_nce_loss, identity_ids

__all__ = ["Temperature", "info_nce_loss", "identity_ids"]
