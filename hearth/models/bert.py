"""BERT (all-MiniLM, bge-*, mxbai-embed-large, snowflake-arctic-embed): absolute position and token
type embeddings, q/k/v and every LayerNorm with biases, GELU MLP; CLS or mean pooling as the file says."""

from hearth.models.encoder import EncoderModel, EncoderSpec, encoder_config


class BertModel(EncoderModel):
    spec = EncoderSpec()

    @classmethod
    def config_from_gguf(cls, g):
        return encoder_config(g)
