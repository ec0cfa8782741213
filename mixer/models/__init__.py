"""What a model is and where it comes from: encoders, the mixer model and its losses,
OccCANINE's layout, the hub, checkpoints, and the sources a run or a prediction starts
from. May import mixer.core, mixer.distributed and mixer.data. Layers: docs/architecture.md."""
