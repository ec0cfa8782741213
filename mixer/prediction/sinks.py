"""predict.py's own outputs, each a sink of a module of its own (mixer.prediction.sink.Sink):
the output with its provenance (sink_output), the check list (sink_check_list), the audit's
draw (mixer.audit.draw, passed in), the embeddings (sink_embeddings), the summary plot
(sink_summary_plot). `default_sinks` lists them in their turn; nothing is registered. Every
list of a job's outputs is read here from what the sinks it is handed declare.
"""

from __future__ import annotations

from mixer.audit.guards import GUARDS  # a filled audit: no output replaces it
from mixer.core.errors import UserError
from mixer.prediction.sink import sink_name
from mixer.prediction.sink_check_list import CheckListSink
from mixer.prediction.sink_embeddings import EmbeddingSink, EmbeddingWriter
from mixer.prediction.sink_output import OutputSink
from mixer.prediction.sink_summary_plot import SummaryPlotSink

__all__ = [
    "CheckListSink",
    "EmbeddingSink",
    "EmbeddingWriter",
    "OutputSink",
    "SummaryPlotSink",
    "default_sinks",
]


def default_sinks() -> list:
    """predict.py's outputs, in their turn (checks, chunks and commits go in this order): the
    output first (its shape is checked with it; the audit names its columns as the output
    does), the check list, the audit's draw (mixer.audit.draw), the embeddings, the plot. Each
    says from the configuration whether the job writes it (`wanted`). predict_file builds the
    job's outputs from this list unless its caller passes its own."""
    from mixer.audit.draw import AuditSink

    return [OutputSink, CheckListSink, AuditSink, EmbeddingSink, SummaryPlotSink]


# ------------------------------------------------------------------ the lists, from the sinks
def wanted(config, sinks) -> list:
    """The sinks of `sinks` this job writes."""
    return [sink for sink in sinks if sink.wanted(config)]


def job_outputs(config, sinks) -> dict:
    """{flag: path} of every file the wanted sinks write, in their turn."""
    return {
        flag: path for sink in wanted(config, sinks) for flag, path in sink.files(config).items()
    }


def written(config, sinks) -> dict:
    """{flag: path} of every file the wanted sinks write, their own and those beside them (the
    output's provenance): the files no output of the job may replace (job_files)."""
    return {
        flag: path
        for sink in wanted(config, sinks)
        for flag, path in {**sink.files(config), **beside(sink, config)}.items()
    }


def beside(sink, config) -> dict:
    """A sink's `beside` (one that does not subclass Sink may lack it: nothing beside)."""
    return sink.beside(config) if hasattr(sink, "beside") else {}


def check_paths(config, sink, outputs: dict) -> None:
    """The files `sink` writes where wanted, before its own check: a directory that exists and
    can be written, none of the job's other files (`outputs`, written(); the files it reads:
    mixer.data.tables.sinks.job_files), none a feature keeps (a filled audit: GUARDS)."""
    from mixer.data.tables.sinks import job_files
    from mixer.data.tables.writing import check_output_path

    for flag, path in sink.files(config).items() if sink.wanted(config) else ():
        check_output_path(path, flag, job_files(config, flag, outputs), GUARDS)


def unrecorded(sinks) -> dict:
    """{field: why} of the configuration's fields that make another file than the output (each
    other sink's flag and its own options): the output's provenance records none of them
    (mixer.coding.provenance.options_part). predict.py's own outputs are always among them."""
    fields = {}
    for sink in {*default_sinks(), *sinks}:
        if sink.field == OutputSink.field:  # the file the provenance describes
            continue
        if sink.field:
            fields[sink.field] = f"another file: {sink.flag}'s"
        options = getattr(sink, "options", ())  # one that does not subclass Sink may lack it
        fields.update((name, f"{sink.flag}'s file alone") for name in options)
    return dict(sorted(fields.items()))


def reads(config, sinks, what: str) -> bool:
    """Whether a wanted sink reads `what` of a chunk: "codes" (the code table) or "vectors"."""
    return any(what in sink.reads for sink in wanted(config, sinks))


def anchor(config, sinks) -> tuple:
    """(flag, path) of the file a job's parts lie beside: that of the wanted sink of the first
    `rank` (--output, else its first other output), or (None, None)."""
    for sink in sorted((s for s in wanted(config, sinks) if s.rank), key=lambda s: s.rank):
        for flag, path in sink.files(config).items():
            return flag, path
    return None, None


def refuse_no_output(config, sinks) -> None:
    """A job that writes no file on its own: one line naming the outputs that do. An output
    the options ask for (predict.py's own sinks say which) that none of `sinks` writes: one
    line naming it, as a flag no sink reads would otherwise be dropped without a word."""
    if anchor(config, sinks)[1] is None:
        usages = [s.usage for s in sorted(sinks, key=lambda s: s.rank) if s.rank and s.usage]
        if not usages:
            raise UserError(
                "the sinks passed write no file: pass predict.py's own "
                "(mixer.prediction.sinks.default_sinks()) or one that writes a file"
            )
        raise UserError(f"pass {', '.join(usages)}, or several")
    written = {flag for sink in wanted(config, sinks) for flag in sink.files(config)}
    for sink in wanted(config, default_sinks()):
        for flag, path in sink.files(config).items():
            if flag not in written:
                raise UserError(
                    f"{flag} {path}: none of the sinks passed writes it; pass its sink "
                    f"({sink_name(sink)}) with them, or leave {flag} out"
                )
