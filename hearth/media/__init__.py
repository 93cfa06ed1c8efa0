"""Images in: a llama.cpp mmproj GGUF's vision settings (config.py, one record per projector type in
projectors.py), image bytes made into the pixels its vision tower reads (images.py; Qwen-VL's patches in
merge_units.py), and the spans of a prompt they fill (inputs.py); the marker that holds an image's place in a
message's text (marker.py). Torch-free: the engine, runner and API may import it; the tower itself runs in
hearth.models.vision."""
