"""nomic-bert (nomic-embed-text): BERT's post-norm encoder with rotary positions (NeoX halves, base
`rope.freq_base`, 1000 in nomic-embed-text), one fused qkv matrix, a SwiGLU MLP and no linear biases."""

from hearth.models.encoder import EncoderModel, EncoderSpec, encoder_config


class NomicBertModel(EncoderModel):
    spec = EncoderSpec(rotary=True, gated=True)

    @classmethod
    def config_from_gguf(cls, g):
        return encoder_config(g)
