"""Our log speaks C2SP: what `approvals/audit/tlog.py` writes (checkpoint notes, verifier keys, cosignatures,
tiles, entry bundles, inclusion and consistency proofs, tlog-proof files) is read and accepted by aics-tlog,
an independent implementation of the formats, run as a subprocess from its own virtual environment; and
what it refuses (a wrong key, a changed byte in a tile, a proof for another leaf), our functions refuse too.

Pure: no database. The tiles are laid out here from tlog.py's own pieces (level 0 = leaf hashes, each hash
above = the root of a full tile below, partial tiles at the right edge) at the paths `tlog.tile_path`
names, and compared byte for byte with aics-tlog's `build-tiles`. `test_audit_c2sp_served.py` does the
same against the tiles the sealer stores and the views serve."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from approvals.audit import tlog
from tests.c2sp import aics_tlog

ORIGIN = "gateway.example/audit"
WITNESS = "witness.example/w1"
# The edges of the tile layout: one leaf, a partial level 0 tile, exactly one full tile, a full one and a
# partial one, exactly one full level 1 tile (and a partial level 2 tile of width 1), one leaf more.
SIZES = [1, 255, 256, 257, 65536, 65537]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def entry_for(index: int) -> bytes:
    # build-tiles reads one entry a line, so entries hold no newline (like canonical JSON records).
    return json.dumps({"id": index + 1, "kind": "refund", "amount_minor": 1000 + index, "note": "café"}).encode()


def lay_out(leaf_hashes: list[bytes]) -> dict[tuple[int, int], bytes]:
    """(level, index) -> the tile's bytes, as c2sp.org/tlog-tiles lays them out for this tree."""
    tiles: dict[tuple[int, int], bytes] = {}
    hashes, level = leaf_hashes, 0
    while hashes:
        for index in range(0, (len(hashes) + tlog.TILE_WIDTH - 1) // tlog.TILE_WIDTH):
            tiles[(level, index)] = b"".join(hashes[index * tlog.TILE_WIDTH : (index + 1) * tlog.TILE_WIDTH])
        full = [tiles[(level, index)] for index in range(len(hashes) // tlog.TILE_WIDTH)]
        hashes = [tlog.subtree_root(split_hashes(tile)) for tile in full]
        level += 1
    return tiles


def split_hashes(tile: bytes) -> list[bytes]:
    return [tile[i : i + tlog.HASH_SIZE] for i in range(0, len(tile), tlog.HASH_SIZE)]


def write_tiles(directory: Path, tiles: dict[tuple[int, int], bytes], entries: list[bytes]) -> None:
    for (level, index), data in tiles.items():
        path = directory / tlog.tile_path(level, index, len(data) // tlog.HASH_SIZE)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for index in range(0, (len(entries) + tlog.TILE_WIDTH - 1) // tlog.TILE_WIDTH):
        bundle = entries[index * tlog.TILE_WIDTH : (index + 1) * tlog.TILE_WIDTH]
        path = directory / tlog.tile_path("entries", index, len(bundle))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(tlog.entry_bundle(bundle))


def files_under(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != "checkpoint"
    }


@dataclass
class Log:
    """A log of `size` entries: its tiles in memory and in `directory`, its checkpoint note signed by `key`."""

    entries: list[bytes]
    tiles: dict[tuple[int, int], bytes]
    directory: Path
    key: Ed25519PrivateKey
    note: str
    note_file: Path

    @property
    def size(self) -> int:
        return len(self.entries)

    @property
    def vkey(self) -> str:
        return tlog.verifier_key(ORIGIN, self.key.public_key()).text()

    def tree(self, tiles: dict[tuple[int, int], bytes] | None = None) -> tlog.TreeHashes:
        source = self.tiles if tiles is None else tiles
        return tlog.TreeHashes(lambda level, index: source.get((level, index), b""), self.size)

    def leaf_hash(self, index: int) -> bytes:
        return tlog.entry_leaf_hash(self.entries[index])

    def signed(self, size: int, key: Ed25519PrivateKey | None = None) -> str:
        checkpoint = tlog.Checkpoint(ORIGIN, size, self.tree().root(size))
        return tlog.checkpoint_sign(checkpoint, [key or self.key]).serialize()


@pytest.fixture(scope="module")
def log_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


_logs: dict[int, Log] = {}


def shared_log(size: int, key: Ed25519PrivateKey, tmp_path_factory) -> Log:
    """The log of `size` entries, laid out once per test run (tests that tamper take a `private_copy`)."""
    if size not in _logs:
        entries = [entry_for(index) for index in range(size)]
        tiles = lay_out([tlog.entry_leaf_hash(entry) for entry in entries])
        directory = tmp_path_factory.mktemp(f"tiles-{size}")
        write_tiles(directory, tiles, entries)
        made = Log(entries, tiles, directory, key, "", directory.parent / f"checkpoint-{size}.note")
        made.note = made.signed(size)
        made.note_file.write_text(made.note)
        (directory / "checkpoint").write_text(made.note)
        _logs[size] = made
    return _logs[size]


def private_copy(shared: Log, tmp_path_factory) -> Log:
    directory = tmp_path_factory.mktemp(f"copy-{shared.size}")
    shutil.copytree(shared.directory, directory, dirs_exist_ok=True)
    note_file = directory.parent / f"{directory.name}.note"
    note_file.write_text(shared.note)
    return Log(shared.entries, dict(shared.tiles), directory, shared.key, shared.note, note_file)


@pytest.fixture(scope="module", params=SIZES, ids=[f"{size}-leaves" for size in SIZES])
def log(request, log_key, tmp_path_factory) -> Log:
    return shared_log(request.param, log_key, tmp_path_factory)


@pytest.fixture
def small_log(log_key, tmp_path_factory) -> Log:
    return private_copy(shared_log(257, log_key, tmp_path_factory), tmp_path_factory)


@pytest.fixture
def large_log(log_key, tmp_path_factory) -> Log:
    return private_copy(shared_log(65537, log_key, tmp_path_factory), tmp_path_factory)


def indexes_of(size: int) -> list[int]:
    return sorted({index for index in (0, 1, 254, 255, 256, 257, size // 2, size - 2, size - 1) if 0 <= index < size})


def old_sizes_of(size: int) -> list[int]:
    return sorted({old for old in (1, 2, 3, 255, 256, 257, 65535, 65536, size // 2 + 1, size - 1) if 0 < old < size})


def write(path: Path, text: str | bytes) -> str:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def proof_file(path: Path, hashes: list[bytes]) -> str:
    return write(path, "".join(b64(h) + "\n" for h in hashes))


# Tiles ---------------------------------------------------------------------------------------------


def test_our_tiles_are_byte_identical_to_aics_tlog_build_tiles(log, tmp_path):
    leaves = write(tmp_path / "leaves.txt", b"".join(entry + b"\n" for entry in log.entries))
    code, report = aics_tlog("build-tiles", "--leaves", leaves, "--out", str(tmp_path / "aics"))

    assert code == 0, report
    assert report["size"] == log.size
    assert report["root"] == b64(log.tree().root())
    ours, theirs = files_under(log.directory), files_under(tmp_path / "aics")
    assert sorted(ours) == sorted(theirs)
    assert [path for path in ours if ours[path] != theirs[path]] == []


def test_the_tile_paths_are_what_the_spec_lists_for_each_size(log):
    paths = sorted(files_under(log.directory))
    expected = {
        1: ["tile/0/000.p/1", "tile/entries/000.p/1"],
        255: ["tile/0/000.p/255", "tile/entries/000.p/255"],
        256: ["tile/0/000", "tile/1/000.p/1", "tile/entries/000"],
        257: ["tile/0/000", "tile/0/001.p/1", "tile/1/000.p/1", "tile/entries/000", "tile/entries/001.p/1"],
    }
    if log.size in expected:
        assert paths == expected[log.size]
    else:
        full, partial = divmod(log.size, tlog.TILE_WIDTH)
        assert [path for path in paths if path.startswith("tile/0/")] == [
            f"tile/0/{tlog.tile_index_path(index)}" for index in range(full)
        ] + ([f"tile/0/{tlog.tile_index_path(full)}.p/{partial}"] if partial else [])
        assert [path for path in paths if not path.startswith(("tile/0/", "tile/entries/"))] == [
            "tile/1/000",
            "tile/2/000.p/1",
        ]
    for level in range(3):
        full_tiles, width = tlog.tile_widths(log.size, level)
        assert sum(1 for (at, _), data in log.tiles.items() if at == level and len(data) == 8192) == full_tiles
        assert [len(data) // 32 for (at, _), data in log.tiles.items() if at == level and len(data) < 8192] == (
            [width] if width else []
        )


# Checkpoints and verifier keys ----------------------------------------------------------------------


def test_our_checkpoint_note_and_verifier_key_verify_with_aics_tlog(log):
    code, report = aics_tlog(
        "verify-checkpoint", "--note", str(log.note_file), "--log-key", log.vkey, "--origin", ORIGIN
    )

    assert code == 0, report
    assert (report["ok"], report["log_ok"]) == (True, True)
    assert (report["origin"], report["size"], report["root"]) == (ORIGIN, log.size, b64(log.tree().root()))
    name, key_id, _ = log.vkey.split("+", 2)
    assert report["log_key"] == f"{name}+{key_id}"
    ours = tlog.checkpoint_verify(log.note, [tlog.verifier_key_parse(log.vkey)], origin=ORIGIN)
    assert (ours.checkpoint.size, ours.checkpoint.root) == (log.size, log.tree().root())


def test_a_verifier_key_whose_base64_holds_a_plus_parses_as_aics_tlog_and_go_read_it(tmp_path):
    """A vkey is `<name>+<hex ID>+<base64>`, and base64 has `+` in it for about half of all keys: only the
    first two `+` separate parts (Go's note.NewVerifier cuts twice as well)."""
    key = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"vkey-with-plus-0").digest())
    vkey = tlog.verifier_key(ORIGIN, key.public_key())
    assert vkey.text() == "gateway.example/audit+65088dc5+AZanSInPOhhBFC0nGJSksPpXZnREEoHQHz+ad85k3Ifv"

    assert tlog.verifier_key_parse(vkey.text()) == vkey
    note = tlog.checkpoint_sign(tlog.Checkpoint(ORIGIN, 1, tlog.entry_leaf_hash(b"x")), [key]).serialize()
    assert tlog.checkpoint_verify(note, [tlog.verifier_key_parse(vkey.text())]).log_keys == (vkey,)
    code, report = aics_tlog("verify-checkpoint", "--note", write(tmp_path / "note", note), "--log-key", vkey.text())
    assert code == 0, report
    with pytest.raises(tlog.FormatError, match="does not match"):
        tlog.verifier_key_parse(vkey.text().replace("+ad85", "+ad86"))


@pytest.mark.parametrize("after_root", ["\n\nextension\n", "\n\n"], ids=["blank-then-extension", "blank-at-the-end"])
def test_a_checkpoint_with_an_empty_extension_line_is_refused_by_aics_tlog_and_by_us(log_key, after_root, tmp_path):
    """tlog-checkpoint: extension lines, if any, MUST be non-empty. A note's text may hold blank lines (its
    last blank line separates the signatures), so a log key could sign such a text."""
    vkey = tlog.verifier_key(ORIGIN, log_key.public_key())
    text = f"{ORIGIN}\n1\n{b64(tlog.entry_leaf_hash(b'x'))}" + after_root
    note = tlog.Note(text, (tlog.SignatureLine(ORIGIN, vkey.key_id, log_key.sign(text.encode())),)).serialize()

    code, report = aics_tlog("verify-checkpoint", "--note", write(tmp_path / "note", note), "--log-key", vkey.text())
    assert (code, report["error"]) == (1, "invalid checkpoint: checkpoint lines must be non-empty")
    with pytest.raises(tlog.FormatError, match="extension lines are not empty"):
        tlog.checkpoint_verify(note, [vkey])


def test_aics_tlog_reads_the_checkpoint_and_authenticates_the_right_edge_from_our_tile_directory(log):
    code, report = aics_tlog("verify-checkpoint", "--tiles", str(log.directory), "--log-key", log.vkey)

    assert code == 0, report
    assert (report["tiles_ok"], report["size"], report["root"]) == (True, log.size, b64(log.tree().root()))


# Inclusion ------------------------------------------------------------------------------------------


def test_our_inclusion_proofs_verify_with_aics_tlog_in_proof_file_mode(log, tmp_path):
    tree = log.tree()
    for index in indexes_of(log.size):
        proof = tree.inclusion_proof(index)
        assert tlog.inclusion_valid(log.leaf_hash(index), index, log.size, proof, tree.root())
        code, report = aics_tlog(
            "verify-inclusion",
            "--leaf", write(tmp_path / "entry", log.entries[index]),
            "--index", str(index),
            "--checkpoint", str(log.note_file),
            "--log-key", log.vkey,
            "--proof", proof_file(tmp_path / "proof.b64", proof),
        )  # fmt: skip
        assert code == 0, (index, report)
        assert (report["checkpoint_verified"], report["index"], report["size"]) == (True, index, log.size)


def test_aics_tlog_proves_entries_from_our_tile_directory(log, tmp_path):
    tree = log.tree()
    for index in indexes_of(log.size):
        entry_out = tmp_path / f"entry-{index}"
        code, report = aics_tlog(
            "verify-inclusion",
            "--tiles", str(log.directory),
            "--checkpoint", str(log.note_file),
            "--log-key", log.vkey,
            "--index", str(index),
            "--entry-out", str(entry_out),
        )  # fmt: skip
        assert code == 0, (index, report)
        assert report["leaf_hash"] == log.leaf_hash(index).hex()
        assert report["proof_length"] == len(tree.inclusion_proof(index))
        assert entry_out.read_bytes() == log.entries[index]


def test_our_tlog_proof_text_verifies_with_aics_tlog_split_into_its_parts_and_as_a_bundle(log, tmp_path):
    """aics-tlog has no tlog-proof@v1 reader: the proof's parts go to its proof-file mode, and to its
    offline bundle (the AICS-1 wire form, which an entry without an envelope may use for inclusion)."""
    index = log.size - 1
    text = tlog.TlogProof(index, tuple(log.tree().inclusion_proof(index)), log.note, log.entries[index]).text()
    proof = tlog.tlog_proof_parse(text)
    assert proof.extra is not None
    assert tlog.tlog_proof_verify(text, log.entries[index], [tlog.verifier_key_parse(log.vkey)], origin=ORIGIN)

    code, report = aics_tlog(
        "verify-inclusion",
        "--leaf", write(tmp_path / "entry", proof.extra),
        "--index", str(proof.index),
        "--checkpoint", write(tmp_path / "proof-checkpoint.note", proof.checkpoint_note),
        "--log-key", log.vkey,
        "--proof", proof_file(tmp_path / "proof.b64", list(proof.hashes)),
    )  # fmt: skip
    assert code == 0, report
    assert report["checkpoint_verified"] is True

    bundle = write(tmp_path / "bundle.json", json.dumps(wire_bundle(proof)))
    code, report = aics_tlog("verify-bundle", "--bundle", bundle, "--log-key", log.vkey, "--offline")
    assert code == 0, report
    assert (report["index"], report["size"], report["leaf_hash"]) == (index, log.size, log.leaf_hash(index).hex())


def wire_bundle(proof: tlog.TlogProof) -> dict:
    """A tlog-proof@v1 in aics-tlog's offline bundle form (U64 = unpadded base64url)."""

    def u64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    assert proof.extra is not None
    return {
        "entry_bytes": u64(proof.extra),
        "index": proof.index,
        "inclusion_proof": [b64(h) for h in proof.hashes],
        "checkpoint_note": u64(proof.checkpoint_note.encode()),
        "envelope": None,
        "body_or_ct": None,
    }


# Consistency ----------------------------------------------------------------------------------------


def test_our_consistency_proofs_verify_with_aics_tlog(log, tmp_path):
    tree = log.tree()
    for old in old_sizes_of(log.size):
        proof = tree.consistency_proof(old)
        assert tlog.consistency_valid(old, log.size, tree.root(old), tree.root(), proof)
        code, report = aics_tlog(
            "verify-consistency",
            "--old-size", str(old),
            "--new-size", str(log.size),
            "--old-root", b64(tree.root(old)),
            "--new-root", b64(tree.root()),
            "--proof", proof_file(tmp_path / "consistency.b64", proof),
        )  # fmt: skip
        assert code == 0, (old, report)


def test_aics_tlog_proves_our_older_checkpoints_are_prefixes_of_our_tile_directory(log, tmp_path):
    for old in old_sizes_of(log.size)[:3] + old_sizes_of(log.size)[-1:]:
        code, report = aics_tlog(
            "verify-consistency",
            "--tiles", str(log.directory),
            "--log-key", log.vkey,
            "--old-checkpoint", write(tmp_path / "old.note", log.signed(old)),
        )  # fmt: skip
        assert code == 0, (old, report)
        assert (report["old_size"], report["new_size"]) == (old, log.size)
        assert report["proof_length"] == len(log.tree().consistency_proof(old))


# Refusals: a wrong key ------------------------------------------------------------------------------


def test_a_checkpoint_signed_with_a_wrong_key_is_refused_by_aics_tlog_and_by_us(small_log, tmp_path):
    wrong = small_log.signed(small_log.size, key=Ed25519PrivateKey.generate())
    code, report = aics_tlog(
        "verify-checkpoint", "--note", write(tmp_path / "wrong.note", wrong), "--log-key", small_log.vkey
    )
    assert code == 1
    assert report["error"] == f"no signature from log key {ORIGIN} {small_log.vkey.split('+')[1]}"
    with pytest.raises(tlog.FormatError, match="no signature of a trusted key"):
        tlog.checkpoint_verify(wrong, [tlog.verifier_key_parse(small_log.vkey)])

    # The same with our key's ID on the line: the signature itself fails.
    note = tlog.note_parse(wrong)
    forged_line = tlog.SignatureLine(
        ORIGIN, tlog.verifier_key_parse(small_log.vkey).key_id, note.signatures[0].signature
    )
    forged = tlog.Note(note.text, (forged_line,)).serialize()
    code, report = aics_tlog(
        "verify-checkpoint", "--note", write(tmp_path / "forged.note", forged), "--log-key", small_log.vkey
    )
    assert code == 1
    assert report["error"] == f"log signature from {ORIGIN} failed verification"
    with pytest.raises(tlog.FormatError, match="does not verify"):
        tlog.checkpoint_verify(forged, [tlog.verifier_key_parse(small_log.vkey)])

    # And in a tile directory: the tiles are right, the checkpoint is not ours.
    (small_log.directory / "checkpoint").write_text(wrong)
    code, report = aics_tlog("verify-checkpoint", "--tiles", str(small_log.directory), "--log-key", small_log.vkey)
    assert code == 1
    assert "no tile source served a checkpoint that verifies" in report["error"]


def test_a_checkpoint_whose_size_or_root_was_changed_is_refused_by_aics_tlog_and_by_us(small_log, tmp_path):
    lines = small_log.note.split("\n")
    for changed in (
        "\n".join([lines[0], str(small_log.size + 1), *lines[2:]]),
        "\n".join([lines[0], lines[1], b64(small_log.tree().root(small_log.size - 1)), *lines[3:]]),
    ):
        code, report = aics_tlog(
            "verify-checkpoint", "--note", write(tmp_path / "changed.note", changed), "--log-key", small_log.vkey
        )
        assert (code, report["error"]) == (1, f"log signature from {ORIGIN} failed verification")
        with pytest.raises(tlog.FormatError, match="does not verify"):
            tlog.checkpoint_verify(changed, [tlog.verifier_key_parse(small_log.vkey)])


def test_a_checkpoint_for_another_origin_is_refused_by_aics_tlog_and_by_us(small_log):
    code, report = aics_tlog(
        "verify-checkpoint", "--note", str(small_log.note_file), "--log-key", small_log.vkey, "--origin", "other/log"
    )
    assert code == 1
    assert report["error"] == f"origin mismatch: expected 'other/log', got {ORIGIN!r}"
    with pytest.raises(tlog.FormatError, match="origin"):
        tlog.checkpoint_verify(small_log.note, [tlog.verifier_key_parse(small_log.vkey)], origin="other/log")


# Refusals: a tile with one changed byte -------------------------------------------------------------


def flip_byte(log: Log, level: int, index: int, offset: int) -> None:
    """Change one byte of a tile, on disk and in memory."""
    data = bytearray(log.tiles[(level, index)])
    data[offset] ^= 0x01
    log.tiles[(level, index)] = bytes(data)
    (log.directory / tlog.tile_path(level, index, len(data) // 32)).write_bytes(bytes(data))


def proven_by(log: Log, index: int) -> tuple[int, dict]:
    return aics_tlog(
        "verify-inclusion",
        "--tiles", str(log.directory),
        "--checkpoint", str(log.note_file),
        "--log-key", log.vkey,
        "--index", str(index),
    )  # fmt: skip


def test_a_level_0_tile_with_one_changed_byte_is_refused_by_aics_tlog_and_by_us(small_log):
    good_proof = small_log.tree().inclusion_proof(0)
    flip_byte(small_log, 0, 0, 32 + 7)  # leaf 1's hash, the sibling in leaf 0's proof

    code, report = proven_by(small_log, 0)
    assert code == 1
    assert report["error"].startswith("TileVerificationError: "), report
    assert "tile/0/000" in report["error"]

    # TreeHashes does not authenticate tiles (the stored ones are checked by verify_audit): the root of a
    # full tile comes from the level above, so a proof through the changed hash is what fails.
    tampered = small_log.tree()
    root = tlog.checkpoint_parse(tlog.note_parse(small_log.note).text).root
    assert tampered.inclusion_proof(0) != good_proof
    assert not tlog.inclusion_valid(small_log.leaf_hash(0), 0, small_log.size, tampered.inclusion_proof(0), root)
    # Leaf 1 as the tampered tile holds it is not leaf 1 of the checkpointed tree.
    assert not tlog.inclusion_valid(tampered.complete(0, 1), 1, small_log.size, tampered.inclusion_proof(1), root)


def test_a_partial_tile_with_one_changed_byte_is_refused_by_aics_tlog_and_by_us(small_log):
    flip_byte(small_log, 0, 1, 31)  # the right edge: leaf 256, the one hash of tile/0/001.p/1

    code, report = aics_tlog("verify-checkpoint", "--tiles", str(small_log.directory), "--log-key", small_log.vkey)
    assert code == 1
    assert report["error"].startswith("TileVerificationError: "), report

    root = tlog.checkpoint_parse(tlog.note_parse(small_log.note).text).root
    assert small_log.tree().root() != root
    assert not tlog.inclusion_valid(
        small_log.tree().complete(0, 256), 256, small_log.size, small_log.tree().inclusion_proof(256), root
    )


def test_a_level_1_tile_with_one_changed_byte_is_refused_by_aics_tlog_and_by_us(large_log):
    flip_byte(large_log, 1, 0, 8192 - 1)  # the root of tile/0/255 as level 1 holds it

    code, report = proven_by(large_log, 0)
    assert code == 1
    assert report["error"].startswith("TileVerificationError: "), report
    assert "tile/1/000" in report["error"]

    # Leaf 0's proof holds the root of leaves 32768..65535, which our TreeHashes makes from that tile.
    root = tlog.checkpoint_parse(tlog.note_parse(large_log.note).text).root
    proof = large_log.tree().inclusion_proof(0)
    assert not tlog.inclusion_valid(large_log.leaf_hash(0), 0, large_log.size, proof, root)


def test_an_entry_bundle_with_one_changed_byte_is_refused_by_aics_tlog_and_by_us(small_log):
    path = small_log.directory / tlog.tile_path("entries", 0)
    data = bytearray(path.read_bytes())
    data[2 + 5] ^= 0x01  # inside entry 0, after its length
    path.write_bytes(bytes(data))

    code, report = proven_by(small_log, 0)
    assert code == 1
    assert report["error"].startswith("TileVerificationError: "), report
    assert "tile/entries/000" in report["error"]

    entry = tlog.entry_bundle_parse(bytes(data))[0]
    assert tlog.entry_leaf_hash(entry) != small_log.tree().complete(0, 0)


# Refusals: a proof for another leaf -----------------------------------------------------------------


def test_a_proof_for_another_leaf_is_refused_by_aics_tlog_and_by_us(small_log, tmp_path):
    tree, size = small_log.tree(), small_log.size
    root = tree.root()
    for index, other in ((0, 1), (5, 200), (256, 255), (100, 256)):
        proof = tree.inclusion_proof(other)
        assert not tlog.inclusion_valid(small_log.leaf_hash(index), index, size, proof, root)
        assert not tlog.inclusion_valid(small_log.leaf_hash(index), other, size, tree.inclusion_proof(index), root)
        code, report = aics_tlog(
            "verify-inclusion",
            "--leaf", write(tmp_path / "entry", small_log.entries[index]),
            "--index", str(index),
            "--checkpoint", str(small_log.note_file),
            "--log-key", small_log.vkey,
            "--proof", proof_file(tmp_path / "other.b64", proof),
        )  # fmt: skip
        assert (code, report["error"]) == (1, "inclusion proof does not verify"), (index, other)

    # From the tiles: the right proof, for a leaf that is not the one at that index.
    code, report = aics_tlog(
        "verify-inclusion",
        "--tiles", str(small_log.directory),
        "--checkpoint", str(small_log.note_file),
        "--log-key", small_log.vkey,
        "--index", "3",
        "--leaf-hash", small_log.leaf_hash(4).hex(),
    )  # fmt: skip
    assert (code, report["error"]) == (1, "the leaf is not included at this index under the checkpoint")


def test_a_tlog_proof_for_another_entry_is_refused_by_aics_tlog_and_by_us(small_log, tmp_path):
    index, other = 10, 11
    text = tlog.TlogProof(
        index, tuple(small_log.tree().inclusion_proof(index)), small_log.note, small_log.entries[other]
    ).text()
    with pytest.raises(tlog.FormatError, match="is not in the checkpointed tree"):
        tlog.tlog_proof_verify(text, small_log.entries[other], [tlog.verifier_key_parse(small_log.vkey)])

    bundle = write(tmp_path / "bundle.json", json.dumps(wire_bundle(tlog.tlog_proof_parse(text))))
    code, report = aics_tlog("verify-bundle", "--bundle", bundle, "--log-key", small_log.vkey, "--offline")
    assert (code, report["error"]) == (1, "inclusion proof does not verify against the checkpoint root")


def test_a_consistency_proof_for_another_history_is_refused_by_aics_tlog_and_by_us(small_log, tmp_path):
    tree, old = small_log.tree(), 100
    forked = lay_out(
        [small_log.leaf_hash(i) if i != 50 else tlog.entry_leaf_hash(b"rewritten") for i in range(small_log.size)]
    )
    forked_root = tlog.TreeHashes(lambda level, index: forked.get((level, index), b""), small_log.size).root()
    proof = tree.consistency_proof(old)
    assert not tlog.consistency_valid(old, small_log.size, tree.root(old), forked_root, proof)
    code, report = aics_tlog(
        "verify-consistency",
        "--old-size", str(old),
        "--new-size", str(small_log.size),
        "--old-root", b64(tree.root(old)),
        "--new-root", b64(forked_root),
        "--proof", proof_file(tmp_path / "consistency.b64", proof),
    )  # fmt: skip
    assert (code, report["error"]) == (1, "consistency proof does not verify")

    # A log that rewrote entry 50 and re-signed: its tiles do not extend the checkpoint we saved.
    (small_log.directory / "checkpoint").write_text(
        tlog.checkpoint_sign(tlog.Checkpoint(ORIGIN, small_log.size, forked_root), [small_log.key]).serialize()
    )
    for (level, index), data in forked.items():
        (small_log.directory / tlog.tile_path(level, index, len(data) // 32)).write_bytes(data)
    code, report = aics_tlog(
        "verify-consistency",
        "--tiles", str(small_log.directory),
        "--log-key", small_log.vkey,
        "--old-checkpoint", write(tmp_path / "old.note", small_log.signed(old)),
    )  # fmt: skip
    assert (code, report["error"]) == (1, "the new checkpoint does not extend the old one: history was rewritten")


# Cosignatures ---------------------------------------------------------------------------------------


def test_our_cosignature_line_verifies_with_aics_tlog_as_a_quorum_of_one(small_log, tmp_path):
    witness = Ed25519PrivateKey.generate()
    witness_vkey = tlog.verifier_key(WITNESS, witness.public_key(), tlog.SIGNATURE_COSIGNATURE_V1).text()
    note = tlog.note_parse(small_log.note)
    line = tlog.cosignature_sign(WITNESS, witness, 1767225600, note.text)
    cosigned = tlog.Note(note.text, (*note.signatures, line)).serialize()

    code, report = aics_tlog(
        "verify-checkpoint",
        "--note", write(tmp_path / "cosigned.note", cosigned),
        "--log-key", small_log.vkey,
        "--witness-key", witness_vkey,
        "--quorum", "1",
    )  # fmt: skip
    assert code == 0, report
    assert (report["cosignatures"], report["witnesses"]) == (1, [WITNESS])
    ours = tlog.checkpoint_verify(
        cosigned, [tlog.verifier_key_parse(small_log.vkey)], [tlog.verifier_key_parse(witness_vkey)]
    )
    assert [(key.text(), timestamp) for key, timestamp in ours.cosigners] == [(witness_vkey, 1767225600)]

    # The witness's answer as the add-checkpoint endpoint gives it parses back to the same line.
    assert tlog.cosignature_lines_parse(line.text()) == [line]


def test_a_cosignature_of_another_checkpoint_is_refused_by_aics_tlog_and_by_us(small_log, tmp_path):
    witness = Ed25519PrivateKey.generate()
    witness_vkey = tlog.verifier_key(WITNESS, witness.public_key(), tlog.SIGNATURE_COSIGNATURE_V1).text()
    note = tlog.note_parse(small_log.note)
    older = tlog.note_parse(small_log.signed(small_log.size - 1))
    line = tlog.cosignature_sign(WITNESS, witness, 1767225600, older.text)
    cosigned = tlog.Note(note.text, (*note.signatures, line)).serialize()

    code, report = aics_tlog(
        "verify-checkpoint",
        "--note", write(tmp_path / "cosigned.note", cosigned),
        "--log-key", small_log.vkey,
        "--witness-key", witness_vkey,
        "--quorum", "1",
    )  # fmt: skip
    assert (code, report["error"]) == (1, f"cosignature from {WITNESS} failed verification")
    with pytest.raises(tlog.FormatError, match="cosignature of .* does not verify"):
        tlog.checkpoint_verify(
            cosigned, [tlog.verifier_key_parse(small_log.vkey)], [tlog.verifier_key_parse(witness_vkey)]
        )


def test_a_cosignature_by_an_unconfigured_witness_does_not_make_the_quorum_for_aics_tlog_or_us(small_log, tmp_path):
    configured = Ed25519PrivateKey.generate()
    configured_vkey = tlog.verifier_key(WITNESS, configured.public_key(), tlog.SIGNATURE_COSIGNATURE_V1).text()
    note = tlog.note_parse(small_log.note)
    stranger = tlog.cosignature_sign(WITNESS, Ed25519PrivateKey.generate(), 1767225600, note.text)
    cosigned = tlog.Note(note.text, (*note.signatures, stranger)).serialize()

    code, report = aics_tlog(
        "verify-checkpoint",
        "--note", write(tmp_path / "cosigned.note", cosigned),
        "--log-key", small_log.vkey,
        "--witness-key", configured_vkey,
        "--quorum", "1",
    )  # fmt: skip
    assert (code, report["error"]) == (1, "quorum not met: 0 valid fresh cosignatures < 1")
    ours = tlog.checkpoint_verify(
        cosigned, [tlog.verifier_key_parse(small_log.vkey)], [tlog.verifier_key_parse(configured_vkey)]
    )
    assert ours.cosigners == ()
