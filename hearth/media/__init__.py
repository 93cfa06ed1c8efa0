"""Image input: what an image becomes before the LM sees it (torch-free; the vision model itself is in
hearth.models)."""
