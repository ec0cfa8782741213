"""mixer.prediction.provenance, kept at the name docs/coding.md gave users
(`from mixer.prediction import provenance; provenance.read(path)`); the module lives in
mixer.coding.provenance, with the feature it belongs to."""

from mixer.coding.provenance import UNRECORDED, read, sidecar_path

__all__ = ["UNRECORDED", "read", "sidecar_path"]
