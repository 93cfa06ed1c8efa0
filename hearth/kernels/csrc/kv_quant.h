// Attention straight over quantized KV blocks (fp8_e4m3, q8_0, q4_0, KVarN): see hearth/kvstore/paged.py.
// (filled in by the quantized-KV work; included once by gguf_kernels.cpp)
#pragma once
