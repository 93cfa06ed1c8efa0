"""Images in: a llama.cpp mmproj GGUF's vision settings (config.py, one record per projector type in
projectors.py), image bytes made into the pixels its vision tower reads (images.py), and the spans of
a prompt they fill (inputs.py). Torch-free: the engine, runner and API may import it; the tower itself
runs in hearth.models.vision."""
