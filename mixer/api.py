"""mixer.api, kept at the name the README gives (`help(mixer.api.Model.predict)`); the
module lives in mixer.prediction.api."""

from mixer.prediction.api import Model, load

__all__ = ["Model", "load"]
