"""ImageLocality plugin."""
from schedmesh.plugins.image_locality.plugin import (ImageLocality, calculate_priority, normalized_image_name,
                                                     scaled_image_score)

__all__ = ["ImageLocality", "calculate_priority", "normalized_image_name", "scaled_image_score"]
