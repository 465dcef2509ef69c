"""Java properties parsing/writing and meta.properties / partition.metadata files."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft.config.properties import (
    PropertiesSyntaxError,
    format_properties,
    parse_properties,
)
from kraft.protocol.uuid import Uuid
from kraft.storage.errors import NotFormattedError
from kraft.storage.meta_properties import (
    MetaProperties,
    read_meta_properties,
    write_meta_properties,
)
from kraft.storage.partition_metadata import read_partition_metadata, write_partition_metadata


def test_separators_comments_and_whitespace() -> None:
    text = (
        "# comment\n"
        "! another comment\n"
        "   \n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "  d   =   four  five\n"
        "e=\n"
        "f\n"
        "g==x\n"
    )
    assert parse_properties(text) == {
        "a": "1", "b": "2", "c": "3", "d": "four  five", "e": "", "f": "", "g": "=x",
    }


def test_escapes_and_continuations() -> None:
    text = (
        "log.dirs=/a,\\\n"
        "         /b,\\\n"
        "   /c\n"
        "key\\ with\\ spaces=v\\tw\n"
        "k\\:colon=\\u0041\\n\n"
        "path=C:\\\\x\n"
        "ends.with.even.backslashes=x\\\\\n"
        "next=1\n"
    )
    props = parse_properties(text)
    assert props["log.dirs"] == "/a,/b,/c"
    assert props["key with spaces"] == "v\tw"
    assert props["k:colon"] == "A\n"
    assert props["path"] == "C:\\x"
    assert props["ends.with.even.backslashes"] == "x\\"
    assert props["next"] == "1"


def test_crlf_and_later_duplicates_win() -> None:
    assert parse_properties("a=1\r\na=2\r\n") == {"a": "2"}


def test_bad_unicode_escape_names_file_and_line() -> None:
    with pytest.raises(PropertiesSyntaxError, match=r"server.properties:2: malformed"):
        parse_properties("a=1\nb=\\u12G4\n", "server.properties")


def test_format_round_trips_awkward_text() -> None:
    props = {"a b": "c=d:e", "x": " leading", "u": "é\t#!", "empty": ""}
    text = format_properties(props)
    assert text.startswith("#\n#")
    assert parse_properties(text) == props


def test_meta_properties_round_trip(tmp_path: Path) -> None:
    meta = MetaProperties("QF8mVzcRaw30atEJTDbDUQ", 3, Uuid.random())
    write_meta_properties(tmp_path, meta)
    text = (tmp_path / "meta.properties").read_text()
    assert "version=1\n" in text and "node.id=3\n" in text
    assert f"directory.id={meta.directory_id}\n" in text
    assert read_meta_properties(tmp_path) == meta
    assert not (tmp_path / "meta.properties.tmp").exists()


def test_meta_properties_missing_is_none_and_bad_values_are_named(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None
    (tmp_path / "meta.properties").write_text("version=1\ncluster.id=x\nnode.id=abc\n")
    with pytest.raises(NotFormattedError, match=r"node\.id 'abc'"):
        read_meta_properties(tmp_path)
    (tmp_path / "meta.properties").write_text("version=0\nbroker.id=1\ncluster.id=x\n")
    with pytest.raises(NotFormattedError, match="version 0"):
        read_meta_properties(tmp_path)
    (tmp_path / "meta.properties").write_text("version=1\ncluster.id=x\nnode.id=1\ndirectory.id=zz\n")
    with pytest.raises(NotFormattedError, match=r"directory\.id"):
        read_meta_properties(tmp_path)


def test_partition_metadata(tmp_path: Path) -> None:
    assert read_partition_metadata(tmp_path) is None
    write_partition_metadata(tmp_path)
    assert (tmp_path / "partition.metadata").read_text() == (
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n"
    )
    assert read_partition_metadata(tmp_path) == Uuid.METADATA_TOPIC_ID
