"""What differs between the two model families, in one place.

A model's family (`HeadsConfig.family`, config.json's "heads"."family") is a name;
`family(name)` gives its facts, so the code that builds, trains and reads a model
asks `family(name).decoder_reads_padding` instead of comparing names.

- "mixer": this tool's own heads.
- "occcanine": the layout of OccCANINE's published models, and of runs that start
  from them (mixer.models.occcanine reads and writes its weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Family:
    name: str
    # the flat head reads the encoder's pooler output (CANINE's); else the mean of the
    # real characters' states
    flat_reads_pooler: bool
    # the decoder of "Attention is all you need" as OccCANINE builds it: embeddings scaled
    # by sqrt(width), sinusoidal positions, post-norm layers, the encoder's states read at
    # their own width, no final norm; else learned positions, pre-norm layers, the memory
    # projected to the decoder's width and a final LayerNorm
    sinusoidal_decoder: bool
    decoder_reads_padding: bool  # the decoder attends to the encoder's padding positions too
    decoder_ff_ratio: int  # feed-forward width per unit of decoder width (HeadsConfig.decoder_ff 0)
    # new heads on an encoder of this family: the decoder at the encoder's width with this
    # many layers and attention heads; None: the run's --decoder-dim, --decoder-layers, ...
    decoder_layers: Optional[int]
    decoder_heads: Optional[int]
    new_heads_have_a_form: bool  # new heads on its encoder: --new-heads chooses their form
    keeps_input_recipe: bool  # a run that starts from a run of this family reads text as it did
    tokens: str  # how its decoder numbers its tokens (mixer.data.labels.formatter.TOKEN_SETS)
    top_k: Optional[int]  # alternatives per row by default; None: the codes a row may have
    tf32: bool  # TF32 matrix products on CUDA by default when predicting
    # how head outputs become codes (mixer.reporting.metrics.PredictionRules)
    flat_keep_best: bool
    flat_strict: bool
    seq2seq_order: str  # ranked | decoded


MIXER = Family(
    "mixer",
    flat_reads_pooler=False,
    sinusoidal_decoder=False,
    decoder_reads_padding=False,
    decoder_ff_ratio=4,
    decoder_layers=None,
    decoder_heads=None,
    new_heads_have_a_form=False,
    keeps_input_recipe=False,
    tokens="mixer",
    top_k=None,
    tf32=True,
    flat_keep_best=True,
    flat_strict=False,
    seq2seq_order="ranked",
)
# As OccCANINE's own code runs its models: predictions exact (no TF32), k_pred 5,
# probability > threshold with no code forced, the decoder's codes as written.
OCCCANINE = Family(
    "occcanine",
    flat_reads_pooler=True,
    sinusoidal_decoder=True,
    decoder_reads_padding=True,
    decoder_ff_ratio=1,
    decoder_layers=3,
    decoder_heads=8,
    new_heads_have_a_form=True,
    keeps_input_recipe=True,
    tokens="occcanine",
    top_k=5,
    tf32=False,
    flat_keep_best=False,
    flat_strict=True,
    seq2seq_order="decoded",
)

FAMILIES = {f.name: f for f in (MIXER, OCCCANINE)}


def family(name: str) -> Family:
    """The facts of a family by its name."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}") from None
