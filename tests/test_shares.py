"""Class shares corrected by an audit (mixer.audit.shares, `evaluate.py --shares`): the
interval holds in small audits where the normal one does not and is clearly narrower than
the audit's own, strata are weighted by their rows, the program writes the table and its
picture, and bad input is refused in one line.
The coverage at every audit size: benchmarks/class_shares.py (docs/classes.md)."""

import dataclasses
import os

import numpy as np
import pandas as pd
import pytest

from conftest import fails
from mixer.audit import shares
from mixer.cli.entrypoints import evaluate_main


def population(seed=0, rows=2000):
    """True and predicted classes of a file: four classes, one of them small (2%), 88% of
    rows predicted right, the errors drawn towards the two large classes."""
    rng = np.random.default_rng(seed)
    true = rng.choice(4, size=rows, p=[0.5, 0.3, 0.18, 0.02])
    predicted = true.copy()
    wrong = rng.random(rows) < 0.12
    predicted[wrong] = rng.choice(2, size=int(wrong.sum()))
    return true, predicted


def test_the_interval_covers_in_audits_of_50_rows_where_the_normal_one_does_not():
    """300 seeded audits of 50 rows: each class's interval, and all four at once with
    simultaneous, hold the file's true share in at least 95% of them; the large-sample
    interval (counted share plus the audit's mean error, +-1.96 standard errors) misses the
    small class far more often than 5%."""
    true, predicted = population()
    rows, classes = len(true), ["0", "1", "2", "3"]
    counted = np.bincount(predicted, minlength=4)[None, :].astype(float)
    truth = np.bincount(true, minlength=4) / rows
    rng = np.random.default_rng(1)
    audits, n = 300, 50
    covered, together, normal = np.zeros(4), 0, np.zeros(4)
    for _ in range(audits):
        drawn = rng.choice(rows, size=n, replace=False)
        args = (classes, counted, [rows], predicted[drawn], true[drawn], np.zeros(n, int))
        each = shares.share_estimates(*args, np.ones(n), False)
        covered += (each["low"] <= truth) & (truth <= each["high"])
        both = shares.share_estimates(*args, np.ones(n), False, simultaneous=True)
        together += bool(((both["low"] <= truth) & (truth <= both["high"])).all())
        errors = (true[drawn, None] == np.arange(4)) * 1.0 - (
            predicted[drawn, None] == np.arange(4)
        )
        centre = counted[0] / rows + errors.mean(axis=0)
        half = 1.96 * errors.std(axis=0, ddof=1) / np.sqrt(n)
        normal += (centre - half <= truth) & (truth <= centre + half)
    assert (covered / audits >= 0.95).all(), covered / audits
    assert together / audits >= 0.95
    assert normal.min() / audits < 0.85, normal / audits


def widths_and_cover(true, predicted, audits, n, rng, **options):
    """Per class, over `audits` seeded audits of n rows of the file: the share whose interval
    held the true share, the median width of the interval and of the audit's own."""
    rows, k = len(true), int(max(true.max(), predicted.max())) + 1
    classes = [str(c) for c in range(k)]
    counted = np.bincount(predicted, minlength=k)[None, :].astype(float)
    truth = np.bincount(true, minlength=k) / rows
    covered, width, own = np.zeros(k), [], []
    for _ in range(audits):
        drawn = rng.choice(rows, size=n, replace=False)
        table = shares.share_estimates(
            classes, counted, [rows], predicted[drawn], true[drawn], np.zeros(n, int),
            np.ones(n), False, **options,
        )  # fmt: skip
        covered += (table["low"] <= truth) & (truth <= table["high"])
        width.append(table["high"] - table["low"])
        own.append(table["audit_high"] - table["audit_low"])
    return covered / audits, np.median(width, axis=0), np.median(own, axis=0)


def test_the_interval_is_clearly_narrower_than_the_audits_own_and_the_former_one():
    """200 seeded audits of 200 rows: the interval (counted x precision + rest x leak) holds
    each class's true share in at least 95% of them, is narrower for every class than
    errors+audit (the interval mixer gave before), and on average at most 80% as wide as
    the audit's own."""
    true, predicted = population()
    covered, width, own = widths_and_cover(true, predicted, 200, 200, np.random.default_rng(2))
    _, former, _ = widths_and_cover(
        true, predicted, 200, 200, np.random.default_rng(2), method="errors+audit"
    )
    assert (covered >= 0.95).all(), covered
    assert (width < former).all(), (width, former)
    assert (width / own).mean() <= 0.8, width / own


def test_a_class_no_audit_row_was_predicted_as_has_an_unknown_precision():
    """30% of the file is predicted class 0, but none of the 40 rows checked was (nor was of
    it): how many of those rows are class 0 the audit cannot tell, so the interval reaches
    from none of them (low 0) to all of them (high at least 0.3); the leak (0 of 40) is
    measured."""
    counted = np.asarray([[300.0, 700.0]])
    ones = np.ones(40, dtype=np.int64)
    table = shares.share_estimates(
        ["0", "1"], counted, [1000], ones, ones, np.zeros(40, int), np.ones(40), False
    )
    assert table["low"][0] == 0.0
    assert 0.3 <= table["high"][0] < 0.3 + 0.7 * 0.1


def test_a_stratified_audit_weights_each_stratum_by_its_rows_in_the_file():
    """Stratum A: 900 rows (600 predicted class 0), 10 checked, one of them class 1 predicted
    0; stratum B: 100 rows (20 predicted 0), 10 checked, two of them class 0 predicted 1.
    Class 0's corrected share is 0.62 + 0.1 * 2/10 - 0.9 * 1/10 = 0.55, not the 0.67 of the
    20 checked rows pooled."""
    counted = np.asarray([[600.0, 300.0], [20.0, 80.0]])
    predicted = np.asarray([0] * 5 + [1] * 5 + [0] * 5 + [1] * 5)
    true = predicted.copy()
    true[0] = 1  # stratum A: predicted 0, is 1
    true[15], true[16] = 0, 0  # stratum B: predicted 1, are 0
    stratum = np.asarray([0] * 10 + [1] * 10)
    table = shares.share_table(
        ["0", "1"], counted, [900, 100], predicted, true, stratum, np.ones(20), True
    ).set_index("class")
    assert table.loc["0", "counted"] == pytest.approx(0.62)
    assert table.loc["0", "corrected"] == pytest.approx(0.55)
    assert table.loc["1", "corrected"] == pytest.approx(0.45)
    assert table.loc["0", "low"] <= 0.55 <= table.loc["0", "high"]
    assert "by stratum" in table.loc["0", "interval"]


def test_a_stratified_interval_covers_in_audits_of_50_rows():
    """Two strata of 1,500 and 500 rows, 25 rows checked in each (the small one drawn four
    times as heavily): in 300 seeded audits every class's interval holds its true share in
    at least 95% of them, and the small stratum does not weigh more than its rows."""
    true, predicted = population()
    stratum = (np.arange(len(true)) >= 1500).astype(np.int64)
    counted = np.vstack([np.bincount(predicted[stratum == h], minlength=4) for h in (0, 1)])
    truth = np.bincount(true, minlength=4) / len(true)
    rng, covered, audits = np.random.default_rng(3), np.zeros(4), 300
    for _ in range(audits):
        drawn = np.concatenate(
            [rng.choice(np.flatnonzero(stratum == h), size=25, replace=False) for h in (0, 1)]
        )
        table = shares.share_estimates(
            ["0", "1", "2", "3"], counted.astype(float), [1500, 500], predicted[drawn],
            true[drawn], stratum[drawn], np.ones(50), True,
        )  # fmt: skip
        covered += (table["low"] <= truth) & (truth <= table["high"])
    assert (covered / audits >= 0.95).all(), covered / audits


def drawn_audit(tmp_path, true, predicted, texts=None, source=None, checks=None, **request):
    """A predictions file of the given codes and an audit drawn from it (the draw of
    predict.py --audit, without a model), its true codes filled in."""
    from mixer.audit.draw import AuditDraw, AuditRequest, write_audit
    from mixer.data.labels.formatter import CodeFormatter

    rows = len(true)
    frame = pd.DataFrame(
        {
            "occ1": texts if texts is not None else [f"occupation {i}" for i in range(rows)],
            "parish": np.where(np.arange(rows) % 4 == 0, "A", "B"),
        }
    )
    coded = pd.DataFrame({"code_1": predicted, "prob_1": [0.9] * rows})
    skips = None
    if source is not None:  # predict.py --lookup: its rows are not drawn from
        coded["source"] = source
        skips = {"coded by the lookup": np.asarray(source) == "lookup"}
    if checks is not None:  # --target-accuracy: the rows that need a check are not drawn from
        coded["coded"] = checks
        skips = {**(skips or {}), shares.CHECK_REASON: np.asarray(checks) == "check"}
    path = tmp_path / f"audit_{request.get('unit', 'rows')}.csv"
    draw = AuditDraw(
        AuditRequest(str(path), **request).check(), "occ1", [], CodeFormatter(kind="hisco")
    )
    draw.add(frame, coded, skips)
    table, lines = draw.finish("m-test", "test", "flat", "0.5")
    write_audit(table, str(path), lines, log=lambda line: None)
    pd.concat([frame, coded], axis=1).to_csv(tmp_path / "predicted.csv", index=False)
    audit = pd.read_csv(path, dtype=str, keep_default_na=False)
    truth = dict(zip(frame["occ1"], true))  # a description has one true code
    audit["true_code_1"] = audit["occ1"].map(truth)
    audit.to_csv(path, index=False)
    return path, tmp_path / "predicted.csv"


def codes_of(classes):
    return np.asarray(["61110", "83110", "99910", "-1"])[classes]


def test_the_program_prints_and_writes_the_shares_with_their_picture(tmp_path, capsys):
    """evaluate.py --shares: a row per class, the class first, the counted share over the
    whole file, the corrected one and its interval (low, high), the audit's own beside it,
    and the picture; prefix:1 groups the codes by their first digit (HISCO's -1 whole);
    --simultaneous widens every interval."""
    true, predicted = population(rows=400)
    audit, predictions = drawn_audit(tmp_path, codes_of(true), codes_of(predicted), size=120)
    argv = ["--shares", "code", "--audit", audit, "--predictions", predictions]
    assert evaluate_main([str(a) for a in argv]) == 0
    table = pd.read_csv(tmp_path / "audit_rows_shares.csv", dtype={"class": str})
    assert table.columns[0] == "class"
    assert {"counted", "corrected", "low", "high", "audit_only", "audit_low", "audit_high"} <= set(
        table.columns
    )
    assert table["class"].tolist() == ["-1", "61110", "83110", "99910"]  # in numeric order
    counted = pd.Series(codes_of(predicted)).value_counts(normalize=True)
    assert table.set_index("class")["counted"].to_dict() == pytest.approx(counted.to_dict())
    assert table["counted"].sum() == pytest.approx(1.0)
    assert table["corrected"].sum() == pytest.approx(1.0)
    assert ((table["low"] <= table["corrected"]) & (table["corrected"] <= table["high"])).all()
    with open(tmp_path / "audit_rows_shares.png", "rb") as picture:
        assert picture.read(4) == b"\x89PNG"
    out = capsys.readouterr().out
    assert "120 rows checked of 400 of 400 predicted rows" in out
    assert "wrote" in out and "audit_rows_shares.csv" in out

    argv = ["--shares", "prefix:1", "--audit", audit, "--predictions", predictions]
    assert evaluate_main([str(a) for a in argv + ["--output", tmp_path / "major.csv"]]) == 0
    major = pd.read_csv(tmp_path / "major.csv", dtype={"class": str}).set_index("class")
    assert list(major.index) == ["-1", "6", "8", "9"]
    assert os.path.exists(tmp_path / "major.png")
    together = ["--simultaneous", "--output", tmp_path / "together.csv"]
    assert evaluate_main([str(a) for a in argv + together]) == 0
    wider = pd.read_csv(tmp_path / "together.csv", dtype={"class": str}).set_index("class")
    assert ((wider["high"] - wider["low"]) >= (major["high"] - major["low"]) - 1e-12).all()
    assert (wider["level"] == 1 - 0.05 / 4).all()


def test_the_interval_can_be_one_proven_exact_and_each_is_named_in_the_table(tmp_path):
    """--shares-interval: the flag's choices are the intervals the module computes; the
    default is the post-stratified one, and errors+audit (Clopper-Pearson, Bonferroni) gives
    its own interval, named in the table's `interval` column."""
    from mixer.core.programs import EvaluateConfig

    field = {f.name: f for f in dataclasses.fields(EvaluateConfig)}["shares_interval"]
    assert set(field.metadata["choices"]) == set(shares.METHODS)
    assert field.default == shares.METHOD
    true, predicted = population(rows=400)
    audit, predictions = drawn_audit(tmp_path, codes_of(true), codes_of(predicted), size=120)
    argv = ["--shares", "code", "--audit", audit, "--predictions", predictions]
    tables = {}
    for method in ("post-stratified", "errors+audit"):
        out = tmp_path / f"{method}.csv"
        flags = ["--shares-interval", method, "--output", out]
        assert evaluate_main([str(a) for a in argv + flags]) == 0
        tables[method] = pd.read_csv(out, dtype={"class": str}).set_index("class")
        assert (tables[method]["interval"] == shares.METHODS[method]).all()
    exact, default = tables["errors+audit"], tables["post-stratified"]
    assert (exact["corrected"] == default["corrected"]).all()  # one estimate, two intervals
    assert not np.allclose(exact["low"], default["low"])


def test_a_crosswalk_shares_the_rows_by_class_and_codes_without_one_are_none(tmp_path):
    """--shares hisclass: each row's class from the shipped crosswalk (its first code's), in
    the classes' order; HISCO's -1 has no class and is counted as (none), last; a row with
    two codes takes its first code's class."""
    from mixer.data.labels.crosswalk import load_crosswalk

    true, predicted = population(rows=400)
    audit, predictions = drawn_audit(tmp_path, codes_of(true), codes_of(predicted), size=100)
    argv = ["--shares", "hisclass", "--audit", audit, "--predictions", predictions]
    assert evaluate_main([str(a) for a in argv]) == 0
    table = pd.read_csv(tmp_path / "audit_rows_shares.csv", dtype={"class": str}).set_index("class")
    hisclass = load_crosswalk("hisclass").classify(pd.Series(codes_of(predicted)))
    expected = hisclass.replace("", shares.NONE).value_counts(normalize=True)
    assert table["counted"].to_dict() == pytest.approx(expected.to_dict())
    assert table.index[-1] == shares.NONE
    classify = shares.classifier("hisclass")
    first = classify([np.asarray(["99910", "-1"]), np.asarray(["61110", "61110"])])
    own = load_crosswalk("hisclass").classify(pd.Series(["99910", "61110"])).tolist()
    assert "" not in own and first.tolist() == own


def test_a_stratified_audit_is_counted_by_its_strata_in_the_file(tmp_path):
    """An audit stratified by parish: each parish's rows counted from the predictions file,
    and the table says its interval is the stratified one."""
    true, predicted = population(rows=400)
    audit, predictions = drawn_audit(
        tmp_path, codes_of(true), codes_of(predicted), size=80, by="parish"
    )
    argv = ["--shares", "code", "--audit", audit, "--predictions", predictions]
    assert evaluate_main([str(a) for a in argv]) == 0
    table = pd.read_csv(tmp_path / "audit_rows_shares.csv", dtype={"class": str})
    assert table["interval"].str.contains("by stratum").all()
    assert table["checked"].iloc[0] == 80


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    true, predicted = population(rows=200)
    audit, predictions = drawn_audit(tmp_path, codes_of(true), codes_of(predicted), size=40)
    base = ["--audit", audit, "--predictions", predictions]
    fails(capsys, "evaluate", ["--shares", "hisclas", *base], "--shares hisclas", "not a level")
    fails(capsys, "evaluate", ["--shares", "prefix:x", *base], "prefix:N")
    fails(capsys, "evaluate", ["--shares", "hiscam", *base], "a score, not a class")
    fails(capsys, "evaluate", ["--shares", "code", "--audit", audit], "needs --predictions")
    fails(capsys, "evaluate", ["--shares", "code", "--predictions", predictions], "--audit")
    filled = pd.read_csv(audit, dtype=str, keep_default_na=False)
    filled.assign(true_code_1="").to_csv(audit, index=False)
    fails(capsys, "evaluate", ["--shares", "code", *base], "no row is checked yet")
    filled.assign(true_code_1="", correct="no").to_csv(audit, index=False)
    fails(capsys, "evaluate", ["--shares", "code", *base], "marked wrong without the right codes")
    other = pd.read_csv(predictions, dtype=str, keep_default_na=False)
    other.loc[0, "code_1"] = "12345"
    other.to_csv(tmp_path / "other.csv", index=False)
    filled.to_csv(audit, index=False)
    fails(
        capsys,
        "evaluate",
        ["--shares", "code", "--audit", audit, "--predictions", tmp_path / "other.csv"],
        "drawn from other predictions",
    )
    assert not os.path.exists(tmp_path / "audit_rows_shares.csv")
    assert not os.path.exists(tmp_path / "audit_rows_shares.png")


def test_an_audit_of_descriptions_counts_each_line_for_the_rows_drawn_it_stands_for(tmp_path):
    """The same draw listed by description (a line per description, standing for its rows
    drawn) gives the shares of the audit of rows, every line checked."""
    rng = np.random.default_rng(3)
    texts = rng.choice([f"title {i}" for i in range(30)], size=300)
    true_of = {f"title {i}": i % 4 for i in range(30)}
    true = np.asarray([true_of[t] for t in texts])
    predicted = np.where(rng.random(30) < 0.2, 0, np.arange(30) % 4)[
        [int(t.split()[1]) for t in texts]
    ]
    tables = []
    for unit in ("rows", "descriptions"):
        audit, predictions = drawn_audit(
            tmp_path, codes_of(true), codes_of(predicted), texts, size=90, unit=unit
        )
        argv = ["--shares", "code", "--audit", audit, "--predictions", predictions]
        assert evaluate_main([str(a) for a in argv]) == 0
        tables.append(pd.read_csv(tmp_path / f"audit_{unit}_shares.csv", dtype={"class": str}))
    lines = pd.read_csv(tmp_path / "audit_descriptions.csv")
    assert len(lines) < 90 and tables[1]["checked"].iloc[0] == 90
    columns = ["class", "counted", "corrected", "low", "high", "audit_only"]
    pd.testing.assert_frame_equal(tables[0][columns], tables[1][columns])


def test_the_predictions_are_read_by_column_and_a_picture_of_many_classes_stays_small(tmp_path):
    """The predictions are streamed with only the columns the shares need (CSV and Parquet
    parse no other); a picture of 300 classes shows the 30 largest."""
    from mixer.core.config import TableOptions
    from mixer.data.tables.reading import iter_chunks

    frame = pd.DataFrame({"occ1": ["a", "b", "c"], "code_1": ["1", "2", "3"], "wide": ["x"] * 3})
    frame.to_csv(tmp_path / "p.csv", index=False)
    frame.to_parquet(tmp_path / "p.parquet")
    for name in ("p.csv", "p.parquet"):
        chunks = list(
            iter_chunks(
                str(tmp_path / name), 2, TableOptions(role="predictions"), columns=["code_1"]
            )
        )
        assert [list(c.columns) for c in chunks] == [["code_1"], ["code_1"]]
        assert pd.concat(chunks)["code_1"].astype(str).tolist() == ["1", "2", "3"]
    rng = np.random.default_rng(0)
    classes = 300
    true = rng.integers(0, classes, 2000)
    table = shares.share_table(
        [str(k) for k in range(classes)],
        np.bincount(true, minlength=classes)[None, :],
        [2000],
        true[:100],
        true[:100],
        np.zeros(100, int),
        np.ones(100),
        False,
    ).assign(shares="code", audit="a-test")
    picture = shares.render_shares(table)
    width = int.from_bytes(picture[16:20], "big")  # the PNG header's width
    assert picture[:4] == b"\x89PNG" and width < 3000


def test_the_rows_an_audit_was_not_drawn_from_are_not_counted(tmp_path, capsys):
    """Rows coded by a lookup are not drawn from (predict.py --lookup): the shares are of the
    rows the audit was drawn from, those the predictions' `source` column does not mark."""
    true, predicted = population(rows=400)
    source = np.where(np.arange(400) < 100, "lookup", "model")
    audit, predictions = drawn_audit(
        tmp_path, codes_of(true), codes_of(predicted), source=source, size=60
    )
    argv = ["--shares", "code", "--audit", audit, "--predictions", predictions]
    assert evaluate_main([str(a) for a in argv]) == 0
    table = pd.read_csv(tmp_path / "audit_rows_shares.csv", dtype={"class": str})
    drawn_from = pd.Series(codes_of(predicted)[100:]).value_counts(normalize=True)
    assert table.set_index("class")["counted"].to_dict() == pytest.approx(drawn_from.to_dict())
    assert table["rows_predicted"].sum() == 300
    assert "of 300 of 400 predicted rows" in capsys.readouterr().out
    checks = np.where(np.arange(400) % 5 == 0, "check", "auto")
    os.remove(audit)  # filled: never replaced
    audit, predictions = drawn_audit(
        tmp_path, codes_of(true), codes_of(predicted), source=source, checks=checks, size=60
    )
    assert evaluate_main([str(a) for a in argv]) == 0
    table = pd.read_csv(tmp_path / "audit_rows_shares.csv", dtype={"class": str})
    auto = (np.arange(400) >= 100) & (checks == "auto")
    drawn_from = pd.Series(codes_of(predicted)[auto]).value_counts(normalize=True)
    assert table.set_index("class")["counted"].to_dict() == pytest.approx(drawn_from.to_dict())
