"""Crosswalks: codes to classes (mixer.data.labels.crosswalk): the HISCO tables mixer ships
and a user's table, read by the one reader."""

from __future__ import annotations

import pandas as pd
import pytest

from mixer.core.errors import UserError
from mixer.data.labels.crosswalk import CROSSWALKS, SES_TABLE, load_crosswalk
from mixer.data.labels.formatter import CodeFormatter
from mixer.data.tables.reading import read_table


def test_hisco_codes_are_compared_as_the_model_writes_them():
    hisclass = load_crosswalk("hisclass")
    # the table writes 2290 for 02290; the model writes five digits
    classes = hisclass.classify(pd.Series(["02290", "61110", "99910", "-1"], index=[5, 6, 7, 8]))
    assert classes.tolist() == ["2", "8", "11", ""] and classes.index.tolist() == [5, 6, 7, 8]
    assert hisclass.label(classes).tolist()[:3] == [
        "Higher professionals",
        "Farmers and fishermen",
        "Unskilled workers",
    ]


def test_a_status_picks_the_tables_row_for_it():
    hisclass = load_crosswalk("hisclass")
    codes = pd.Series(["02290", "02290", "02290", "61110", "61110"])
    # 31 and 33 have rows of their own; 52 has none for 02290 (the code's own row);
    # a status written as a number ('031.0') is the same status
    status = pd.Series(["31", "33", "52", "023", "31.0"])
    assert hisclass.classify(codes, status=status).tolist() == ["1", "4", "2", "10", "8"]


def test_the_most_specific_row_wins_and_a_blank_class_is_the_answer():
    socpo = load_crosswalk("socpo")
    # 61110 with status 33 and relation 31 has a row of its own (SOCPO 1); with relation
    # 11, which it lacks, the row of status 33 alone (SOCPO 1); 02290 with status 31 and
    # relation 21 has a row whose HISCLASS is blank: no class, not the status row's
    codes = pd.Series(["61110", "61110", "02290"])
    status, relation = pd.Series(["33", "33", "31"]), pd.Series(["31", "11", "21"])
    assert socpo.classify(codes, status=status, relation=relation).tolist() == ["1", "1", "5"]
    hisclass = load_crosswalk("hisclass")
    assert hisclass.classify(codes, status=status, relation=relation).tolist() == ["", "8", ""]


def test_every_shipped_crosswalk_and_hiscam_is_a_score():
    codes = pd.Series(["02290", "99999", ""])
    found = {name: load_crosswalk(name).classify(codes).tolist() for name in CROSSWALKS}
    assert found == {
        "hisclass": ["2", "", ""],
        "hisclass_5": ["1", "", ""],
        "socpo": ["5", "", ""],
        "hiscam": ["89.01", "", ""],
    }
    hiscam = load_crosswalk("hiscam")
    assert hiscam.numeric and hiscam.label(pd.Series(["89.01"])).tolist() == [""]
    assert load_crosswalk("hisclass").classes == tuple(str(k) for k in range(1, 14))


def test_hisclass_5_labels_name_the_hisclass_classes_the_table_groups():
    table = read_table(SES_TABLE)
    labels = load_crosswalk("hisclass_5").labels
    groups = table[table["HISCLASS_5"] != ""].groupby("HISCLASS_5")["HISCLASS"].unique()
    farmers = [k for k, members in groups.items() if set(members) == {"8"}]
    assert [labels[k] for k in farmers] == ["Self-employed farmers and fishermen"]
    assert labels[next(k for k, m in groups.items() if set(m) == {"7", "9"})] == "Skilled workers"


def test_a_users_table_maps_any_codes_and_restores_zeros(tmp_path):
    path = tmp_path / "my groups.csv"
    path.write_text("code,class,label\n1110,A,Alpha\n02290,B,Beta\n03000,,\n1110,A,Alpha\n")
    walk = load_crosswalk(str(path), formatter=CodeFormatter(kind="hisco"))
    assert walk.name == "my_groups" and not walk.numeric
    classes = walk.classify(pd.Series(["01110", "02290", "03000", "99999"]))
    assert classes.tolist() == ["A", "B", "", ""]
    assert walk.label(classes).tolist() == ["Alpha", "Beta", "", ""]
    assert walk.first([classes, pd.Series(["C", "C", "C", ""])]).tolist() == ["A", "B", "C", ""]


def test_a_users_table_without_its_columns_or_with_two_classes_for_a_code(tmp_path):
    """Refused in one line: a column missing, a code given two classes, a class given two
    labels (the output would show one of them, the last row's, without a word)."""
    bad = tmp_path / "groups.csv"
    bad.write_text("hisco,group\n1,A\n")
    with pytest.raises(UserError, match=r"no column 'code' \(--crosswalk\)"):
        load_crosswalk(str(bad))
    bad.write_text("code,class\n1,A\n1,B\n")
    with pytest.raises(UserError, match="code '1' has two classes"):
        load_crosswalk(str(bad))
    bad.write_text("code,class,label\n1,A,Alpha\n2,A,Alfa\n3,A,Alpha\n4,B,\n")
    with pytest.raises(UserError, match=r"class 'A' has two labels \('Alpha', 'Alfa'\)"):
        load_crosswalk(str(bad))
    bad.write_text("code,class,label\n1,A,Alpha\n3,A,Alpha\n4,B,\n")  # alike: read
    assert load_crosswalk(str(bad)).label(["A", "B"]).tolist() == ["Alpha", ""]
    with pytest.raises(UserError, match="neither a crosswalk mixer ships"):
        load_crosswalk("hisclas")


def test_class_columns_have_labels_only_where_the_table_has_them(tmp_path):
    from mixer.data.labels.crosswalk import class_columns

    plain = tmp_path / "groups.csv"
    plain.write_text("code,class\n02290,A\n")
    assert class_columns(load_crosswalk(str(plain)), 2) == ["groups_1", "groups_2", "groups"]
    assert class_columns(load_crosswalk("hiscam"), 1, "flat_") == ["flat_hiscam_1", "flat_hiscam"]
    assert class_columns(load_crosswalk("socpo"), 1) == [
        "socpo_1",
        "socpo_label_1",
        "socpo",
        "socpo_label",
    ]
