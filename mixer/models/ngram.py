"""The character n-gram head: a second opinion beside the encoder's flat head, strong where
word pieces are weak (misspelt and abbreviated descriptions).

TF-IDF of character 1-4-grams within word boundaries (scikit-learn's `char_wb`, n-grams in
fewer than `MIN_DF` training rows dropped) and a linear SVM per code (one-vs-rest
LinearSVC), fitted at the end of a run (mixer.training.hooks.NgramHead) on the run's
training rows and `NOISED_COPIES` noised copies of them (mixer.data.inputs.noise, other
seeds than the evaluation's). The flat head then reads, per code,

    logit = the encoder's flat logit + weight * the SVM's decision value

with `weight` chosen on the validation rows as written (the weight that puts a row's own
code first on the most rows: choose_weight). A code no training row carries scores
`ABSENT`. Each text is scored alone (no batch effect: one process and N give the same bits).

The model directory keeps it in one file, `ngram.npz` (numpy arrays, no pickle: read with
allow_pickle=False): the vocabulary, the idf, the SVM's weights (float16) and intercepts,
the key index of each class and the weight. A model directory without it predicts with the
encoder's flat head alone; one whose file is unreadable is refused with a one-line error
(and one of another key's size by mixer.prediction.predict.check_ngram).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import weakref
import zipfile
import zlib
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mixer.core.errors import UserError

NGRAM_FILE = "ngram.npz"
FORMAT = 1
ANALYZER = "char_wb"
NGRAMS = (1, 4)
MIN_DF = 3  # n-grams in fewer training rows are dropped: a third of the features of min_df 1
C = 1.0  # the SVM's regularisation (LinearSVC's default)
NOISED_COPIES = 2  # noised copies of the training rows the SVM also reads
MAX_FIT_ROWS = 100_000  # training rows fitted on at most (a seeded draw of a larger run's)
NOISE_EDITS = 2  # edits per row of each copy
COPY_SEED = 1000  # copy k is drawn with the run's seed + COPY_SEED + k (never the evaluation's)
ABSENT = -1.0  # the decision value of a code no training row carries
WEIGHTS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # the weights tried on the validation rows


def _vectorizer(vocabulary=None):
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(
        analyzer=ANALYZER,
        ngram_range=NGRAMS,
        sublinear_tf=True,
        min_df=MIN_DF,
        dtype=np.float32,
        vocabulary=vocabulary,
    )


@dataclass
class NgramHead:
    """A fitted head: `scores(texts)` is (rows, codes of the key) float32."""

    vocabulary: np.ndarray  # (features,) str, in column order
    idf: np.ndarray  # (features,) float32
    coef: np.ndarray  # (classes, features) float16
    intercept: np.ndarray  # (classes,) float32
    columns: np.ndarray  # (classes,) int64: each class's index in the key
    num_codes: int
    weight: float = 0.0

    def __post_init__(self):
        self._vec = None
        self._weights = None  # coef.T as float32, made once

    def vectorizer(self):
        if self._vec is None:
            vec = _vectorizer({str(g): i for i, g in enumerate(self.vocabulary)})
            vec.idf_ = self.idf.astype(np.float64)
            self._vec = vec
        return self._vec

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        """The SVM's decision value of every code for each text (ABSENT for codes it never saw)."""
        out = np.full((len(texts), self.num_codes), ABSENT, dtype=np.float32)
        if len(texts):
            features = self.vectorizer().transform([str(t) for t in texts])
            if self._weights is None:
                self._weights = np.ascontiguousarray(self.coef.astype(np.float32).T)
            decision = features @ self._weights + self.intercept
            out[:, self.columns] = np.asarray(decision, dtype=np.float32)
        return out

    def digest(self) -> str:
        """A hash of everything the head adds to the flat logits: the same head, the same
        digest, however it was saved or loaded (the audit's model fingerprint reads it)."""
        import xxhash

        digest = xxhash.xxh3_128()
        digest.update("\x1f".join(map(str, self.vocabulary)).encode("utf-8"))
        for array in (self.idf, self.coef, self.intercept, self.columns):
            array = np.ascontiguousarray(array)
            digest.update(f"{array.dtype}:{array.shape}".encode())
            digest.update(array.tobytes())
        digest.update(f"{self.num_codes}:{float(self.weight)!r}".encode())
        return digest.hexdigest()[:16]

    def offsets(self, texts: Sequence[str]) -> np.ndarray:
        """What the head adds to the flat logits of each text: weight * scores."""
        return (np.float32(self.weight) * self.scores(texts)).astype(np.float32)

    def arrays(self) -> dict:
        """The head as the arrays NGRAM_FILE holds (from_arrays reads them back)."""
        return {
            "format": np.int64(FORMAT),
            "vocabulary": self.vocabulary.astype(str),
            "idf": self.idf.astype(np.float32),
            "coef": self.coef.astype(np.float16),
            "intercept": self.intercept.astype(np.float32),
            "columns": self.columns.astype(np.int64),
            "num_codes": np.int64(self.num_codes),
            "weight": np.float64(self.weight),
        }

    @classmethod
    def from_arrays(cls, arrays) -> "NgramHead":
        return cls(
            vocabulary=arrays["vocabulary"],
            idf=arrays["idf"],
            coef=arrays["coef"],
            intercept=arrays["intercept"],
            columns=arrays["columns"],
            num_codes=int(arrays["num_codes"]),
            weight=float(arrays["weight"]),
        )

    def save(self, directory: str) -> str:
        """Written as NGRAM_FILE in `directory`, atomically (a temporary file renamed)."""
        arrays = self.arrays()
        path = os.path.join(directory, NGRAM_FILE)
        temporary = path + ".tmp"
        # np.savez's layout with a fixed date in each member: the same bytes for the same head
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, array in arrays.items():
                member = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
                member.compress_type = zipfile.ZIP_DEFLATED
                with archive.open(member, "w", force_zip64=True) as handle:
                    np.lib.format.write_array(handle, np.asanyarray(array), allow_pickle=False)
        os.replace(temporary, path)
        return path


def read(directory: Optional[str]) -> Optional[NgramHead]:
    """The head of a model directory; None without a file (or without a directory). An
    unreadable or inconsistent file: UserError naming it."""
    if not directory:
        return None
    path = os.path.join(directory, NGRAM_FILE)
    if not os.path.exists(path):
        return None
    fix = f"delete it to predict with the encoder alone, or copy it again from the run ({path})"
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
        head = NgramHead.from_arrays(arrays)
        version = int(arrays["format"])
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        EOFError,
        zipfile.BadZipFile,
        zlib.error,
    ) as error:  # zlib.error: bytes damaged inside a member
        raise UserError(f"{NGRAM_FILE}: cannot read the n-gram head ({error}); {fix}") from None
    features, classes = len(head.vocabulary), len(head.columns)
    if (
        version != FORMAT
        or not np.isfinite(head.weight)
        or head.columns.dtype.kind not in "iu"
        or head.idf.shape != (features,)
        or head.coef.shape != (classes, features)
        or head.intercept.shape != (classes,)
        or (classes and (head.columns.min() < 0 or head.columns.max() >= head.num_codes))
    ):
        raise UserError(f"{NGRAM_FILE}: the n-gram head's arrays do not fit together; {fix}")
    return head


def training_texts(texts: Sequence[str], classes: np.ndarray, seed: int, words) -> tuple:
    """The rows the SVM reads: the training rows, then NOISED_COPIES noised copies of them
    (copy k drawn with seed + COPY_SEED + k)."""
    from mixer.data.inputs.noise import noised_texts

    texts = [str(t) for t in texts]
    out, labels = list(texts), [classes] * (1 + NOISED_COPIES)
    positions = np.arange(len(texts))
    for k in range(NOISED_COPIES):
        out += noised_texts(texts, seed + COPY_SEED + k, NOISE_EDITS, words, positions=positions)
    return out, np.concatenate(labels)


def fit(texts: Sequence[str], classes: np.ndarray, num_codes: int) -> Optional[NgramHead]:
    """The head fitted on texts and each one's class (its index in the key); None with
    fewer than 2 classes or no n-gram kept (weight 0 until choose_weight)."""
    from sklearn.svm import LinearSVC

    classes = np.asarray(classes, dtype=np.int64)
    if len(np.unique(classes)) < 2:
        return None
    vec = _vectorizer()
    try:
        features = vec.fit_transform([str(t) for t in texts])
    except ValueError:  # no n-gram in MIN_DF rows
        return None
    svm = LinearSVC(C=C, random_state=0).fit(features, classes)
    coef, intercept = svm.coef_, svm.intercept_
    if len(svm.classes_) == 2:  # a binary SVM decides for the second class: the first gets -d
        coef, intercept = np.concatenate([-coef, coef]), np.concatenate([-intercept, intercept])
    return NgramHead(
        vocabulary=vec.get_feature_names_out().astype(str),
        idf=vec.idf_.astype(np.float32),
        coef=coef.astype(np.float16),
        intercept=intercept.astype(np.float32),
        columns=svm.classes_.astype(np.int64),
        num_codes=int(num_codes),
    )


def choose_weight(logits: np.ndarray, scores: np.ndarray, labels: np.ndarray) -> tuple:
    """(weight, {weight: (top-1 accuracy, binary cross-entropy)}): the weight of WEIGHTS
    whose combined logits (logits + weight * scores) put a row's own code first on the most
    rows; among equals the lowest mean binary cross-entropy against the rows' multi-hot
    labels, then the smallest weight. (The cross-entropy alone picks 0.5 on the example
    data, which the noised rows then pay for: docs/training.md.)"""
    logits, scores = np.asarray(logits, np.float64), np.asarray(scores, np.float64)
    labels = np.asarray(labels, np.float64)
    rows = np.arange(len(labels))
    measured = {}
    for weight in WEIGHTS:
        z = logits + weight * scores
        right = float(labels[rows, z.argmax(axis=1)].mean()) if len(rows) else 0.0
        # log(1 + exp(-|z|)) + max(z, 0) - z * y: the stable form of BCE with logits
        loss = np.logaddexp(0.0, -np.abs(z)) + np.maximum(z, 0.0) - z * labels
        measured[weight] = (right, float(loss.sum(axis=1).mean()) if len(rows) else 0.0)
    best = min(WEIGHTS, key=lambda w: (-measured[w][0], measured[w][1], w))
    return best, measured


class BackgroundFit:
    """fit() in a child process started when the run starts, at the lowest CPU priority
    (nice 19, and Linux's SCHED_IDLE: it runs when a core would otherwise wait), so that the
    fit costs the run's end nothing where cores wait while the encoder trains (on a GPU, the
    CPU; on a CPU, the moments between a step's kernels). result() waits for it (and takes
    it over when the child gets next to no CPU while the run waits: _waited): the same head fit() gives (the same rows, the same
    single-threaded solver). A child that cannot start or fails is replaced by fitting in
    the process; one left running dies with the process that started it (Linux: the
    parent-death signal) or when this object is collected."""

    def __init__(self, texts: Sequence[str], classes: np.ndarray, num_codes: int):
        self.args = ([str(t) for t in texts], np.asarray(classes, dtype=np.int64), num_codes)
        self.failure: Optional[str] = None
        buffer = io.BytesIO()
        np.savez(
            buffer, **_texts_as_arrays(self.args[0]), classes=self.args[1], num_codes=num_codes
        )
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=path)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        except OSError as error:
            self.process, self.failure = None, f"it did not start ({error})"
            return
        weakref.finalize(self, _stop, self.process)
        self._out: list = []  # the child's output, read as it comes (it never waits on a pipe)
        stdout, out = self.process.stdout, self._out

        def receive():
            try:
                out.append(stdout.read())
            except (OSError, ValueError):  # closed by close(): nothing to keep
                pass

        self._reader = threading.Thread(target=receive, daemon=True)
        self._reader.start()
        # its length first: the child reads that much, never waiting for the end of the
        # pipe, which a process forked from this one later (a DataLoader's workers) holds open
        payload = len(buffer.getbuffer()).to_bytes(8, "little") + buffer.getbuffer()
        stdin = self.process.stdin

        def send():
            try:
                stdin.write(payload)
                stdin.close()
            except OSError:  # the child died: result() says so
                pass

        threading.Thread(target=send, daemon=True).start()

    def result(self) -> Optional[NgramHead]:
        """The fitted head (None as fit() gives it); `failure` says why it was fitted here."""
        if self.process is not None:
            if not self._waited():
                _stop(self.process)
                self.failure = (
                    f"it got less than {TAKE_OVER_SHARE:.0%} of a core over {TAKE_OVER_SECONDS:g} s "
                    "while the run waited for it (other processes keep the cores busy)"
                )
                return fit(*self.args)
            out = self._out[0] if self._out else b""
            code = self.process.wait()
            if code == 0 and out:
                if out == NO_HEAD:
                    return None
                try:
                    with np.load(io.BytesIO(out), allow_pickle=False) as stored:
                        arrays = {name: stored[name] for name in stored.files}
                    return NgramHead.from_arrays(arrays)
                except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
                    self.failure = f"its output could not be read ({error})"
                    return fit(*self.args)
            self.failure = f"its process ended with status {code}"
        return fit(*self.args)

    def _waited(self) -> bool:
        """Waits for the child's output: True once it has it; False when the child, watched
        while the run waits, got less than TAKE_OVER_SHARE of a core over TAKE_OVER_SECONDS
        (Linux, which says what CPU time a process got): at its idle priority, on a machine
        whose other processes keep every core busy, it could wait without end, so the run
        fits the head itself (at most what the fit at the run's end cost before)."""
        before = _cpu_seconds(self.process.pid)
        while True:
            self._reader.join(TAKE_OVER_SECONDS)
            if not self._reader.is_alive():
                return True
            now = _cpu_seconds(self.process.pid)
            if before is not None and now is not None:
                if now - before < TAKE_OVER_SHARE * TAKE_OVER_SECONDS:
                    return False
            before = now

    def close(self) -> None:
        if self.process is not None:
            _stop(self.process)


TAKE_OVER_SECONDS = 5.0  # while the run waits for the fit beside it, it looks this often
TAKE_OVER_SHARE = 0.2  # and fits the head itself when the child got less of a core


def _cpu_seconds(pid: int) -> Optional[float]:
    """A process's CPU time so far (Linux's /proc/PID/stat); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


NO_HEAD = b"no head"


def _stop(process) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None and not stream.closed:
            try:
                stream.close()
            except OSError:
                pass


def _texts_as_arrays(texts: list) -> dict:
    """Texts as numpy arrays that hold them exactly and in their own size: their UTF-8
    bytes (lone surrogates kept) and each one's end (a str array is as wide as its longest
    text, and drops trailing NULs)."""
    encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
    ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
    return {"text_bytes": np.frombuffer(b"".join(encoded), dtype=np.uint8), "text_ends": ends}


def _texts_of_arrays(text_bytes: np.ndarray, ends: np.ndarray) -> list:
    data, starts = text_bytes.tobytes(), np.concatenate([[0], ends[:-1]]).astype(np.int64)
    return [data[int(a) : int(b)].decode("utf-8", "surrogatepass") for a, b in zip(starts, ends)]


def _read_exactly(stream, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = stream.read(left)
        if not part:
            raise EOFError(f"{left} of {size} bytes missing")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _background_main() -> None:
    """The child of BackgroundFit: arrays on stdin, the head's arrays (or NO_HEAD) on stdout."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:  # die with the parent (PR_SET_PDEATHSIG), and yield every core to it
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (OSError, AttributeError):
            pass
    if len(sys.argv) > 1 and os.getppid() != int(sys.argv[1]):
        sys.exit(3)  # the parent died before the death signal was asked for
    try:
        os.nice(19)
    except OSError:
        pass
    size = int.from_bytes(_read_exactly(sys.stdin.buffer, 8), "little")
    with np.load(io.BytesIO(_read_exactly(sys.stdin.buffer, size)), allow_pickle=False) as stored:
        texts = _texts_of_arrays(stored["text_bytes"], stored["text_ends"])
        classes, num_codes = stored["classes"], int(stored["num_codes"])
    head = fit(texts, classes, num_codes)
    if head is None:
        sys.stdout.buffer.write(NO_HEAD)
        return
    buffer = io.BytesIO()
    np.savez(buffer, **head.arrays())
    sys.stdout.buffer.write(buffer.getvalue())


if __name__ == "__main__":
    _background_main()
