"""One record per storage format (DESIGN.md, style 13): every GGUF weight type hearth reads
(`weights`) and every KV-cache format (`kv`), each with its block shape, bits, bytes, the ids the
C++ kernels know it by and the fallback the torch paths hold it in. Every other table — the torch
decoders' registry, linear's paths, the native ids, the planner's layouts and KV costs, the KV
codecs — is derived from these; tests/formats checks the C++ enums against them.

Plain data, no torch: the lowest packages (the planner) read it too."""
