"""ComfyUI custom node package: link or copy this folder into ComfyUI/custom_nodes/ (README.md)."""
from .h3rt_node import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
